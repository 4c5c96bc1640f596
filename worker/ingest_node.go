package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
	"github.com/emsf/emsf/worker/ingestwire"
	"github.com/emsf/emsf/worker/wire"
	"github.com/emsf/emsf/worker/wire/proto"
)

// IngestNode is one worker's side of the distributed ingest
// (ingestwire's package comment has the phases), without its transport:
// the worker's NATS endpoint (ingest.go) and in-process clusters (tests)
// call its methods, and it reaches the other workers through IngestPeers.
// Per job it keeps the state of one epoch: a plan of a newer epoch
// cancels the older one's work and drops its data; a request of an older
// epoch is refused (*StaleError).
//
// Memory, per job: a mapper holds at most Plan.OutboxBytes of segments
// not yet pulled (it stops reading when full) plus one segment being
// filled per reducer and set; a reducer holds at most Plan.AheadBytes of
// segments of splits after the one it counts (it stops pulling ahead when
// full), its shard.Counter (its share of the transitions, 8 bytes each,
// 16 with counts) and then its share of the count matrices; a pull reply
// is at most Plan.PullBytes.
type IngestNode struct {
	id    string
	peers IngestPeers
	js    jetstream.JetStream
	// keep receives the shards a commit hands over (the worker's cache).
	keep  func(*shard.Shard)
	hooks IngestHooks

	mu      sync.Mutex
	jobs    map[string]*ingestJob
	idJobs  map[string]*idJob // the vocabulary phase (ingest_ids.go)
	changed chan struct{}     // closed when a job starts (pulls wait for their epoch)
	wg      sync.WaitGroup
	closed  bool
}

// IngestPeers reaches the other workers of an ingest.
type IngestPeers interface {
	// Pull asks worker for a split's segments (its reply's data is the
	// segments, ingestwire.AppendSegment).
	Pull(ctx context.Context, worker string, r *ingestwire.PullRequest) (*ingestwire.PullReply, []byte, error)
	// Tail asks worker for a bucket's rows (ingestwire.AppendRows).
	Tail(ctx context.Context, worker string, r *ingestwire.TailRequest) ([]byte, error)
	// IDPull asks worker for a list of the vocabulary phase.
	IDPull(ctx context.Context, worker string, r *ingestwire.IDPullRequest) (*ingestwire.PullReply, []byte, error)
}

// IngestHooks are test hooks: points of the pipeline where a test stops
// or kills a worker deterministically.
type IngestHooks struct {
	// Segment is called after a mapper put segment seq of split for
	// reducer into its outbox.
	Segment func(split, reducer, seq int)
	// BeforeMap is called before pass 2 reads a split.
	BeforeMap func(split int)
	// Fed is called after a reducer counted a split's segments.
	Fed func(split int)
	// Built is called after a build request's shards are built.
	Built func()
	// VocabRange is called with each range of a vocabulary the worker
	// built (IDRange).
	VocabRange func(group, rng int, v *shard.Vocab)
}

// StaleError is the error of a request of an epoch older than the
// worker's.
type StaleError struct {
	Job         string
	Epoch, Have int
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("worker: ingest %s: epoch %d is over (epoch %d runs)", e.Job, e.Epoch, e.Have)
}

// errNotYet is the error of a request of an epoch the worker has not
// started (its plan is on the way): the caller asks again.
var errNotYet = errors.New("worker: ingest: the epoch has not started here yet")

// IsNotYet reports whether err says that a worker has not yet started the
// epoch a request is of.
func IsNotYet(err error) bool { return errors.Is(err, errNotYet) }

// NewIngestNode returns the ingest side of worker id. js (nil: none)
// reads Object Store datasets and stores shards; keep (nil: none)
// receives each committed shard.
func NewIngestNode(id string, peers IngestPeers, js jetstream.JetStream, keep func(*shard.Shard), hooks IngestHooks) *IngestNode {
	return &IngestNode{id: id, peers: peers, js: js, keep: keep, hooks: hooks, jobs: map[string]*ingestJob{}, idJobs: map[string]*idJob{}, changed: make(chan struct{})}
}

// ID returns the node's worker id.
func (n *IngestNode) ID() string { return n.id }

// Close cancels every job and waits for their goroutines.
func (n *IngestNode) Close() {
	n.mu.Lock()
	n.closed = true
	for _, j := range n.jobs {
		j.cancel()
	}
	n.jobs = map[string]*ingestJob{}
	n.idJobs = map[string]*idJob{}
	n.mu.Unlock()
	n.wg.Wait()
}

// List lists a dataset: the files of a path, directory or glob, or the
// parts of an Object Store dataset.
func (n *IngestNode) List(ctx context.Context, r *ingestwire.ListRequest) (*ingestwire.ListReply, error) {
	bucket, name, isObj, err := ParseObjectInput(r.Input)
	if err != nil {
		return nil, err
	}
	var files []arrowio.DataFile
	if isObj {
		if n.js == nil {
			return nil, &arrowio.InputError{File: r.Input, Reason: "an Object Store input needs a NATS connection"}
		}
		files, err = ListObjectDataset(ctx, n.js, bucket, name, r.Format)
	} else {
		files, err = arrowio.ListDataset(r.Input, r.Format)
	}
	if err != nil {
		return nil, err
	}
	return &ingestwire.ListReply{Files: files}, nil
}

