package owners

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/emsf/emsf/worker/wire/proto"
)

// Stragglers in a pass: every worker computes the shards placed on it, in
// plan order. A worker that has none left does not sit idle while another
// is far behind (MapReduce's backup tasks): when a task has run
// backupFactor times as long as the pass's finished tasks took per
// nonzero (the median, at least backupMinWait), the idle worker starts a
// backup copy of it, and then takes the straggler's queued shards from
// the tail. The first copy that answers wins and the other is cancelled;
// any worker can compute any shard, since rows of D and K come from their
// owners, and a copy computes bitwise the same partial, so who wins
// changes no bit. The owners then pull the winner's slices (the commit
// names the shards that moved). A straggler that stays slow is also
// re-placed at the next checkpoint (Rebalance).
const (
	backupFactor  = 2
	backupMinWait = 50 * time.Millisecond
	// backupPoll is how often an idle worker looks again for a task to
	// back up while others still run.
	backupPoll = 20 * time.Millisecond
)

// taskCopy is one running copy of a shard's task (verify: a
// verification, verify.go).
type taskCopy struct {
	ctx    context.Context
	worker string
	start  time.Time
	cancel context.CancelFunc
	verify bool
}

// passSched runs the tasks of one pass: shards by worker, backups, the
// first answer of each shard.
type passSched struct {
	s      *seq
	iter   int
	withLL bool

	mu       sync.Mutex
	queue    map[string][]int // shards not started, by placed worker, in plan order
	copies   map[int][]*taskCopy
	done     []bool
	finished int
	perNNZ   []float64 // finished tasks' seconds per nonzero
	first    error
	backups  int
	// Verifications (verify.go): the shards waiting for a worker to
	// verify them, in the order drawn; each one's answers; how many run.
	vqueue   []int
	vchecks  map[int]*vcheck
	vrunning int
}

// tasks has every shard computed (by its worker, or by a backup copy) and
// keeps the checked answers in s.results and who gave them in s.winner.
func (s *seq) tasks(ctx context.Context, iter int, withLL bool) error {
	n := len(s.plan.Shards)
	s.results = make([]*proto.Reply, n)
	s.winner = make([]string, n)
	s.busy, s.nnz = map[string]float64{}, map[string]float64{}
	ps := &passSched{s: s, iter: iter, withLL: withLL, queue: map[string][]int{}, copies: map[int][]*taskCopy{}, done: make([]bool, n),
		vchecks: map[int]*vcheck{}}
	for _, k := range s.plan.Reduce.Order {
		ps.queue[s.shardW[k]] = append(ps.queue[s.shardW[k]], k)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for _, id := range s.workers {
		wg.Go(func() { ps.work(ctx, cancel, id) })
	}
	wg.Wait()
	s.backups += ps.backups
	return ps.first
}

// work is worker id's loop: its own shards, then backups, until every
// shard is done or the pass failed.
func (ps *passSched) work(ctx context.Context, cancel context.CancelFunc, id string) {
	for ctx.Err() == nil {
		k, c, wait, ok := ps.next(ctx, id, ps.s.clock.Now())
		if !ok {
			return
		}
		if c == nil {
			if ps.s.clock.Sleep(ctx, wait) != nil {
				return
			}
			continue
		}
		ps.run(ctx, cancel, k, c)
	}
}

// next picks worker id's next task at time now: its own next shard, else
// a queued shard of a straggler, else a backup of a straggling task, and
// registers its copy. A nil copy with ok means wait that long and look
// again; !ok means nothing is left.
func (ps *passSched) next(ctx context.Context, id string, now time.Time) (int, *taskCopy, time.Duration, bool) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.first != nil {
		return -1, nil, 0, false
	}
	start := func(k int) (int, *taskCopy, time.Duration, bool) {
		cctx, cancel := context.WithCancel(ctx)
		c := &taskCopy{ctx: cctx, worker: id, start: now, cancel: cancel}
		ps.copies[k] = append(ps.copies[k], c)
		return k, c, 0, true
	}
	for q := ps.queue[id]; len(q) > 0; q = ps.queue[id] {
		k := q[0]
		ps.queue[id] = q[1:]
		if !ps.done[k] && len(ps.copies[k]) == 0 {
			return start(k)
		}
	}
	// A verification of another worker's answer, in the order drawn.
	for q, k := range ps.vqueue {
		if ps.eligible(ps.vchecks[k], id) {
			ps.vqueue = slices.Delete(ps.vqueue, q, q+1)
			ps.vrunning++
			cctx, cancel := context.WithCancel(ctx)
			return k, &taskCopy{ctx: cctx, worker: id, start: now, cancel: cancel, verify: true}, 0, true
		}
	}
	running := len(ps.vqueue) > 0 || ps.vrunning > 0
	wait := backupPoll
	median := ps.medianPerNNZ()
	// Shards in plan order: which straggling task is backed up first
	// does not depend on a map's order.
	for _, k := range ps.s.plan.Reduce.Order {
		cs := ps.copies[k]
		if ps.done[k] || len(cs) == 0 {
			continue
		}
		running = true
		if len(cs) > 1 || cs[0].worker == id || ps.finished == 0 || ps.s.opt.NoBackups {
			continue
		}
		due := max(backupMinWait, time.Duration(backupFactor*median*float64(ps.s.plan.Shards[k].NNZ)*float64(time.Second)))
		late := now.Sub(cs[0].start)
		if late < due {
			wait = min(wait, due-late)
			continue
		}
		// The straggler's queued shards, from the tail, before a backup
		// of its running one: they have not started at all.
		straggler := cs[0].worker
		if q := ps.queue[straggler]; len(q) > 0 {
			k, ps.queue[straggler] = q[len(q)-1], q[:len(q)-1]
			ps.backups++
			ps.s.log.Info("owners: a straggler's queued shard taken", "job", ps.s.plan.Job, "iteration", ps.iter, "shard", k, "from", straggler, "to", id)
			return start(k)
		}
		ps.backups++
		ps.s.log.Info("owners: backup copy of a straggling task", "job", ps.s.plan.Job, "iteration", ps.iter, "shard", k, "straggler", straggler, "backup", id, "running", late.Round(time.Millisecond))
		return start(k)
	}
	for _, q := range ps.queue {
		running = running || len(q) > 0
	}
	if !running {
		return -1, nil, 0, false
	}
	return -1, nil, max(wait, time.Millisecond), true
}

