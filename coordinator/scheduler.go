package coordinator

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/emsf/emsf/worker/wire"
)

// Timing and bounds of the pass scheduler. The executor enforces a task's
// lease itself (the task's context has the lease as its deadline, and an
// expired task comes back as a failed Result); the scheduler's own check
// is a safety net for executors that miss their deadline.
const (
	// leaseChecksPerTimeout is how many times per Options.TaskTimeout the
	// scheduler looks for expired leases, but never more often than every
	// minLeaseCheck.
	leaseChecksPerTimeout = 4
	minLeaseCheck         = 10 * time.Millisecond
	// leaseGrace is how long past a lease's deadline the scheduler waits
	// for the executor to report the expiry before it hands the task out
	// again on its own.
	leaseGrace = time.Second
	// windowPerWorker is the default window (Options.Window) per live
	// worker, and minWindow its least value.
	windowPerWorker = 2
	minWindow       = 2
)

// lease is one hand-out of a shard that has not yet been answered.
type lease struct {
	// attempt numbers the hand-out (1 for the first of the shard in the
	// iteration): a failure of an older attempt is ignored.
	attempt  int
	deadline time.Time
	// avoid lists the workers the task should not go to again.
	avoid  []string
	cancel context.CancelFunc
	// verify marks the copy of a task under verification (verify.go).
	verify bool
}

// scheduler runs one pass of one iteration: it hands the shards out in the
// plan's order, at most window positions ahead of the next one to fold,
// tracks their leases, hands failed, rejected and expired tasks out again,
// holds partials that arrive early and folds each through the pass's
// Reducer as soon as its turn comes. Its counters go to rep.
type scheduler struct {
	p      *pass
	ctx    context.Context // the pass's; cancelled when the pass ends
	iter   int
	withLL bool
	alive  int // workers alive at the start of the iteration
	rep    *IterReport

	order  []int // shards in fold order (the plan's)
	posOf  []int // position of each shard in order
	window int
	// results receives the executor's answers (deliver).
	results  chan wire.Result
	leases   map[int]*lease // by shard
	attempts []int          // hand-outs per shard
	held     map[int]wire.Result
	// next is the position of the next shard to fold, sent the position
	// of the next to hand out; accepted counts the partials that answered
	// a lease (the phase times are averaged over them).
	next, sent, accepted int
	// checks are the tasks under verification, by shard; last is each
	// worker's last accepted partial of the pass (verify.go).
	checks map[int]*check
	last   map[string]accepted
}

// newScheduler prepares the pass of iteration iter over p's plan with
// alive workers; ctx bounds every task it hands out.
func newScheduler(ctx context.Context, p *pass, iter int, withLL bool, alive int, rep *IterReport) *scheduler {
	order := p.cur.Order
	// Shards the plan leaves out (SetActive) have no position: their
	// results are dropped as late.
	posOf := make([]int, len(p.shards))
	for k := range posOf {
		posOf[k] = -1
	}
	for pos, k := range order {
		posOf[k] = pos
	}
	window := p.opts.Window
	if window <= 0 {
		window = max(windowPerWorker*alive, minWindow)
	}
	return &scheduler{
		p: p, ctx: ctx, iter: iter, withLL: withLL, alive: alive, rep: rep,
		order: order, posOf: posOf, window: window,
		results:  make(chan wire.Result, window),
		leases:   make(map[int]*lease),
		attempts: make([]int, len(p.shards)),
		held:     make(map[int]wire.Result), // by position, at most window
		checks:   make(map[int]*check),
		last:     make(map[string]accepted),
	}
}

// run hands out the first window of shards and serves results and lease
// checks until every shard is folded, a shard fails MaxAttempts times or
// the context ends.
func (s *scheduler) run() error {
	if err := s.fill(); err != nil {
		return err
	}
	tick := time.NewTicker(max(s.p.opts.TaskTimeout/leaseChecksPerTimeout, minLeaseCheck))
	defer tick.Stop()
	tail := false
	for {
		if s.next == len(s.order) {
			// Every shard is folded: verify each worker's last partial
			// (verify.go), then the pass is done.
			if !tail && s.p.verify != nil && s.p.verify.last {
				tail = true
				if err := s.startTail(); err != nil {
					return err
				}
			}
			if len(s.checks) == 0 {
				return nil
			}
		}
		select {
		case <-s.ctx.Done():
			return s.ctx.Err()
		case now := <-tick.C:
			if err := s.expire(now); err != nil {
				return err
			}
		case r := <-s.results:
			if err := s.receive(r); err != nil {
				return err
			}
		}
	}
}