// scanSplit reads split sp of file f with fn: a split of a file on
// storage with arrowio.ScanSplit (after checking that the file is still
// the one listed), a whole Object Store part with ScanDataFile.
func (n *IngestNode) scanSplit(ctx context.Context, f arrowio.DataFile, sp arrowio.Split, opts arrowio.ReadOptions, fn func(*arrowio.TransitionBatch) error) error {
	if f.Stream {
		return ScanDataFile(ctx, n.js, f, opts, fn)
	}
	if err := arrowio.CheckFile(f); err != nil {
		return err
	}
	fh, err := os.Open(f.Name)
	if err != nil {
		return &arrowio.InputError{File: f.Name, Reason: "cannot open", Err: err}
	}
	defer fh.Close()
	return arrowio.ScanSplit(ctx, fh, f, sp, opts, fn)
}

// Scan is pass 1 of a split: its summary, or its data error. A split of
// a dataset of user ids is not read again: its rows, held since IDScan,
// are summarized renumbered (IDTrans), with the fingerprint of their ids
// taken then.
func (n *IngestNode) Scan(ctx context.Context, r *ingestwire.ScanRequest) (*ingestwire.ScanReply, error) {
	nb, err := n.numbering(r.Job, r.IDs, r.Split.Ordinal)
	if err != nil {
		return nil, err
	}
	rep := &ingestwire.ScanReply{}
	if nb != nil {
		// Read once, in idscan: summarized from memory.
		err := nb.rows.each(nb.index, func(b *arrowio.TransitionBatch) error {
			rep.Summary.AddRows(b.State, b.Action, b.Next, b.Count)
			return nil
		})
		rep.Summary.CRC = nb.rows.crc
		return rep, err
	}
	err = n.scanSplit(ctx, r.File, r.Split, r.Read, func(b *arrowio.TransitionBatch) error {
		rep.Summary.Add(b.State, b.Action, b.Next, b.Count)
		return nil
	})
	if rep.ScanIssue, err = scanIssue(ctx, err); err != nil {
		return nil, err
	}
	return rep, nil
}

// ingestJob is a job's ingest on one worker: one epoch's plan, its
// mapping and reducing, and what it built.
type ingestJob struct {
	plan   *ingestwire.Plan
	me     int
	router *shard.Router
	ctx    context.Context
	cancel context.CancelFunc
	done   sync.WaitGroup // the epoch's goroutines

	mu      sync.Mutex
	changed chan struct{} // closed and replaced at every change
	// Mapper: segments not yet pulled, by (split, reducer), and their
	// bytes; how many of its splits are read.
	out      map[[2]int]*outQueue
	outBytes int64
	maps     []int // ordinals of the splits it maps
	read     map[int]bool
	// Reducer: the count matrices of its rows, per set and action.
	reduced     bool
	mats        [][]*factor.Block
	transitions []int64
	// built holds, per build request, per row shard, the cells built.
	built [][][]*shard.Shard
	// The error that ends the epoch here; input, when set, is a data
	// error; peer a worker that could not be reached.
	err   error
	input *arrowio.InputError
	peer  string
}

// outQueue is a mapper's segments of one split for one reducer: segs[k]
// has sequence number first+k; next is the sequence number of the next
// segment; done: the split is read (and matched pass 1).
type outQueue struct {
	segs  [][]byte
	first int
	next  int
	done  bool
}

func (j *ingestJob) notifyLocked() {
	close(j.changed)
	j.changed = make(chan struct{})
}

// fail ends the epoch with err (the first error wins).
func (j *ingestJob) fail(err error, peer string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.err == nil {
		j.err, j.peer = err, peer
		var ie *arrowio.InputError
		if errors.As(err, &ie) {
			j.input = ie
		}
		j.notifyLocked()
	}
	j.cancel()
}

// job returns the state of job at epoch, or an error: *StaleError for an
// older epoch, errNotYet for one not started.
func (n *IngestNode) job(name string, epoch int) (*ingestJob, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	j := n.jobs[name]
	switch {
	case j == nil || j.plan.Epoch < epoch:
		return nil, errNotYet
	case j.plan.Epoch > epoch:
		return nil, &StaleError{Job: name, Epoch: epoch, Have: j.plan.Epoch}
	}
	return j, nil
}