// medianPerNNZ is the median of the finished tasks' seconds per nonzero
// (0: none finished yet, or none with nonzeros). The caller holds ps.mu.
func (ps *passSched) medianPerNNZ() float64 {
	if len(ps.perNNZ) == 0 {
		return 0
	}
	xs := slices.Clone(ps.perNNZ)
	slices.Sort(xs)
	return xs[len(xs)/2]
}

// run runs copy c of shard k's task.
func (ps *passSched) run(ctx context.Context, cancel context.CancelFunc, k int, c *taskCopy) {
	s, id := ps.s, c.worker
	defer c.cancel()
	req := s.task(ps.iter, k, ps.withLL)
	req.Verify = c.verify
	rep, err := s.ask(c.ctx, id, req)
	if err == nil {
		err = s.checkTask(req, id, rep)
	}
	took := s.clock.Now().Sub(c.start)
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if c.verify {
		ps.vrunning--
		if ps.first != nil {
			// The pass failed: nothing more to decide in it.
			return
		}
		if err == nil {
			err = ps.verified(k, id, rep)
		}
		if err != nil {
			ps.failLocked(err, cancel)
		}
		return
	}
	nnz := s.plan.Shards[k].NNZ
	s.busy[id] += took.Seconds()
	s.nnz[id] += float64(nnz)
	ps.copies[k] = slices.DeleteFunc(ps.copies[k], func(x *taskCopy) bool { return x == c })
	switch {
	case ps.done[k]:
		// Another copy won: this one's answer (or its cancellation) is
		// dropped.
	case err == nil:
		ps.done[k] = true
		ps.finished++
		s.results[k], s.winner[k] = rep, id
		if s.drawVerify() {
			ps.vchecks[k] = &vcheck{workers: []string{id}, answers: []*proto.Reply{rep}}
			ps.vqueue = append(ps.vqueue, k)
		}
		if nnz > 0 {
			ps.perNNZ = append(ps.perNNZ, took.Seconds()/float64(nnz))
		}
		for _, o := range ps.copies[k] {
			o.cancel()
		}
	case len(ps.copies[k]) > 0:
		// Another copy still runs: it decides.
	default:
		ps.failLocked(err, cancel)
	}
}

func (ps *passSched) failLocked(err error, cancel context.CancelFunc) {
	if ps.first == nil {
		ps.first = err
		cancel()
	}
}
