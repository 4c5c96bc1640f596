package coordinator

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"unsafe"

	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/worker/wire"
)

// Verification of the coordinator exchange (Options.Verify). A partial is
// a pure function of its task, so any task can be checked exactly by
// computing it again elsewhere and comparing the bits. The scheduler
// re-executes, on another worker:
//
//   - a sample of the tasks (rate Options.Verify, drawn with a salt that
//     no worker sees, so a worker cannot tell which of its tasks are
//     checked); a sampled partial is folded only once its copy agrees;
//   - with Options.VerifyLast, at the end of each pass and before the
//     commit, the last partial each worker had accepted in it (if not
//     already checked), so that every worker's last task of every
//     committed iteration is verified.
//
// When the two disagree the coordinator, which holds the shards and the
// model of the pass, computes the task itself and arbitrates: a worker
// whose partial differs from the coordinator's is quarantined (the
// executor gives it no more tasks: Quarantiner), and the pass is run
// again from the start without it. With VerifyLast every worker's last
// task of the previous iteration was verified, so what a liar computed
// since its last verified task lies in this pass, and the redone pass is
// exactly the work to redo. Without it (the default of emsf fit: the
// last-task checks cost 30–40 % of the wall time, scripts/verify_cost.sh,
// as they wait at the end of every pass) a liar is caught at the rate's
// pace and the pass that caught it is redone, but partials it had folded
// into earlier iterations unchecked stay in the model. A worker that
// answers the copy of its own task (it ignored the task's Avoid) proves
// nothing: the coordinator arbitrates then too.
//
// Verification runs only over an executor that can quarantine (workers in
// other processes); an in-process executor checks nothing.

// Quarantiner is an Executor that can stop giving a worker tasks and drop
// its partials (natsexec.Executor).
type Quarantiner interface {
	Quarantine(worker string, why error)
}

// maxRedos bounds how often one iteration's pass is run again because a
// worker was caught: each time one more worker is quarantined.
const maxRedos = 8

// redoError ends a pass that folded a partial of a worker caught lying.
type redoError struct{ liars []string }

func (e *redoError) Error() string {
	return fmt.Sprintf("coordinator: worker(s) %v returned wrong partials: the pass runs again without them", e.liars)
}

// verifier samples tasks and digests partials for one fit.
type verifier struct {
	rate float64
	last bool
	salt uint64
	seed maphash.Seed
}

// newVerifier returns the verifier of rate, checking each worker's last
// task too with last (neither: none); salt 0 draws one.
func newVerifier(rate float64, last bool, salt uint64) (*verifier, error) {
	if !(rate >= 0 && rate <= 1) {
		return nil, fmt.Errorf("coordinator: verify rate %v must be in [0, 1]", rate)
	}
	if rate == 0 && !last {
		return nil, nil
	}
	if salt == 0 {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, fmt.Errorf("coordinator: verify salt: %w", err)
		}
		salt = binary.LittleEndian.Uint64(b[:]) | 1
	}
	return &verifier{rate: rate, last: last, salt: salt, seed: maphash.MakeSeed()}, nil
}

// sampled says whether the task (iteration, shard, attempt) of job is
// checked: a hash of it and the salt below rate.
func (v *verifier) sampled(job string, iter, k, attempt int) bool {
	var h maphash.Hash
	var b [32]byte
	binary.LittleEndian.PutUint64(b[0:], v.salt)
	binary.LittleEndian.PutUint64(b[8:], uint64(iter))
	binary.LittleEndian.PutUint64(b[16:], uint64(k))
	binary.LittleEndian.PutUint64(b[24:], uint64(attempt))
	h.SetSeed(v.seed)
	h.Write(b[:])
	h.WriteString(job)
	return float64(h.Sum64()>>11)/(1<<53) < v.rate
}

// digest is a 64-bit keyed hash of every value of p: two partials of one
// task have the same digest exactly when their bits agree (but for a
// collision no worker can aim at, not knowing the key).
func (v *verifier) digest(p *factor.Partial) uint64 {
	var h maphash.Hash
	h.SetSeed(v.seed)
	var b [8]byte
	word := func(x uint64) {
		binary.LittleEndian.PutUint64(b[:], x)
		h.Write(b[:])
	}
	floats := func(xs []float64) {
		word(uint64(len(xs)))
		if len(xs) > 0 {
			h.Write(unsafe.Slice((*byte)(unsafe.Pointer(&xs[0])), 8*len(xs)))
		}
	}
	ints := func(xs []int32) {
		word(uint64(len(xs)))
		if len(xs) > 0 {
			h.Write(unsafe.Slice((*byte)(unsafe.Pointer(&xs[0])), 4*len(xs)))
		}
	}
	word(uint64(p.Action))
	word(uint64(p.NNZ))
	word(math.Float64bits(p.SumX))
	word(math.Float64bits(p.LogLik))
	ints(p.Rows)
	floats(p.Dh)
	floats(p.X)
	ints(p.Cols)
	floats(p.KhT)
	floats(p.Y)
	return h.Sum64()
}

