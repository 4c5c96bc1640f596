package owners_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/emsf/emsf/coordinator/coordtest"
	"github.com/emsf/emsf/coordinator/owners"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
	"github.com/emsf/emsf/worker/wire"
	"github.com/emsf/emsf/worker/wire/proto"
)

// The harness, in the style of nomad's scheduler Harness: the sequencer
// (owners.Run) runs against a fake cluster and a fake store that record
// what it does and inject faults at chosen events ("kill worker w at the
// commit of iteration i", "lose the record write of version v"), with
// nothing running: no server, no process, no timing. The fake workers
// speak the protocol's messages (package proto) and compute with package
// factor in-process, as the real ones do (gather rows of D and K from
// their owners, compute the shard, fold the slices in the plan's order,
// commit), so the tests assert the bits of the fitted model against
// factor.Fit as well as the sequence of commits.

// harness is one scenario: data, the fake cluster and store, the faults.
type harness struct {
	t      *testing.T
	n, m   int
	u      int
	tie    factor.Tie
	shards []*shard.Shard
	groups []shard.DGroup
	rows   [][]int32
	init   *factor.Model

	store   *fakeStore
	cluster *fakeCluster
	clock   *fakeClock
}

// newHarness makes count data of n states, u actions, per shards per
// action (cut into cells column cells), an initial model of order m, and
// a fake cluster of workers w0 … w{workers−1}.
func newHarness(t *testing.T, n, m, u int, tie factor.Tie, per, cells, workers int, seed uint64) *harness {
	t.Helper()
	shards := coordtest.OwnersData(t, n, u, seed, per, cells)
	shard.Describe(shards)
	groups, rows := shard.CutDGroups(shards, tie)
	h := &harness{t: t, n: n, m: m, u: u, tie: tie, shards: shards, groups: groups, rows: rows,
		init: factor.NewRandom(n, m, u, tie, seed+1), store: newFakeStore(), clock: &fakeClock{now: time.Unix(1e9, 0)}}
	for g := range groups {
		data := encodeRows(rows[g])
		h.store.put("owners/"+"rows", proto.RowsObject("job", g), data)
		h.groups[g].RowsCRC = crc(data)
	}
	h.cluster = newFakeCluster(h)
	for w := range workers {
		h.cluster.add("w" + strconv.Itoa(w))
	}
	return h
}

// job is the harness's job, as metadata.
func (h *harness) job() *owners.Job {
	j := &owners.Job{Name: "job", Groups: h.groups, Bucket: "objects", JobsBucket: "jobs"}
	for _, sh := range h.shards {
		j.Shards = append(j.Shards, sh.Info)
	}
	return j
}

// local is the reference: factor.Fit on the harness's shards.
func (h *harness) local(iters, groupNNZ int) *factor.Model {
	h.t.Helper()
	md := h.init.Clone()
	if _, err := factor.Fit(context.Background(), md, shard.Blocks(h.shards), factor.FitOptions{
		Converger: factor.Converger{MaxIter: iters}, GroupNNZ: groupNNZ, Workers: 1}); err != nil {
		h.t.Fatal(err)
	}
	return md
}

// run fits the harness's job with opt on a store session of its own (a
// coordinator), and returns the fitted model.
func (h *harness) run(ctx context.Context, ss *session, opt owners.Options) (*factor.Model, owners.Report, error) {
	md := h.init.Clone()
	hdr := &factor.Model{N: md.N, M: md.M, U: md.U, Tie: md.Tie, Iteration: md.Iteration, LogLik: md.LogLik, WKL: md.WKL}
	var last owners.Report
	rep := opt.Report
	opt.Report = func(r owners.Report) {
		last = r
		if rep != nil {
			rep(r)
		}
	}
	if opt.Clock == nil {
		opt.Clock = h.clock
	}
	if opt.TaskTimeout == 0 {
		opt.TaskTimeout = time.Hour // the fake never times out: a test that hangs is a bug
	}
	_, err := owners.Run(ctx, h.cluster.as(ss), ss, &fakeModel{h: h, md: md}, h.job(), hdr, opt)
	md.Iteration, md.LogLik, md.WKL = hdr.Iteration, hdr.LogLik, hdr.WKL
	return md, last, err
}