// Plan starts pass 2 of an epoch: the worker maps its splits and reduces
// its buckets in the background (Status says how far it is). A plan of
// the epoch that runs is a no-op; of a newer one, it cancels the running
// epoch first.
func (n *IngestNode) Plan(p *ingestwire.Plan) error {
	me := -1
	for k, id := range p.Workers {
		if id == n.id {
			me = k
		}
	}
	if me < 0 {
		return fmt.Errorf("worker: ingest %s: worker %s is not in the plan of epoch %d", p.Job, n.id, p.Epoch)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return errors.New("worker: stopped")
	}
	if old := n.jobs[p.Job]; old != nil {
		if old.plan.Epoch > p.Epoch {
			return &StaleError{Job: p.Job, Epoch: p.Epoch, Have: old.plan.Epoch}
		}
		if old.plan.Epoch == p.Epoch {
			return nil
		}
		old.cancel()
	}
	ctx, cancel := context.WithCancel(context.Background())
	j := &ingestJob{plan: p, me: me, router: shard.NewRouter(p.Buckets, p.U), ctx: ctx, cancel: cancel,
		changed: make(chan struct{}), out: map[[2]int]*outQueue{}, read: map[int]bool{}}
	for _, sp := range p.Splits {
		if sp.Mapper == me {
			j.maps = append(j.maps, sp.Ordinal)
		}
	}
	n.jobs[p.Job] = j
	close(n.changed)
	n.changed = make(chan struct{})
	j.done.Add(2)
	n.wg.Add(2)
	go func() {
		defer n.wg.Done()
		defer j.done.Done()
		if err := n.mapAll(j); err != nil {
			j.fail(err, "")
		}
	}()
	go func() {
		defer n.wg.Done()
		defer j.done.Done()
		if err := n.reduce(j); err != nil {
			var pe *peerError
			peer := ""
			if errors.As(err, &pe) {
				peer = pe.worker
			}
			j.fail(err, peer)
		}
	}()
	return nil
}

// peerError is an error reaching another worker.
type peerError struct {
	worker string
	err    error
}

func (e *peerError) Error() string { return fmt.Sprintf("worker %s: %v", e.worker, e.err) }
func (e *peerError) Unwrap() error { return e.err }

// mapAll maps the worker's splits in order.
func (n *IngestNode) mapAll(j *ingestJob) error {
	for _, s := range j.maps {
		if n.hooks.BeforeMap != nil {
			n.hooks.BeforeMap(s)
		}
		if err := n.mapSplit(j, &j.plan.Splits[s]); err != nil {
			return err
		}
	}
	return nil
}

// holdSeed is the second seed of the holdout draws (loadData's "hold").
const holdSeed = 0x686f6c64

// segBuilder is the segment being filled for one reducer and set.
type segBuilder struct {
	seg ingestwire.Segment
	// combined's scratch.
	keys []tripleKey
	comb ingestwire.Segment
}

func (b *segBuilder) add(a, i, k int32, c float64) {
	s := &b.seg
	if s.Count == nil && c != 1 {
		s.Count = make([]float64, len(s.State), cap(s.State))
		for q := range s.Count {
			s.Count[q] = 1
		}
	}
	s.Action, s.State, s.Next = append(s.Action, a), append(s.State, i), append(s.Next, k)
	if s.Count != nil {
		s.Count = append(s.Count, c)
	}
}

// combined returns the segment with each (action, state, next state)
// once, its counts summed, when that is smaller than the segment (else
// the segment). Only for integer counts whose dataset sum is at most
// 2^53 (Plan.Combine): every partial sum is then an exact float64, so
// the reducer's sums are bitwise those of the transitions one by one, in
// any order (MapReduce's combiner).
func (b *segBuilder) combined() *ingestwire.Segment {
	s := &b.seg
	n := s.Len()
	b.keys = slices.Grow(b.keys[:0], n)[:n]
	for q := range n {
		b.keys[q] = tripleKey{hi: uint64(s.Action[q])<<32 | uint64(uint32(s.State[q])), lo: uint32(s.Next[q]), at: int32(q)}
	}
	slices.SortFunc(b.keys, func(x, y tripleKey) int {
		if x.hi != y.hi {
			return cmp.Compare(x.hi, y.hi)
		}
		return cmp.Compare(x.lo, y.lo)
	})
	distinct := 0
	for q, k := range b.keys {
		if q == 0 || k.hi != b.keys[q-1].hi || k.lo != b.keys[q-1].lo {
			distinct++
		}
	}
	if ingestwire.SegmentSize(distinct, true) >= ingestwire.SegmentSize(n, s.Count != nil) {
		return s
	}
	c := &b.comb
	c.Set = s.Set
	c.Action, c.State, c.Next, c.Count = c.Action[:0], c.State[:0], c.Next[:0], c.Count[:0]
	for q, k := range b.keys {
		v := 1.0
		if s.Count != nil {
			v = s.Count[k.at]
		}
		if q > 0 && k.hi == b.keys[q-1].hi && k.lo == b.keys[q-1].lo {
			c.Count[len(c.Count)-1] += v
			continue
		}
		c.Action, c.State, c.Next, c.Count = append(c.Action, s.Action[k.at]), append(c.State, s.State[k.at]), append(c.Next, s.Next[k.at]), append(c.Count, v)
	}
	return c
}

// tripleKey sorts a segment's transitions by (action, state, next state).
type tripleKey struct {
	hi uint64
	lo uint32
	at int32
}

func (b *segBuilder) reset() {
	s := &b.seg
	s.Action, s.State, s.Next, s.Count = s.Action[:0], s.State[:0], s.Next[:0], nil
}