// close cancels the outstanding leases and turns the summed phase times
// of the report into averages over the accepted partials.
func (s *scheduler) close() {
	for _, l := range s.leases {
		l.cancel()
	}
	if s.accepted > 0 {
		s.rep.ModelFetch /= time.Duration(s.accepted)
		s.rep.PartialEncode /= time.Duration(s.accepted)
		s.rep.PartialFetch /= time.Duration(s.accepted)
	}
}

// deliver is the executor's callback for a task's result.
func (s *scheduler) deliver(r wire.Result) {
	select {
	case s.results <- r:
	case <-s.ctx.Done():
	}
}

// handOut submits shard k under a new lease, replacing (and cancelling) a
// previous one; avoid names workers it should not go to (ignored when it
// names as many workers as are alive: nowhere else to go). It fails when k
// has been handed out MaxAttempts times.
func (s *scheduler) handOut(k int, avoid []string) error {
	opts, rep := s.p.opts, s.rep
	if s.attempts[k] >= opts.MaxAttempts {
		return fmt.Errorf("coordinator: iteration %d: shard %d failed %d times", s.iter, k, s.attempts[k])
	}
	verify := false
	if old := s.leases[k]; old != nil {
		old.cancel()
		verify = old.verify
	}
	s.attempts[k]++
	if s.attempts[k] > 1 {
		rep.Retried++
	}
	rep.Tasks++
	if len(avoid) > 0 && len(avoid) >= s.alive {
		avoid = nil // nowhere else to go: let any worker take it
	}
	deadline := time.Now().Add(opts.TaskTimeout)
	tctx, tcancel := context.WithDeadline(s.ctx, deadline)
	s.leases[k] = &lease{attempt: s.attempts[k], deadline: deadline, avoid: avoid, cancel: tcancel, verify: verify}
	t := wire.Task{Job: opts.Job, Iteration: s.iter, Shard: k, WithLogLik: s.withLL, Attempt: s.attempts[k], Avoid: avoid, Alpha: s.p.alpha}
	s.p.exec.Submit(tctx, t, s.deliver)
	return nil
}

// fill hands out shards in order up to window positions past next.
func (s *scheduler) fill() error {
	for s.sent < len(s.order) && s.sent < s.next+s.window {
		if err := s.handOut(s.order[s.sent], nil); err != nil {
			return err
		}
		s.sent++
	}
	return nil
}

// retry hands shard k out again, adding worker w (the one that failed
// it; "" for none) to the workers its lease avoids.
func (s *scheduler) retry(k int, w string, why error) error {
	var avoid []string
	if l := s.leases[k]; l != nil {
		avoid = l.avoid
	}
	if w != "" && !slices.Contains(avoid, w) {
		avoid = append(slices.Clone(avoid), w)
	}
	s.p.log.Warn("task handed out again", "iter", s.iter, "shard", k, "worker", w, "reason", why)
	return s.handOut(k, avoid)
}

// expire hands out again every task whose lease ran out more than
// leaseGrace before now.
func (s *scheduler) expire(now time.Time) error {
	for k, l := range s.leases {
		if now.After(l.deadline.Add(leaseGrace)) {
			if err := s.retry(k, "", fmt.Errorf("lease expired")); err != nil {
				return err
			}
		}
	}
	return nil
}