func crc(data []byte) string {
	return strconv.FormatUint(uint64(crc32.Checksum(data, crc32.MakeTable(crc32.Castagnoli))), 16)
}

func floatBytes(xs []float64) []byte {
	if len(xs) == 0 {
		return []byte{}
	}
	return slices.Clone(unsafe.Slice((*byte)(unsafe.Pointer(&xs[0])), 8*len(xs)))
}

func readFloats(b []byte) []float64 {
	xs := make([]float64, len(b)/8)
	if len(xs) > 0 {
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&xs[0])), 8*len(xs)), b)
	}
	return xs
}

func encodeRows(rows []int32) []byte {
	if len(rows) == 0 {
		return []byte{}
	}
	return slices.Clone(unsafe.Slice((*byte)(unsafe.Pointer(&rows[0])), 4*len(rows)))
}

// fakeClock is time that stands still (no task is ever late, no worker
// slower than another: no backups, no rebalance), or, with advance, moves
// only when someone sleeps: a task that never answers becomes late after
// the same sleeps of the idle workers whatever the machine's load.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	advance bool
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	if c.advance {
		c.now = c.now.Add(d)
	}
	c.mu.Unlock()
	runtime.Gosched()
	return nil
}

// fakeStore is the KV record (compare-and-set by revision) and the
// objects, shared by the coordinators (sessions) of a scenario.
type fakeStore struct {
	mu      sync.Mutex
	rec     *owners.Record
	rev     int
	objects map[string][]byte
	// loseSave, when set, fails the record write of these versions once
	// each (a store that was away for a moment).
	loseSave map[int]bool
	lost     []int
	// corrupt are the shard objects a task finds corrupt until Repair
	// stores them again (noRepair: Repair cannot); repaired what it
	// stored. full, when set, is the version whose checkpoint the store
	// has no room for (its save fails with proto.FaultStoreFull).
	corrupt  map[string]bool
	noRepair bool
	repaired []string
	full     int
	// stall[v] is how many epochs (the first ones) the checkpoint save of
	// version v stalls in (proto.FaultStoreStalled: a full disk).
	stall map[int]int
}

func newFakeStore() *fakeStore {
	return &fakeStore{objects: map[string][]byte{}, loseSave: map[int]bool{}, corrupt: map[string]bool{}, stall: map[int]int{}}
}

func (fs *fakeStore) put(_, name string, data []byte) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.objects[name] = slices.Clone(data)
}

func (fs *fakeStore) delete(name string) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	delete(fs.objects, name)
}

func (fs *fakeStore) get(name string) ([]byte, bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	data, ok := fs.objects[name]
	return data, ok
}

// lease is the lease the record holds now.
func (fs *fakeStore) lease() (proto.Lease, bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.rec == nil {
		return proto.Lease{}, false
	}
	return fs.rec.Lease, true
}

// session is one coordinator's handle on the store: its last revision,
// what it announced.
type session struct {
	fs        *fakeStore
	name      string
	rev       int
	announced []int
	records   []owners.Record
}

func (fs *fakeStore) session(name string) *session { return &session{fs: fs, name: name} }

func copyRecord(r *owners.Record) *owners.Record {
	c := *r
	c.Y = slices.Clone(r.Y)
	c.Checkpoint.KCRC = slices.Clone(r.Checkpoint.KCRC)
	c.Checkpoint.DCRC = slices.Clone(r.Checkpoint.DCRC)
	return &c
}

func (s *session) Record(context.Context) (*owners.Record, error) {
	s.fs.mu.Lock()
	defer s.fs.mu.Unlock()
	if s.fs.rec == nil {
		return nil, nil
	}
	return copyRecord(s.fs.rec), nil
}