// check is a task under verification: the partial of its first answer
// (held back from the fold; nil for a tail check, whose partial was
// folded) and the digest the copy must match.
type check struct {
	first  wire.Result
	worker string
	digest uint64
	tail   bool
}

// accepted is the last partial a worker had accepted in the pass.
type accepted struct {
	shard    int
	digest   uint64
	verified bool
}

// arbitrate computes shard k of the pass's model in this process and
// returns the workers among (a, b) whose digest differs from it.
func (s *scheduler) arbitrate(k int, a string, da uint64, b string, db uint64) ([]string, error) {
	p := new(factor.Partial)
	if err := factor.Compute(s.p.md, s.p.shards[k].Block, &s.p.scratch, p, s.withLL); err != nil {
		return nil, fmt.Errorf("coordinator: iteration %d: arbitrate shard %d: %w", s.iter, k, err)
	}
	want := s.p.verify.digest(p)
	var liars []string
	if da != want && a != "" {
		liars = append(liars, a)
	}
	if db != want && b != "" && b != a {
		liars = append(liars, b)
	}
	return liars, nil
}

// startCheck hands shard k out again to a worker other than first's, as
// the copy that must agree with digest.
func (s *scheduler) startCheck(k int, c *check) error {
	s.checks[k] = c
	s.rep.Verified++
	if s.attempts[k] >= s.p.opts.MaxAttempts {
		// No hand-out left: the coordinator computes the copy itself.
		return s.resolve(k, c, "", 0, false)
	}
	if err := s.handOut(k, []string{c.worker}); err != nil {
		return err
	}
	s.leases[k].verify = true
	return nil
}

// receiveCheck takes the answer r to the copy of checked shard k.
func (s *scheduler) receiveCheck(k int, r wire.Result) error {
	c := s.checks[k]
	if l := s.leases[k]; l != nil {
		l.cancel()
		delete(s.leases, k)
	}
	switch {
	case r.Err != nil || r.Worker == c.worker:
		// No independent copy (the copy failed, or the same worker
		// answered it): the coordinator computes it.
		return s.resolve(k, c, "", 0, false)
	case checkPartial(r.Partial, s.p.man.Shards[k]) != nil:
		err := s.reject(k, r.Worker, checkPartial(r.Partial, s.p.man.Shards[k]))
		s.p.log.Warn("verification copy rejected", "iter", s.iter, "shard", k, "worker", r.Worker, "error", err)
		return s.resolve(k, c, "", 0, false)
	}
	return s.resolve(k, c, r.Worker, s.p.verify.digest(r.Partial), true)
}

// resolve ends the check of shard k: with a copy from worker w of digest
// d that agrees, the first partial stands (and a held-back one is
// folded); otherwise the coordinator arbitrates, quarantines whoever
// differs from its own partial and, when anyone does, ends the pass to be
// run again.
func (s *scheduler) resolve(k int, c *check, w string, d uint64, haveCopy bool) error {
	delete(s.checks, k)
	if !haveCopy || d != c.digest {
		liars, err := s.arbitrate(k, c.worker, c.digest, w, d)
		if err != nil {
			return err
		}
		if len(liars) > 0 {
			s.rep.Mismatches++
			q, _ := s.p.exec.(Quarantiner)
			for _, id := range liars {
				why := fmt.Errorf("iteration %d: its partial of shard %d differs from the coordinator's own", s.iter, k)
				s.p.log.Error("wrong partial: worker quarantined, the pass runs again without it", "iter", s.iter, "shard", k,
					"worker", id, "first", c.worker, "copy", w)
				if q != nil {
					q.Quarantine(id, why)
				}
			}
			return &redoError{liars: liars}
		}
	}
	if c.tail {
		if a, ok := s.last[c.worker]; ok && a.shard == k {
			a.verified = true
			s.last[c.worker] = a
		}
		return nil
	}
	return s.accept(k, c.first, true, c.digest)
}

// startTail checks, once every shard is folded, the last accepted partial
// of each worker that is not verified yet.
func (s *scheduler) startTail() error {
	for _, w := range sortedKeys(s.last) {
		a := s.last[w]
		if a.verified || s.alive < 2 {
			continue
		}
		if err := s.startCheck(a.shard, &check{worker: w, digest: a.digest, tail: true}); err != nil {
			return err
		}
	}
	return nil
}

func isRedo(err error) bool {
	var r *redoError
	return errors.As(err, &r)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