// receive takes one result: it drops it when it is for another job or
// iteration, a shard not outstanding, or one already held; hands the
// shard out again when it failed or its partial fails checkPartial (unless
// a newer hand-out is under way); otherwise holds it, folds what is due
// and hands out more.
func (s *scheduler) receive(r wire.Result) error {
	opts, rep, log, iter := s.p.opts, s.rep, s.p.log, s.iter
	k := r.Task.Shard
	if r.Task.Job == opts.Job && r.Task.Iteration == iter && k >= 0 && k < len(s.posOf) {
		if l := s.leases[k]; l != nil && l.verify {
			if l.attempt == r.Task.Attempt {
				rep.Bytes += r.Bytes
				return s.receiveCheck(k, r)
			}
			rep.Dropped++
			log.Debug("partial of a shard under verification dropped", "iter", iter, "shard", k, "worker", r.Worker)
			return nil
		}
	}
	if r.Task.Job != opts.Job || r.Task.Iteration != iter || k < 0 || k >= len(s.posOf) || s.posOf[k] < s.next || s.posOf[k] >= s.sent {
		rep.Dropped++
		log.Debug("late partial dropped", "iter", iter, "task_iter", r.Task.Iteration, "shard", k, "worker", r.Worker)
		return nil
	}
	pos := s.posOf[k]
	if _, ok := s.held[pos]; ok {
		rep.Dropped++
		log.Debug("duplicate partial dropped", "iter", iter, "shard", k, "worker", r.Worker)
		return nil
	}
	if _, ok := s.checks[k]; ok {
		rep.Dropped++
		log.Debug("duplicate partial of a shard under verification dropped", "iter", iter, "shard", k, "worker", r.Worker)
		return nil
	}
	l := s.leases[k]
	if r.Err != nil {
		if l != nil && l.attempt == r.Task.Attempt {
			if err := s.retry(k, r.Worker, r.Err); err != nil {
				return fmt.Errorf("%w; last error from worker %s: %w", err, r.Worker, r.Err)
			}
		}
		return nil
	}
	if err := checkPartial(r.Partial, s.p.man.Shards[k]); err != nil {
		err = s.reject(k, r.Worker, err)
		if l != nil && l.attempt != r.Task.Attempt {
			return nil // a newer hand-out of the shard is under way
		}
		if rerr := s.retry(k, r.Worker, err); rerr != nil {
			return fmt.Errorf("%w; last: %w", rerr, err)
		}
		return nil
	}
	current := l != nil && l.attempt == r.Task.Attempt
	if l != nil {
		l.cancel()
		rep.ComputeTotal += r.Compute
		rep.ModelFetch += r.Model
		rep.PartialEncode += r.Encode
		rep.PartialFetch += r.Fetch
		s.accepted++
		delete(s.leases, k)
	}
	rep.Bytes += r.Bytes
	if v := s.p.verify; v != nil && current && s.alive >= 2 && v.sampled(opts.Job, iter, k, r.Task.Attempt) {
		return s.startCheck(k, &check{first: r, worker: r.Worker, digest: v.digest(r.Partial)})
	}
	return s.accept(k, r, false, 0)
}

// accept holds shard k's partial r for the fold (verified: checked, of
// digest d), folds what is due and hands out more.
func (s *scheduler) accept(k int, r wire.Result, verified bool, d uint64) error {
	s.held[s.posOf[k]] = r
	if v := s.p.verify; v != nil && v.last && r.Worker != "" {
		if !verified {
			d = v.digest(r.Partial)
		}
		s.last[r.Worker] = accepted{shard: k, digest: d, verified: verified}
	}
	tr := time.Now()
	err := s.fold()
	s.rep.Reduce += time.Since(tr)
	if err != nil {
		return err
	}
	return s.fill()
}

// fold merges the held partials from position next on, in order, until
// one is missing. A partial the Reducer rejects is handed out again and
// ends the fold.
func (s *scheduler) fold() error {
	red := &s.p.red
	for {
		h, ok := s.held[s.next]
		if !ok {
			return nil
		}
		delete(s.held, s.next)
		merge := red.Merge
		if h.Checked {
			merge = red.MergeChecked
		}
		if err := merge(h.Partial); err != nil {
			k := s.order[s.next]
			err = s.reject(k, h.Worker, err)
			if rerr := s.retry(k, h.Worker, err); rerr != nil {
				return fmt.Errorf("%w; last: %w", rerr, err)
			}
			return nil
		}
		s.next++
	}
}

// reject counts and logs the rejection of shard k's partial from worker w
// and returns the error that names them.
func (s *scheduler) reject(k int, w string, why error) error {
	s.rep.Rejected++
	err := fmt.Errorf("coordinator: iteration %d: partial of shard %d from worker %s rejected: %w", s.iter, k, w, why)
	s.p.log.Error("partial rejected", "iter", s.iter, "shard", k, "worker", w, "error", err)
	return err
}