func (s *session) Begin(_ context.Context, r *owners.Record) error {
	s.fs.mu.Lock()
	defer s.fs.mu.Unlock()
	s.fs.rev++
	s.fs.rec, s.rev = copyRecord(r), s.fs.rev
	s.records = append(s.records, *copyRecord(r))
	return nil
}

func (s *session) Save(_ context.Context, r *owners.Record) error {
	s.fs.mu.Lock()
	defer s.fs.mu.Unlock()
	if s.fs.loseSave[r.Version] {
		delete(s.fs.loseSave, r.Version)
		s.fs.lost = append(s.fs.lost, r.Version)
		return errors.New("fake store: the write was lost")
	}
	if s.fs.rev != s.rev {
		return fmt.Errorf("fake store: revision %d, this coordinator wrote %d: %w", s.fs.rev, s.rev, owners.ErrLeaseLost)
	}
	s.fs.rev++
	s.fs.rec, s.rev = copyRecord(r), s.fs.rev
	s.records = append(s.records, *copyRecord(r))
	return nil
}

func (s *session) Announce(r *owners.Record) { s.announced = append(s.announced, r.Version) }

func (s *session) Put(_ context.Context, name string, data []byte) error {
	s.fs.put(s.name, name, data)
	return nil
}

func (s *session) Repair(_ context.Context, name string) error {
	s.fs.mu.Lock()
	defer s.fs.mu.Unlock()
	if s.fs.noRepair {
		return fmt.Errorf("fake store: %s: %w", name, owners.ErrNoRepair)
	}
	delete(s.fs.corrupt, name)
	s.fs.repaired = append(s.fs.repaired, name)
	return nil
}

func (s *session) Delete(_ context.Context, name string) error {
	s.fs.delete(name)
	return nil
}

// fakeModel is the initial model and the fitted one, held by the test.
type fakeModel struct {
	h  *harness
	md *factor.Model
}

func (f *fakeModel) Initial(_ context.Context, p *owners.Plan) ([][]string, []string, error) {
	md, m := f.md, f.md.M
	kcrc, dcrc := make([][]string, len(p.Cols)), make([]string, len(p.Groups))
	for kb, cbs := range p.Cols {
		for _, cb := range cbs {
			data := floatBytes(md.KT[kb][cb.Lo*m : cb.Hi*m])
			f.h.store.put("model", proto.KObject(p.Job, 0, kb, cb.C), data)
			kcrc[kb] = append(kcrc[kb], crc(data))
		}
	}
	for g, dg := range p.Groups {
		var rows []float64
		for _, i := range f.h.rows[g] {
			rows = append(rows, md.D[dg.DBlock][int(i)*m:int(i)*m+m]...)
		}
		data := floatBytes(rows)
		f.h.store.put("model", proto.DObject(p.Job, 0, g), data)
		dcrc[g] = crc(data)
	}
	return kcrc, dcrc, nil
}

func (f *fakeModel) Final(_ context.Context, p *owners.Plan, c owners.Checkpoint) error {
	md, m := f.md, f.md.M
	get := func(name, want string) ([]float64, error) {
		data, ok := f.h.store.get(name)
		if !ok || crc(data) != want {
			return nil, &owners.CorruptError{Object: name, Err: fmt.Errorf("fake model: %s missing or not of CRC %s", name, want)}
		}
		return readFloats(data), nil
	}
	// As natsexec's: every object checked before md changes (it stays
	// the initial model for a fall back to the start).
	for _, write := range []bool{false, true} {
		for kb, cbs := range p.Cols {
			for q, cb := range cbs {
				xs, err := get(proto.KObject(p.Job, c.Version, kb, cb.C), c.KCRC[kb][q])
				if err != nil {
					return err
				}
				if write {
					copy(md.KT[kb][cb.Lo*m:cb.Hi*m], xs)
				}
			}
		}
		for g, dg := range p.Groups {
			xs, err := get(proto.DObject(p.Job, c.Version, g), c.DCRC[g])
			if err != nil {
				return err
			}
			for q, i := range f.h.rows[g] {
				if write {
					copy(md.D[dg.DBlock][int(i)*m:int(i)*m+m], xs[q*m:q*m+m])
				}
			}
		}
	}
	return nil
}

