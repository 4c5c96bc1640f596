package factor

import (
	"context"
	"fmt"
	"math"
	"time"
)

// Status says whether a fit should stop, and why.
type Status int

const (
	// NotTerminated: keep iterating.
	NotTerminated Status = iota
	// Converged: the relative change of the log-likelihood fell below Tol.
	Converged
	// IterationLimit: MaxIter iterations were committed.
	IterationLimit
	// TimeLimit: the fit ran for longer than TimeLimit.
	TimeLimit
	// HeldOutOptimum: the held-out score (EarlyStop) stopped improving;
	// the model is the best-scoring iterate.
	HeldOutOptimum
)

func (s Status) String() string {
	switch s {
	case NotTerminated:
		return "not terminated"
	case Converged:
		return "converged"
	case IterationLimit:
		return "iteration limit"
	case TimeLimit:
		return "time limit"
	case HeldOutOptimum:
		return "held-out optimum"
	}
	return fmt.Sprintf("Status(%d)", int(s))
}

// Converger decides when a fit stops: after MaxIter iterations (0: no
// limit), when the relative change of the log-likelihood between two
// successive evaluations |L_t − L_{t−1}| / |L_t| is at most Tol (0: never),
// or when the elapsed time exceeds TimeLimit (0: no limit). At least one
// limit must be set.
type Converger struct {
	Tol       float64
	MaxIter   int
	TimeLimit time.Duration

	prev float64
	seen bool
}

// Validate checks the limits.
func (c *Converger) Validate() error {
	if c.Tol < 0 || math.IsNaN(c.Tol) {
		return fmt.Errorf("factor: tolerance %v must be >= 0", c.Tol)
	}
	if c.MaxIter < 0 {
		return fmt.Errorf("factor: iteration limit %d must be >= 0", c.MaxIter)
	}
	if c.Tol == 0 && c.MaxIter == 0 && c.TimeLimit <= 0 {
		return fmt.Errorf("factor: no stopping rule: set a tolerance, an iteration limit or a time limit")
	}
	return nil
}

// NeedsLogLik reports whether the pass that produces iteration iter (1-based)
// must compute the log-likelihood: always when Tol > 0 or when there is no
// iteration limit (any pass may be the last), otherwise for the last
// iteration so the final model carries its value.
func (c *Converger) NeedsLogLik(iter int) bool {
	return c.Tol > 0 || c.MaxIter == 0 || iter == c.MaxIter
}

// Check is called after iteration iter (1-based) was committed; loglik is
// that pass's log-likelihood (NaN when it was skipped).
func (c *Converger) Check(iter int, loglik float64, elapsed time.Duration) Status {
	if c.Tol > 0 && !math.IsNaN(loglik) {
		if c.seen {
			if rel := math.Abs(loglik-c.prev) / math.Max(math.Abs(loglik), math.SmallestNonzeroFloat64); rel <= c.Tol {
				return Converged
			}
		}
		c.prev, c.seen = loglik, true
	}
	if c.MaxIter > 0 && iter >= c.MaxIter {
		return IterationLimit
	}
	if c.TimeLimit > 0 && elapsed >= c.TimeLimit {
		return TimeLimit
	}
	return NotTerminated
}

// Early reports whether a fit that ended with s stopped before
// the tolerance was reached (an iteration or time limit).
func (s Status) Early() bool { return s == IterationLimit || s == TimeLimit }

// Evaluate sets md.LogLik and md.WKL to those of md itself on blocks: one
// pass with the log-likelihood and no commit. After Fit, md.LogLik is that
// of the model before the last commit (the pass that made it evaluated
// the previous model), or NaN when that pass skipped the logarithms; a
// model written to a file should carry its own.
func Evaluate(ctx context.Context, md *Model, blocks []*Block, workers int) error {
	acc := NewAccumulator(md)
	var ps Passer
	if err := ps.Pass(ctx, md, blocks, acc, workers, true); err != nil {
		return err
	}
	md.LogLik, md.WKL = acc.LogLik, math.NaN()
	if acc.SumX > 0 {
		md.WKL = (DataTerm(blocks) - acc.LogLik) / acc.SumX
	}
	return nil
}
