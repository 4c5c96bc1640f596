package owners

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/emsf/emsf/worker/wire/proto"
)

// Verification: a worker that answers its tasks with wrong numbers (bad
// memory, a broken build, a liar) passes every check of check.go as long
// as its numbers are finite and its Σx right. But a task's answer is a
// pure function of the shard and the model version, bitwise the same on
// any worker, so it can be checked exactly by computing it again
// elsewhere. Each task a pass finishes is drawn with probability
// Options.Verify (from a generator the workers cannot predict), and an
// idle worker other than the one that answered computes it again as a
// verification (proto.Request.Verify: the answer only, nothing folded or
// served). The pass is not committed until its verifications are done.
//
//   - Same answer (Y, Σx, the log-likelihood and the digest of the whole
//     partial, proto.Reply.Out, bit for bit): both workers are trusted up
//     to this iteration (seq.verified).
//   - Different answers: a third worker computes it. The worker the other
//     two disagree with is quarantined (a rogue); when all three differ,
//     or no third worker is there, each of them is struck and the pass
//     fails (a rollback places it again).
//   - A rogue's earlier answers are not trusted past its last verified
//     one: the job goes back to the newest checkpoint before that
//     iteration (the last, the one before, or the start), forgets the
//     records of the passes since (they may hold the rogue's numbers)
//     and replays them on the others (RogueError, seq.rewind).
//
// What it costs: a fraction Verify of the tasks' work, plus the wait for
// the last verification of a pass. The digest binds an answer to the
// partial the worker computed, not to the slices it serves: a worker
// that serves other bytes than it digests is caught only by the owners
// that fold them (not yet: per-slice CRCs).

// RogueError fails a pass whose verification caught a worker computing
// wrong answers: it is quarantined, and its answers since Trusted (the
// last iteration in which one of them was verified; 0: none) are redone.
type RogueError struct {
	Worker  string
	Trusted int
	Err     error
}

func (e *RogueError) Error() string {
	return fmt.Sprintf("owners: worker %s computes wrong answers (%v): quarantined; its work since iteration %d is redone", e.Worker, e.Err, e.Trusted)
}
func (e *RogueError) Unwrap() error { return e.Err }

// newVerifyRand returns the generator of the draws (seed 0: a random
// one).
func newVerifyRand(seed uint64) *rand.Rand {
	if seed == 0 {
		var b [8]byte
		_, _ = crand.Read(b[:])
		seed = binary.LittleEndian.Uint64(b[:]) | 1
	}
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// drawVerify reports whether a finished task is to be verified: with
// probability Options.Verify, when another worker can compute it.
func (s *seq) drawVerify() bool {
	return s.opt.Verify > 0 && len(s.workers) > 1 && s.vrand.Float64() < s.opt.Verify
}

// sameAnswer reports whether two answers to one task agree bit for bit.
func sameAnswer(a, b *proto.Reply) bool {
	if a.Out != b.Out || a.NNZ != b.NNZ || a.HasLogLik != b.HasLogLik ||
		math.Float64bits(a.SumX) != math.Float64bits(b.SumX) || math.Float64bits(a.LogLik) != math.Float64bits(b.LogLik) || len(a.Y) != len(b.Y) {
		return false
	}
	for l := range a.Y {
		if math.Float64bits(a.Y[l]) != math.Float64bits(b.Y[l]) {
			return false
		}
	}
	return true
}

// vcheck is the verification of one shard's task in a pass: the answers
// so far, the winner's first.
type vcheck struct {
	workers []string
	answers []*proto.Reply
}

// eligible reports whether worker id may compute the check: it has not
// answered the task, and is not quarantined.
func (ps *passSched) eligible(vc *vcheck, id string) bool {
	return !slices.Contains(vc.workers, id) && !slices.Contains(ps.s.cl.Quarantined(), id)
}

// verified takes the answer rep of worker id to the verification of
// shard k and decides (see above). The caller holds ps.mu; the error
// fails the pass.
func (ps *passSched) verified(k int, id string, rep *proto.Reply) error {
	s := ps.s
	vc := ps.vchecks[k]
	vc.workers, vc.answers = append(vc.workers, id), append(vc.answers, rep)
	s.verifications++
	if len(vc.answers) == 2 {
		if sameAnswer(vc.answers[0], rep) {
			for _, w := range vc.workers {
				s.verified[w] = max(s.verified[w], ps.iter)
			}
			delete(ps.vchecks, k)
			return nil
		}
		for _, w := range s.workers {
			if ps.eligible(vc, w) {
				s.log.Warn("owners: two workers computed a task differently; a third computes it", "job", s.plan.Job, "iteration", ps.iter, "shard", k,
					"winner", vc.workers[0], "verifier", id)
				ps.vqueue = append(ps.vqueue, k)
				return nil
			}
		}
		err := fmt.Errorf("owners: iteration %d, shard %d: workers %s and %s computed it differently and no third worker can tell which is wrong", ps.iter, k, vc.workers[0], id)
		for _, w := range vc.workers {
			s.cl.Strike(w, err)
		}
		return &WorkerError{Worker: vc.workers[0], Err: err}
	}
	a, b, c := vc.answers[0], vc.answers[1], vc.answers[2]
	rogue := ""
	switch {
	case sameAnswer(a, c):
		rogue = vc.workers[1]
	case sameAnswer(b, c):
		rogue = vc.workers[0]
	default:
		err := fmt.Errorf("owners: iteration %d, shard %d: workers %s, %s and %s computed it three ways", ps.iter, k, vc.workers[0], vc.workers[1], vc.workers[2])
		for _, w := range vc.workers {
			s.cl.Strike(w, err)
		}
		return &WorkerError{Worker: vc.workers[0], Err: err}
	}
	err := fmt.Errorf("its answer to shard %d of iteration %d differs from two other workers'", k, ps.iter)
	s.cl.Quarantine(rogue, err)
	s.rogues++
	return &RogueError{Worker: rogue, Trusted: s.verified[rogue], Err: err}
}

// rewind makes the last checkpoint one before the rogue's first untrusted
// iteration (re.Trusted: a checkpoint of version ≤ Trusted−1, or the
// start) and forgets the records of the passes after it, so that the
// next placement replays them on the workers left (see above).
func (s *seq) rewind(ctx context.Context, re *RogueError) error {
	target := max(re.Trusted-1, 0)
	bad := s.ck.Version
	switch {
	case s.ck.Version <= target:
	case s.prev != nil && s.prev.Version <= target:
		s.ck, s.prev = *s.prev, nil
	default:
		if err := s.restart(ctx); err != nil {
			return err
		}
	}
	if bad != s.ck.Version {
		s.stale = append(s.stale, bad)
	}
	for v := range s.history {
		if v > s.ck.Version {
			delete(s.history, v)
		}
	}
	s.log.Warn("owners: a rogue worker was quarantined; its work since its last verified answer is redone", "job", s.plan.Job,
		"worker_id", re.Worker, "trusted", re.Trusted, "checkpoint", s.ck.Version)
	return nil
}