// fakeCluster is the workers, their faults, and what they were asked.
type fakeCluster struct {
	h       *harness
	mu      sync.Mutex
	workers map[string]*fakeWorker
	guards  map[*guardEntry]bool
	quar    map[string]bool
	strikes map[string]int
	// killAt: at the first commit of version i any worker receives, kill
	// worker killAt[i] (its connection closes: it leaves the census, its
	// requests fail, guards watching it fire).
	killAt map[int]string
	// ops is what each coordinator (session name) asked: "op epoch
	// iteration worker".
	ops map[string][]string
}

type guardEntry struct {
	ids    []string
	cancel context.CancelCauseFunc
}

var errVanished = errors.New("fake cluster: the worker left")

func newFakeCluster(h *harness) *fakeCluster {
	return &fakeCluster{h: h, workers: map[string]*fakeWorker{}, guards: map[*guardEntry]bool{}, quar: map[string]bool{},
		strikes: map[string]int{}, killAt: map[int]string{}, ops: map[string][]string{}}
}

// add starts a worker.
func (c *fakeCluster) add(id string) *fakeWorker {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := &fakeWorker{c: c, id: id, alive: true, jobs: map[string]*fakeJob{}}
	c.workers[id] = w
	return w
}

// kill closes worker id's connection. The caller holds c.mu.
func (c *fakeCluster) killLocked(id string) {
	w := c.workers[id]
	if w == nil || !w.alive {
		return
	}
	w.alive = false
	for g := range c.guards {
		if slices.Contains(g.ids, id) {
			g.cancel(fmt.Errorf("worker %s: %w", id, errVanished))
		}
	}
}

// clusterView is the Cluster one coordinator sees (its asks are logged
// under its session's name).
type clusterView struct {
	*fakeCluster
	who string
}

func (c *fakeCluster) as(ss *session) owners.Cluster { return &clusterView{c, ss.name} }