// mapSplit is pass 2 of split sp: its transitions, each drawn into the
// training or held-out set as loadData draws it, in segments per
// reducer; then a check that it read what pass 1 read.
func (n *IngestNode) mapSplit(j *ingestJob, sp *ingestwire.MapSplit) error {
	p := j.plan
	f := p.Files[sp.File]
	var hold *rand.PCG // one draw a row (shard.SplitRow), from row First on
	if p.Holdout > 0 {
		hold = factor.PCGAt(p.Seed, holdSeed, uint64(sp.First))
	}
	sets := len(p.Sets())
	builders := make([]segBuilder, len(p.Workers)*sets)
	perSeg := max(1, p.SegmentBytes/20)
	emit := func(r, set int) error {
		b := &builders[r*sets+set]
		if b.seg.Len() == 0 {
			return nil
		}
		b.seg.Set = set
		seg := &b.seg
		if p.Combine {
			seg = b.combined()
		}
		data := ingestwire.AppendSegment(make([]byte, 0, ingestwire.SegmentSize(seg.Len(), seg.Count != nil)), seg)
		b.reset()
		return n.put(j, sp.Ordinal, r, data)
	}
	var fp shard.FingerprintHash
	rows := int64(0)
	read := p.Read
	nb, err := n.numbering(p.Job, p.IDs, sp.Ordinal)
	if err != nil {
		return err
	}
	route := func(b *arrowio.TransitionBatch) error {
		rows += int64(b.Len())
		for k, i := range b.State {
			a := b.Action[k]
			bk := j.router.Bucket(a, i)
			if bk < 0 {
				return fmt.Errorf("worker: ingest: action %d of %s has no bucket (pass 1 saw no transition of it)", a, f.Name)
			}
			r := p.Buckets[bk].Reducer
			c := 1.0
			if b.Count != nil {
				c = b.Count[k]
			}
			train, held, _ := shard.SplitRowSets(c, p.Holdout, hold, 0, nil)
			for _, part := range [...]struct {
				set int
				c   float64
			}{{ingestwire.SetTrain, train}, {ingestwire.SetHeld, held}} {
				if part.c == 0 {
					continue
				}
				sb := &builders[r*sets+part.set]
				sb.add(a, i, b.Next[k], part.c)
				if sb.seg.Len() >= perSeg {
					if err := emit(r, part.set); err != nil {
						return err
					}
				}
			}
		}
		return nil
	}
	if nb != nil {
		// The split's rows, held since idscan (read once).
		err = nb.rows.each(nb.index, route)
	} else {
		err = n.scanSplit(j.ctx, f, sp.Split, read, func(b *arrowio.TransitionBatch) error {
			fp.Add(b.State, b.Action, b.Next, b.Count)
			return route(b)
		})
	}
	if err != nil {
		if j.ctx.Err() != nil {
			return j.ctx.Err()
		}
		var ie *arrowio.InputError
		if errors.As(err, &ie) {
			return &arrowio.InputError{File: f.Name, Reason: "could not be read again as the first read read it (changed since?)", Err: errors.Join(shard.ErrInputChanged, err)}
		}
		return err
	}
	if nb == nil && (rows != sp.Rows || fp.Sum() != sp.CRC) {
		return &arrowio.InputError{File: f.Name, Reason: fmt.Sprintf(
			"changed while the dataset was read: bytes [%d, %d) held %d transitions (fingerprint %s) in the first read, %d (%s) in the second",
			sp.Offset, sp.Offset+sp.Length, sp.Rows, sp.CRC.Fingerprint(), rows, fp.Sum().Fingerprint()), Err: shard.ErrInputChanged}
	}
	for r := range p.Workers {
		for set := range sets {
			if err := emit(r, set); err != nil {
				return err
			}
		}
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	for r := range p.Workers {
		j.queue(sp.Ordinal, r).done = true
	}
	j.read[sp.Ordinal] = true
	j.notifyLocked()
	return nil
}

// queue returns the outbox queue of split s for reducer r. The caller
// holds j.mu.
func (j *ingestJob) queue(s, r int) *outQueue {
	q := j.out[[2]int{s, r}]
	if q == nil {
		q = &outQueue{}
		j.out[[2]int{s, r}] = q
	}
	return q
}

// put adds a segment to the outbox, waiting while the outbox is full
// (unless it is empty: a segment larger than the budget still goes).
func (n *IngestNode) put(j *ingestJob, s, r int, data []byte) error {
	j.mu.Lock()
	for j.outBytes > 0 && j.outBytes+int64(len(data)) > j.plan.OutboxBytes {
		ch := j.changed
		j.mu.Unlock()
		select {
		case <-ch:
		case <-j.ctx.Done():
			return j.ctx.Err()
		}
		j.mu.Lock()
	}
	q := j.queue(s, r)
	seq := q.next
	q.segs = append(q.segs, data)
	q.next++
	j.outBytes += int64(len(data))
	j.notifyLocked()
	j.mu.Unlock()
	if n.hooks.Segment != nil {
		n.hooks.Segment(s, r, seq)
	}
	return nil
}

// Pull serves a reducer's pull of a split's segments (see
// ingestwire.PullRequest): it drops the segments before From, and waits
// up to WaitMillis for one when there is none yet.
func (n *IngestNode) Pull(ctx context.Context, r *ingestwire.PullRequest) (*ingestwire.PullReply, []byte, error) {
	j, err := n.waitJob(ctx, r.Job, r.Epoch, r.WaitMillis)
	if err != nil {
		return nil, nil, err
	}
	p := j.plan
	if r.Split < 0 || r.Split >= len(p.Splits) || p.Splits[r.Split].Mapper != j.me || r.Reducer < 0 || r.Reducer >= len(p.Workers) {
		return nil, nil, fmt.Errorf("worker: ingest %s: no split %d for reducer %d here", r.Job, r.Split, r.Reducer)
	}
	timer := time.NewTimer(time.Duration(r.WaitMillis) * time.Millisecond)
	defer timer.Stop()
	j.mu.Lock()
	defer j.mu.Unlock()
	q := j.queue(r.Split, r.Reducer)
	if r.From < q.first || r.From > q.next {
		return nil, nil, fmt.Errorf("worker: ingest %s: split %d, reducer %d: asked from segment %d, have %d to %d", r.Job, r.Split, r.Reducer, r.From, q.first, q.next)
	}
	if drop := r.From - q.first; drop > 0 {
		for _, d := range q.segs[:drop] {
			j.outBytes -= int64(len(d))
		}
		clear(q.segs[:drop])
		q.segs = q.segs[drop:]
		q.first = r.From
		j.notifyLocked()
	}
	for {
		if j.err != nil {
			return nil, nil, j.err
		}
		if len(q.segs) > 0 {
			var data []byte
			k := 0
			for k < len(q.segs) && (k == 0 || len(data)+len(q.segs[k]) <= r.MaxBytes) {
				data = append(data, q.segs[k]...)
				k++
			}
			return &ingestwire.PullReply{Next: q.first + k}, data, nil
		}
		if q.done {
			return &ingestwire.PullReply{Next: q.next, Done: true}, nil, nil
		}
		ch := j.changed
		j.mu.Unlock()
		select {
		case <-ch:
		case <-timer.C:
			j.mu.Lock()
			return &ingestwire.PullReply{Next: r.From}, nil, nil
		case <-ctx.Done():
			j.mu.Lock()
			return nil, nil, ctx.Err()
		case <-j.ctx.Done():
			j.mu.Lock()
			return nil, nil, fmt.Errorf("worker: ingest %s: epoch %d ended", r.Job, r.Epoch)
		}
		j.mu.Lock()
	}
}

// waitJob is job, waiting up to waitMillis for an epoch not started yet.
func (n *IngestNode) waitJob(ctx context.Context, name string, epoch, waitMillis int) (*ingestJob, error) {
	deadline := time.Now().Add(time.Duration(waitMillis) * time.Millisecond)
	for {
		n.mu.Lock()
		ch := n.changed
		n.mu.Unlock()
		j, err := n.job(name, epoch)
		if !errors.Is(err, errNotYet) || time.Now().After(deadline) {
			return j, err
		}
		t := time.NewTimer(time.Until(deadline))
		select {
		case <-ch:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
		t.Stop()
	}
}

// pull is a pull from worker (this one: in place).
func (n *IngestNode) pull(ctx context.Context, worker string, r *ingestwire.PullRequest) (*ingestwire.PullReply, []byte, error) {
	if worker == n.id {
		return n.Pull(ctx, r)
	}
	rep, data, err := n.peers.Pull(ctx, worker, r)
	if err != nil && !IsNotYet(err) {
		return nil, nil, &peerError{worker, err}
	}
	return rep, data, err
}

// recvSplit is what a reducer received of one split: segments not yet
// counted, and whether the split is complete.
type recvSplit struct {
	segs [][]byte
	done bool
}

// reduce pulls the worker's segments of every split, counting each
// split's in sequence order and the splits in order; then it builds the
// count matrices of its rows.
func (n *IngestNode) reduce(j *ingestJob) error {
	p := j.plan
	ctx, cancel := context.WithCancel(j.ctx)
	defer cancel()
	F := len(p.Splits)
	recv := make([]recvSplit, F)
	var mu sync.Mutex
	changed := make(chan struct{})
	notify := func() {
		close(changed)
		changed = make(chan struct{})
	}
	head := 0          // the split being counted
	ahead := int64(0)  // bytes received of later splits
	var firstErr error // of a puller
	puller := func(s int) error {
		mapper := p.Workers[p.Splits[s].Mapper]
		from := 0
		for {
			mu.Lock()
			for s != head && ahead > p.AheadBytes {
				ch := changed
				mu.Unlock()
				select {
				case <-ch:
				case <-ctx.Done():
					return ctx.Err()
				}
				mu.Lock()
			}
			mu.Unlock()
			rep, data, err := n.pull(ctx, mapper, &ingestwire.PullRequest{Job: p.Job, Epoch: p.Epoch, Split: s, Reducer: j.me,
				From: from, MaxBytes: p.PullBytes, WaitMillis: 1000})
			if IsNotYet(err) {
				select {
				case <-time.After(20 * time.Millisecond):
					continue
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			if err != nil {
				return err
			}
			mu.Lock()
			if len(data) > 0 {
				recv[s].segs = append(recv[s].segs, data)
				if s != head {
					ahead += int64(len(data))
				}
			}
			recv[s].done = rep.Done
			notify()
			mu.Unlock()
			if rep.Done {
				return nil
			}
			from = rep.Next
		}
	}
	// Pullers, at most Window at once, started in split order.
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(1, p.Window))
	wg.Add(1)
	go func() {
		defer wg.Done()
		for s := range F {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				if err := puller(s); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
						notify()
					}
					mu.Unlock()
					cancel()
				}
			}()
		}
	}()
	defer wg.Wait()
	sets := p.Sets()
	counters := make([]shard.Counter, 2)
	err := func() error {
		for s := range F {
			for {
				mu.Lock()
				for len(recv[s].segs) == 0 && !recv[s].done && firstErr == nil && ctx.Err() == nil {
					ch := changed
					mu.Unlock()
					select {
					case <-ch:
					case <-ctx.Done():
					}
					mu.Lock()
				}
				if firstErr != nil {
					mu.Unlock()
					return firstErr
				}
				if ctx.Err() != nil {
					mu.Unlock()
					return ctx.Err()
				}
				if len(recv[s].segs) == 0 { // done
					head = s + 1
					if head < F {
						for _, d := range recv[head].segs {
							ahead -= int64(len(d))
						}
					}
					notify()
					mu.Unlock()
					break
				}
				data := recv[s].segs[0]
				recv[s].segs[0] = nil
				recv[s].segs = recv[s].segs[1:]
				mu.Unlock()
				err := ingestwire.DecodeSegments(data, func(seg *ingestwire.Segment) error {
					if seg.Set > ingestwire.SetHeld || (seg.Set == ingestwire.SetHeld && p.Holdout == 0) {
						return fmt.Errorf("worker: ingest %s: split %d: a segment of set %d", p.Job, s, seg.Set)
					}
					if _, err := counters[seg.Set].AddBatch(seg.State, seg.Action, seg.Next, seg.Count); err != nil {
						return fmt.Errorf("worker: ingest %s: split %d: %w", p.Job, s, err)
					}
					return nil
				})
				if err != nil {
					return err
				}
			}
			if n.hooks.Fed != nil {
				n.hooks.Fed(s)
			}
		}
		return nil
	}()
	if err != nil {
		cancel()
		return err
	}
	mats := make([][]*factor.Block, len(sets))
	transitions := make([]int64, len(sets))
	for _, set := range []int{ingestwire.SetTrain, ingestwire.SetHeld} {
		if set < len(sets) {
			transitions[set] = int64(counters[set].Len())
			mats[set] = counters[set].Matrices(p.U)
		}
	}
	if len(sets) > ingestwire.SetAll {
		mats[ingestwire.SetAll] = shard.Union(p.U, mats[ingestwire.SetTrain], mats[ingestwire.SetHeld])
		transitions[ingestwire.SetAll] = transitions[ingestwire.SetTrain] + transitions[ingestwire.SetHeld]
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.mats, j.transitions, j.reduced = mats, transitions, true
	j.notifyLocked()
	return nil
}

// Status reports the worker's progress in pass 2 of an epoch, waiting up
// to WaitMillis for a change when there is none to report.
func (n *IngestNode) Status(ctx context.Context, r *ingestwire.StatusRequest) (*ingestwire.StatusReply, error) {
	j, err := n.waitJob(ctx, r.Job, r.Epoch, r.WaitMillis)
	if err != nil {
		return nil, err
	}
	timer := time.NewTimer(time.Duration(r.WaitMillis) * time.Millisecond)
	defer timer.Stop()
	j.mu.Lock()
	defer j.mu.Unlock()
	report := func() *ingestwire.StatusReply {
		rep := &ingestwire.StatusReply{Maps: len(j.maps), Reduced: j.reduced, Transitions: j.transitions, Input: j.input, Peer: j.peer}
		if j.err != nil {
			rep.Error = j.err.Error()
		}
		for _, s := range j.maps {
			if !j.read[s] {
				continue
			}
			drained := true
			for r := range j.plan.Workers {
				if q := j.out[[2]int{s, r}]; q != nil && (len(q.segs) > 0 || !q.done) {
					drained = false
				}
			}
			if drained {
				rep.Mapped++
			}
		}
		return rep
	}
	was := report()
	for {
		now := report()
		if now.Error != "" || (now.Reduced && now.Mapped == now.Maps) || now.Mapped != was.Mapped || now.Reduced != was.Reduced {
			return now, nil
		}
		ch := j.changed
		j.mu.Unlock()
		select {
		case <-ch:
			j.mu.Lock()
		case <-timer.C:
			j.mu.Lock()
			return report(), nil
		case <-ctx.Done():
			j.mu.Lock()
			return nil, ctx.Err()
		}
	}
}

// reducedJob returns the job at epoch once it has its count matrices.
func (n *IngestNode) reducedJob(name string, epoch int) (*ingestJob, error) {
	j, err := n.job(name, epoch)
	if err != nil {
		return nil, err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.err != nil {
		return nil, j.err
	}
	if !j.reduced {
		return nil, fmt.Errorf("worker: ingest %s: epoch %d is not reduced here yet", name, epoch)
	}
	return j, nil
}

// bucketRows returns the positions [a, e) in the count matrix of the
// bucket's action of set of the rows [from, end) of bucket k (end < 0:
// to the bucket's last row).
func (j *ingestJob) bucketRows(set, k int, from, end int32) (*factor.Block, int, int, error) {
	p := j.plan
	if set < 0 || set >= len(p.Sets()) || k < 0 || k >= len(p.Buckets) || p.Buckets[k].Reducer != j.me {
		return nil, 0, 0, fmt.Errorf("worker: ingest %s: no bucket %d of set %d here", p.Job, k, set)
	}
	bk := p.Buckets[k]
	hi := int32(bk.RowHi)
	if end >= 0 {
		hi = min(hi, end)
	}
	lo := max(int32(bk.RowLo), from)
	b := j.mats[set][bk.Action]
	a, e := factor.SliceColumns(b.Rows, int(lo), int(max(lo, hi)))
	return b, a, e, nil
}

// Cut is one link of an action's cut chain (shard.CutStep) over bucket
// r.Bucket.
func (n *IngestNode) Cut(ctx context.Context, r *ingestwire.CutRequest) (*ingestwire.CutReply, error) {
	j, err := n.reducedJob(r.Job, r.Epoch)
	if err != nil {
		return nil, err
	}
	b, a, e, err := j.bucketRows(r.Set, r.Bucket, 0, -1)
	if err != nil {
		return nil, err
	}
	nnz := make([]int64, e-a)
	for q := range nnz {
		nnz[q] = b.Ptr[a+q+1] - b.Ptr[a+q]
	}
	cuts, carry := shard.CutStep(nnz, r.Carry, j.plan.Target)
	rep := &ingestwire.CutReply{Carry: carry, Rows: e - a, Cuts: make([]int32, len(cuts))}
	for k, c := range cuts {
		rep.Cuts[k] = b.Rows[a+c]
	}
	return rep, nil
}

// Tail serves a bucket's rows to the builder of a shard that runs into
// it.
func (n *IngestNode) Tail(ctx context.Context, r *ingestwire.TailRequest) ([]byte, error) {
	j, err := n.reducedJob(r.Job, r.Epoch)
	if err != nil {
		return nil, err
	}
	b, a, e, err := j.bucketRows(r.Set, r.Bucket, r.From, r.End)
	if err != nil {
		return nil, err
	}
	stop := a
	for size := 4; stop < e; stop++ {
		size += ingestwire.RowsSize(1, int(b.Ptr[stop+1]-b.Ptr[stop])) - 4
		if stop > a && size > r.MaxBytes {
			break
		}
	}
	return ingestwire.AppendRows(nil, b, a, stop), nil
}

// tail is a tail request to worker (this one: in place).
func (n *IngestNode) tail(ctx context.Context, worker string, r *ingestwire.TailRequest) ([]byte, error) {
	if worker == n.id {
		return n.Tail(ctx, r)
	}
	data, err := n.peers.Tail(ctx, worker, r)
	if err != nil {
		return nil, &peerError{worker, err}
	}
	return data, nil
}

// Build builds row shards: its rows of each (and those a tail names,
// pulled from their buckets' reducers), cut into column cells; it
// returns their lines, and keeps the cells for Commit.
func (n *IngestNode) Build(ctx context.Context, r *ingestwire.BuildRequest) (*ingestwire.BuildReply, error) {
	j, err := n.reducedJob(r.Job, r.Epoch)
	if err != nil {
		return nil, err
	}
	p := j.plan
	rep := &ingestwire.BuildReply{Lines: make([][]shard.Line, len(r.Shards))}
	built := make([][]*shard.Shard, len(r.Shards))
	for k, bs := range r.Shards {
		own, a, e, err := j.bucketRows(bs.Set, bs.Bucket, bs.First, bs.End)
		if err != nil {
			return nil, err
		}
		if own.Action != bs.Action {
			return nil, fmt.Errorf("worker: ingest %s: bucket %d is of action %d, not %d", p.Job, bs.Bucket, own.Action, bs.Action)
		}
		if e <= a {
			return nil, fmt.Errorf("worker: ingest %s: bucket %d has no row %d of set %d", p.Job, bs.Bucket, bs.First, bs.Set)
		}
		b := blockPositions(own, a, e)
		if len(bs.Tails) > 0 {
			// The shard runs into later buckets: a block of its own.
			b = &factor.Block{Action: own.Action, Rows: append([]int32(nil), b.Rows...), Ptr: append([]int64(nil), b.Ptr...),
				Cols: append([]int32(nil), b.Cols...), Vals: append([]float64(nil), b.Vals...)}
			for _, t := range bs.Tails {
				from := int32(0)
				for {
					data, err := n.tail(ctx, t.Worker, &ingestwire.TailRequest{Job: p.Job, Epoch: p.Epoch, Set: bs.Set, Bucket: t.Bucket,
						From: from, End: bs.End, MaxBytes: p.PullBytes})
					if err != nil {
						return nil, err
					}
					before := len(b.Rows)
					if err := ingestwire.DecodeRows(b, data); err != nil {
						return nil, fmt.Errorf("worker: ingest %s: tail of bucket %d from %s: %w", p.Job, t.Bucket, t.Worker, err)
					}
					if len(b.Rows) == before {
						break
					}
					from = b.Rows[len(b.Rows)-1] + 1
				}
			}
		}
		if len(b.Rows) == 0 || b.Rows[0] != bs.First {
			return nil, fmt.Errorf("worker: ingest %s: shard of set %d, action %d does not start at row %d", p.Job, bs.Set, bs.Action, bs.First)
		}
		rs := shard.NewRowShard(0, b, bs.RowLo, bs.RowHi, p.N)
		cells := shard.Cells(rs, p.N, p.ColCells)
		rep.Lines[k] = shard.RowLines(rs, cells, n.id)
		built[k] = cells
	}
	j.mu.Lock()
	j.built = append(j.built, built)
	j.mu.Unlock()
	if n.hooks.Built != nil {
		n.hooks.Built()
	}
	return rep, nil
}

// blockPositions returns rows at positions [a, e) of b, sharing b's
// arrays.
func blockPositions(b *factor.Block, a, e int) *factor.Block {
	return shard.BlockRows(b, b.Rows[a], b.Rows[e-1]+1)
}

// Commit numbers the cells built in this epoch, hands them to the
// worker's cache and stores them in the Object Store when asked.
func (n *IngestNode) Commit(ctx context.Context, r *ingestwire.CommitRequest) (*ingestwire.CommitReply, error) {
	j, err := n.reducedJob(r.Job, r.Epoch)
	if err != nil {
		return nil, err
	}
	j.mu.Lock()
	built := j.built
	j.mu.Unlock()
	if len(r.IDs) != len(built) {
		return nil, fmt.Errorf("worker: ingest %s: IDs for %d build requests, %d built", r.Job, len(r.IDs), len(built))
	}
	for k := range built {
		if len(r.IDs[k]) != len(built[k]) {
			return nil, fmt.Errorf("worker: ingest %s: build request %d: IDs for %d shards, %d built", r.Job, k, len(r.IDs[k]), len(built[k]))
		}
		for s := range built[k] {
			if len(r.IDs[k][s]) != len(built[k][s]) {
				return nil, fmt.Errorf("worker: ingest %s: build request %d shard %d: %d IDs, %d cells", r.Job, k, s, len(r.IDs[k][s]), len(built[k][s]))
			}
		}
	}
	rep := &ingestwire.CommitReply{}
	var obs jetstream.ObjectStore
	if r.Store {
		if n.js == nil {
			return nil, errors.New("worker: ingest: no Object Store to store shards in")
		}
		if obs, err = n.js.ObjectStore(ctx, r.Bucket); err != nil {
			return nil, fmt.Errorf("worker: ingest: object store %s: %w", r.Bucket, err)
		}
	}
	for k := range built {
		for s := range built[k] {
			for c, sh := range built[k][s] {
				sh.ID = r.IDs[k][s][c]
				if obs != nil {
					stored, err := storeShard(ctx, n.js, obs, r.Bucket, sh)
					if err != nil {
						return nil, err
					}
					if stored > 0 {
						rep.Stored++
						rep.StoredBytes += stored
					}
				}
				if n.keep != nil {
					n.keep(sh)
				}
			}
		}
	}
	return rep, nil
}

// storeShard puts shard sh into obs (bucket of js) as proto.ShardObject
// of its checksum unless that object is there with the shard's bytes (its
// digest: a damaged object is stored again); it returns the bytes stored.
func storeShard(ctx context.Context, js jetstream.JetStream, obs jetstream.ObjectStore, bucket string, sh *shard.Shard) (int64, error) {
	name := proto.ShardObject(sh.Checksum)
	info, err := obs.GetInfo(ctx, name)
	if err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return 0, fmt.Errorf("worker: ingest: shard %d: %w", sh.ID, wire.StoreErr(ctx, js, "read the info of", wire.KindObjects, bucketName(bucket), name, err))
	}
	data, err := arrowio.EncodeShard(sh)
	if err != nil {
		return 0, fmt.Errorf("worker: ingest: encode shard %d: %w", sh.ID, err)
	}
	if info != nil && wire.SameObject(info, data) {
		return 0, nil
	}
	if _, err := wire.PutObject(ctx, obs, js.Conn().MaxPayload(), name, data); err != nil {
		return 0, fmt.Errorf("worker: ingest: shard %d: %w", sh.ID, wire.StoreErr(ctx, js, wire.OpStore, wire.KindObjects, bucketName(bucket), name, err))
	}
	return int64(len(data)), nil
}

// End drops a job's ingest state (its committed shards stay with keep).
func (n *IngestNode) End(job string) {
	n.mu.Lock()
	j := n.jobs[job]
	delete(n.jobs, job)
	delete(n.idJobs, job)
	n.mu.Unlock()
	if j != nil {
		j.cancel()
		j.done.Wait()
	}
}