func (v *clusterView) Census(_ context.Context, want int) ([]string, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	var ids []string
	for id, w := range v.workers {
		if w.alive {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	if len(ids) < want {
		return nil, owners.Fatal(fmt.Errorf("fake cluster: %d of %d workers", len(ids), want))
	}
	return ids, nil
}

func (v *clusterView) Ask(ctx context.Context, id string, r *proto.Request) (*proto.Reply, error) {
	v.mu.Lock()
	v.ops[v.who] = append(v.ops[v.who], fmt.Sprintf("%s %d %d %s", r.Op, r.Epoch, r.Iteration, id))
	w := v.workers[id]
	v.mu.Unlock()
	if w == nil {
		return nil, errors.New("fake cluster: no such worker")
	}
	return w.serve(ctx, r)
}

func (v *clusterView) Guard(ctx context.Context, ids []string, f func(ctx context.Context) error) error {
	gctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	g := &guardEntry{ids: ids, cancel: cancel}
	v.mu.Lock()
	v.guards[g] = true
	for _, id := range ids {
		if w := v.workers[id]; w != nil && !w.alive {
			cancel(fmt.Errorf("worker %s: %w", id, errVanished))
		}
	}
	v.mu.Unlock()
	defer func() {
		v.mu.Lock()
		delete(v.guards, g)
		v.mu.Unlock()
	}()
	err := f(gctx)
	if cause := context.Cause(gctx); err != nil && errors.Is(cause, errVanished) {
		return fmt.Errorf("%w (while: %w)", cause, err)
	}
	return err
}

func (c *fakeCluster) Strike(id string, _ error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.strikes[id]++
	if c.strikes[id] >= 3 {
		c.quar[id] = true
	}
}

func (c *fakeCluster) Quarantine(id string, _ error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.quar[id] = true
}

func (c *fakeCluster) Quarantined() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []string
	for id := range c.quar {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func (c *fakeCluster) Bytes() int64 { return 0 }

// opsOf returns what coordinator who asked, in order, of operation op
// (all when op is "").
func (c *fakeCluster) opsOf(who, op string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, o := range c.ops[who] {
		if op == "" || o[:len(op)] == op && o[len(op)] == ' ' {
			out = append(out, o)
		}
	}
	return out
}

// fakeWorker is a worker in memory: per job, the epoch it is at, its
// column blocks and row groups, the epoch's layout, and the partials it
// computed (the slices it serves).
type fakeWorker struct {
	c     *fakeCluster
	id    string
	alive bool
	jobs  map[string]*fakeJob
	// Faults: stray answers the census but serves no owners subject;
	// slow never answers a task (until cancelled); lie labels its task
	// answers with another shard; replay answers with the label of
	// another hand-out of the task (every field but the nonce).
	stray, slow, lie, replay bool
	// wrongFrom (≥ 1): from that iteration on it computes D̂ wrong (its
	// first entry scaled) and answers with the digest of what it
	// computed.
	wrongFrom            int
	tasks, verifications int
}

type fakeJob struct {
	epoch   int
	token   string
	req     proto.Request // the load's (shape, layout, groups, shapes)
	blocks  map[[2]int]*fakeBlock
	groups  map[int]*fakeGroup
	served  map[[2]int]*factor.Partial // (iteration, shard)
	scratch factor.Scratch
}

type fakeBlock struct {
	cb      proto.ColBlock
	version int
	kt      []float64
}

type fakeGroup struct {
	rg      proto.RowGroup
	rows    []int32
	version int
	d       []float64
}

// serve answers r as a worker does, fenced as the real ones are (an
// older epoch, another token or none is refused; a newer epoch is taken
// up only from a load the record names; an end only under the record's
// lease).
func (w *fakeWorker) serve(ctx context.Context, r *proto.Request) (*proto.Reply, error) {
	c := w.c
	if w.slow && r.Op == proto.OpTask {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !w.alive {
		return nil, errVanished
	}
	if w.stray {
		return nil, fmt.Errorf("fake cluster: worker %s: %w", w.id, owners.ErrUnreachable)
	}
	rep := &proto.Reply{Worker: w.id}
	if err := w.serveLocked(r, rep); err != nil {
		rep.Error = err.Error()
		var f *fault
		if errors.As(err, &f) {
			rep.Fault, rep.Object = f.fault, f.object
		}
	}
	return rep, nil
}

// fault is a worker's error with its proto.Fault* (and the object of a
// corrupt one), as the real workers classify store errors.
type fault struct {
	fault, object string
	err           error
}

func (f *fault) Error() string { return f.err.Error() }

func (w *fakeWorker) serveLocked(r *proto.Request, rep *proto.Reply) error {
	j := w.jobs[r.Job]
	lease, ok := w.c.h.store.lease()
	proven := ok && lease.Epoch == r.Epoch && lease.Fence == proto.FenceOf(r.Fence)
	switch {
	case r.Epoch < 1 || r.Fence == "":
		return errors.New("no epoch")
	case j != nil && r.Epoch < j.epoch:
		return fmt.Errorf("epoch %d is older than the job's %d", r.Epoch, j.epoch)
	case j != nil && r.Epoch == j.epoch && r.Fence != j.token:
		return errors.New("wrong fence")
	case r.Op == proto.OpEnd:
		if !proven {
			return errors.New("end not under the record's lease")
		}
		delete(w.jobs, r.Job)
		return nil
	case (j == nil || r.Epoch > j.epoch) && (r.Op != proto.OpLoad || !proven):
		return fmt.Errorf("epoch %d not taken up by %s", r.Epoch, r.Op)
	}
	switch r.Op {
	case proto.OpLoad:
		return w.load(r)
	case proto.OpTask:
		return w.task(j, r, rep)
	case proto.OpCommit:
		if v, ok := w.c.killAt[r.Iteration]; ok {
			delete(w.c.killAt, r.Iteration)
			w.c.killLocked(v)
			if !w.alive {
				return errVanished
			}
		}
		return w.commit(j, r, rep)
	case proto.OpSave:
		return w.save(j, r, rep)
	}
	return fmt.Errorf("unknown op %q", r.Op)
}

func (w *fakeWorker) load(r *proto.Request) error {
	j := &fakeJob{epoch: r.Epoch, token: r.Fence, req: *r, blocks: map[[2]int]*fakeBlock{}, groups: map[int]*fakeGroup{}, served: map[[2]int]*factor.Partial{}}
	fs := w.c.h.store
	for _, cb := range r.Blocks {
		name := proto.KObject(r.Job, r.Iteration, cb.KBlock, cb.C)
		data, ok := fs.get(name)
		if !ok || crc(data) != cb.CRC {
			return &fault{proto.FaultCorrupt, name, fmt.Errorf("load block %d/%d of version %d: missing or not of CRC %s", cb.KBlock, cb.C, r.Iteration, cb.CRC)}
		}
		j.blocks[[2]int{cb.KBlock, cb.C}] = &fakeBlock{cb: cb, version: r.Iteration, kt: readFloats(data)}
	}
	for _, g := range r.Groups {
		if g.Owner != w.id {
			continue
		}
		data, ok := fs.get(proto.RowsObject(r.Job, g.G))
		if !ok || crc(data) != g.RowsCRC {
			return fmt.Errorf("load rows of group %d", g.G)
		}
		rows := make([]int32, len(data)/4)
		copy(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(rows))), len(data)), data)
		name := proto.DObject(r.Job, r.Iteration, g.G)
		d, ok := fs.get(name)
		if !ok || crc(d) != g.CRC {
			return &fault{proto.FaultCorrupt, name, fmt.Errorf("load group %d of version %d: missing or not of CRC %s", g.G, r.Iteration, g.CRC)}
		}
		j.groups[g.G] = &fakeGroup{rg: g, rows: rows, version: r.Iteration, d: readFloats(d)}
	}
	w.jobs[r.Job] = j
	return nil
}

// peer returns worker id's state of the job at epoch e, or an error
// (gone, another epoch).
func (w *fakeWorker) peer(id, job string, e int) (*fakeJob, error) {
	p := w.c.workers[id]
	if p == nil || !p.alive {
		return nil, fmt.Errorf("peer %s: %w", id, errVanished)
	}
	pj := p.jobs[job]
	if pj == nil || pj.epoch != e {
		return nil, fmt.Errorf("peer %s is not at epoch %d", id, e)
	}
	return pj, nil
}

func (w *fakeWorker) task(j *fakeJob, r *proto.Request, rep *proto.Reply) error {
	h := w.c.h
	sh := h.shards[r.Shard]
	b, m, n := sh.Block, h.m, h.n
	h.store.mu.Lock()
	bad := h.store.corrupt[r.ShardObject]
	h.store.mu.Unlock()
	if bad {
		return &fault{proto.FaultCorrupt, r.ShardObject, fmt.Errorf("shard %s: checksum mismatch", r.ShardObject)}
	}
	kb := b.Action
	if h.tie == factor.TieSharedK {
		kb = 0
	}
	md := &factor.Model{N: n, M: m, U: 1, D: [][]float64{make([]float64, n*m)}, KT: [][]float64{make([]float64, n*m)}}
	// Rows of D from the owners of the shard's row groups, K rows from
	// the owners of the column blocks, at version Iteration−1.
	for _, g := range j.req.Groups {
		if !slices.Contains(g.Cells, r.Shard) {
			continue
		}
		pj, err := w.peer(g.Owner, r.Job, r.Epoch)
		if err != nil {
			return err
		}
		pg := pj.groups[g.G]
		if pg == nil || pg.version != r.Iteration-1 {
			return fmt.Errorf("group %d not at version %d", g.G, r.Iteration-1)
		}
		for _, i := range b.Rows {
			if int(i) >= g.Lo && int(i) < g.Hi {
				q, found := slices.BinarySearch(pg.rows, i)
				if !found {
					return fmt.Errorf("row %d not in group %d", i, g.G)
				}
				copy(md.D[0][int(i)*m:int(i)*m+m], pg.d[q*m:q*m+m])
			}
		}
	}
	for _, cb := range j.req.Layout[kb] {
		pj, err := w.peer(cb.Owner, r.Job, r.Epoch)
		if err != nil {
			return err
		}
		pb := pj.blocks[[2]int{cb.KBlock, cb.C}]
		if pb == nil || pb.version != r.Iteration-1 {
			return fmt.Errorf("block %d/%d not at version %d", cb.KBlock, cb.C, r.Iteration-1)
		}
		copy(md.KT[0][cb.Lo*m:cb.Hi*m], pb.kt)
	}
	blk := &factor.Block{Action: 0, Rows: b.Rows, Ptr: b.Ptr, Cols: b.Cols, Vals: b.Vals}
	p := &factor.Partial{}
	if err := factor.Compute(md, blk, &j.scratch, p, r.WithLogLik); err != nil {
		return err
	}
	p.Action = b.Action
	if w.wrongFrom >= 1 && r.Iteration >= w.wrongFrom && len(p.Dh) > 0 {
		p.Dh[0] *= 1 + 0x1p-20
	}
	if r.Verify {
		w.verifications++
	} else {
		j.served[[2]int{r.Iteration, r.Shard}] = p
		w.tasks++
	}
	rep.Out = wire.PartialDigest(p)
	label := proto.Label{Job: r.Job, Iteration: r.Iteration, Shard: r.Shard, ShardChecksum: sh.Checksum, ModelDigest: proto.Digest(r.Epoch), Nonce: r.Nonce}
	if w.lie {
		label.Shard++
	}
	if w.replay {
		label.Nonce = "an-earlier-hand-out"
	}
	rep.Label = label.String()
	rep.Y, rep.SumX, rep.NNZ = slices.Clone(p.Y), p.SumX, p.NNZ
	if !math.IsNaN(p.LogLik) {
		rep.LogLik, rep.HasLogLik = p.LogLik, true
	}
	return nil
}

// slice returns the partial of shard k in iteration iter that worker id
// serves (moved: the shards a backup's worker serves).
func (w *fakeWorker) slice(j *fakeJob, r *proto.Request, k int, moved map[int]string) (*factor.Partial, error) {
	id := moved[k]
	if id == "" {
		for _, s := range j.req.Shapes {
			if q := slices.Index(s.Shards, k); q >= 0 {
				id = s.Workers[q]
			}
		}
	}
	pj, err := w.peer(id, r.Job, r.Epoch)
	if err != nil {
		return nil, err
	}
	p := pj.served[[2]int{r.Iteration, k}]
	if p == nil {
		return nil, fmt.Errorf("slice of shard %d not served by %s", k, id)
	}
	return p, nil
}

func (w *fakeWorker) commit(j *fakeJob, r *proto.Request, rep *proto.Reply) error {
	h, m := w.c.h, w.c.h.m
	h.store.mu.Lock()
	full := r.Save && h.store.full == r.Iteration
	stall := r.Save && r.Epoch <= h.store.stall[r.Iteration]
	h.store.mu.Unlock()
	if full {
		return &fault{proto.FaultStoreFull, "", fmt.Errorf("store owners/%s/%d: the JetStream store is full (insufficient resources)", r.Job, r.Iteration)}
	}
	if stall {
		return &fault{proto.FaultStoreStalled, "", fmt.Errorf("store owners/%s/%d: the JetStream store did not acknowledge the write", r.Job, r.Iteration)}
	}
	moved := map[int]string{}
	for _, sw := range r.Moved {
		moved[sw.Shard] = sw.Worker
	}
	ys := map[int][]float64{}
	for _, y := range r.Y {
		ys[y.KBlock] = y.Y
	}
	alpha := cmp.Or(r.Alpha, 1)
	var digest []byte
	keys := slices.SortedFunc(func(yield func([2]int) bool) {
		for k := range j.blocks {
			if !yield(k) {
				return
			}
		}
	}, func(a, b [2]int) int { return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1])) })
	for _, key := range keys {
		b := j.blocks[key]
		sh := j.req.Shapes[b.cb.KBlock]
		f := factor.NewColumnFold(b.cb.Lo, b.cb.Hi, m, sh.NNZ, r.GroupNNZ)
		f.Reset()
		for _, k := range sh.Shards {
			p, err := w.slice(j, r, k, moved)
			if err != nil {
				return err
			}
			a, e := factor.SliceColumns(p.Cols, b.cb.Lo, b.cb.Hi)
			if err := f.Add(p.Cols[a:e], p.KhT[a*m:e*m]); err != nil {
				return err
			}
		}
		if b.version != r.Iteration-1 {
			return fmt.Errorf("block at version %d, commit of %d", b.version, r.Iteration)
		}
		factor.CommitKRows(b.kt, f.KhT(), ys[b.cb.KBlock], m, alpha)
		b.version = r.Iteration
		c := crc(floatBytes(b.kt))
		digest = append(digest, c...)
		if r.Save {
			h.store.put(w.id, proto.KObject(r.Job, r.Iteration, b.cb.KBlock, b.cb.C), floatBytes(b.kt))
			cb := b.cb
			cb.CRC = c
			rep.Blocks = append(rep.Blocks, cb)
		}
	}
	for _, gi := range slices.Sorted(func(yield func(int) bool) {
		for g := range j.groups {
			if !yield(g) {
				return
			}
		}
	}) {
		g := j.groups[gi]
		dh, x := make([]float64, len(g.rows)*m), make([]float64, len(g.rows))
		for _, k := range g.rg.Cells {
			p, err := w.slice(j, r, k, moved)
			if err != nil {
				return err
			}
			for c, i := range p.Rows {
				if int(i) < g.rg.Lo || int(i) >= g.rg.Hi {
					continue
				}
				q, _ := slices.BinarySearch(g.rows, i)
				for l, v := range p.Dh[c*m : c*m+m] {
					dh[q*m+l] += v
				}
				x[q] += p.X[c]
			}
		}
		if g.version != r.Iteration-1 {
			return fmt.Errorf("group at version %d, commit of %d", g.version, r.Iteration)
		}
		for q := range g.rows {
			factor.CommitRow(g.d[q*m:q*m+m], dh[q*m:q*m+m], x[q], alpha)
		}
		g.version = r.Iteration
		c := crc(floatBytes(g.d))
		digest = append(digest, c...)
		if r.Save {
			h.store.put(w.id, proto.DObject(r.Job, r.Iteration, gi), floatBytes(g.d))
			rep.Groups = append(rep.Groups, proto.RowGroup{G: gi, CRC: c})
		}
	}
	rep.Digest = crc(digest)
	return nil
}

func (w *fakeWorker) save(j *fakeJob, r *proto.Request, rep *proto.Reply) error {
	h := w.c.h
	for _, cb := range r.Blocks {
		b := j.blocks[[2]int{cb.KBlock, cb.C}]
		if b == nil || b.version != r.Iteration {
			return fmt.Errorf("save: block %d/%d not here at version %d", cb.KBlock, cb.C, r.Iteration)
		}
		h.store.put(w.id, proto.KObject(r.Job, r.Iteration, cb.KBlock, cb.C), floatBytes(b.kt))
		out := b.cb
		out.CRC = crc(floatBytes(b.kt))
		rep.Blocks = append(rep.Blocks, out)
	}
	for _, rg := range r.Groups {
		g := j.groups[rg.G]
		if g == nil || g.version != r.Iteration {
			return fmt.Errorf("save: group %d not here at version %d", rg.G, r.Iteration)
		}
		h.store.put(w.id, proto.DObject(r.Job, r.Iteration, rg.G), floatBytes(g.d))
		rep.Groups = append(rep.Groups, proto.RowGroup{G: rg.G, CRC: crc(floatBytes(g.d))})
	}
	return nil
}
