package natsexec

import (
	"errors"
	"fmt"
	"slices"
)

// rejectedError is a partial that failed a check of the executor (its
// label, transfer CRC, encoding, values or log-likelihood): it counts
// against the worker that sent it.
type rejectedError struct{ err error }

func (e *rejectedError) Error() string { return "partial rejected: " + e.err.Error() }
func (e *rejectedError) Unwrap() error { return e.err }

// reject returns a *rejectedError of the formatted error.
func reject(format string, a ...any) error { return &rejectedError{err: fmt.Errorf(format, a...)} }

// quarantine is the executor's record of workers whose partials failed
// checks. Guarded by Executor.mu.
type quarantine struct {
	strikes map[string]int
	out     map[string]bool
}

// strike records a rejected partial of worker id, and quarantines the
// worker when it reached QuarantineAfter of them.
func (e *Executor) strike(id string, err error) {
	if id == "" {
		return
	}
	e.mu.Lock()
	if e.quar.strikes == nil {
		e.quar.strikes, e.quar.out = map[string]int{}, map[string]bool{}
	}
	e.quar.strikes[id]++
	n, was := e.quar.strikes[id], e.quar.out[id]
	now := !was && n >= e.cfg.QuarantineAfter
	if now {
		e.quar.out[id] = true
	}
	e.mu.Unlock()
	e.log.Warn("partial rejected", "worker_id", id, "rejected", n, "error", err)
	if now {
		e.log.Error("worker quarantined: it gets no more tasks and its partials are dropped", "worker_id", id,
			"rejected", n, "last_error", err)
	}
}

// quarantineNow quarantines worker id at once (it answers the census but
// does not serve what it was asked on its own subject).
func (e *Executor) quarantineNow(id string, err error) {
	e.mu.Lock()
	if e.quar.out == nil {
		e.quar.strikes, e.quar.out = map[string]int{}, map[string]bool{}
	}
	was := e.quar.out[id]
	e.quar.out[id] = true
	e.mu.Unlock()
	if !was {
		e.log.Error("worker quarantined: it gets no more tasks", "worker_id", id, "error", err)
	}
}

// Quarantine quarantines worker id at once: the coordinator caught it
// returning a wrong partial (coordinator.Quarantiner).
func (e *Executor) Quarantine(id string, why error) { e.quarantineNow(id, why) }

// quarantinedLocked reports whether worker id is quarantined; the caller holds
// e.mu.
func (e *Executor) quarantinedLocked(id string) bool { return e.quar.out[id] }

// Quarantined returns the ids of the quarantined workers, sorted.
func (e *Executor) Quarantined() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var ids []string
	for id := range e.quar.out {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// isRejected reports whether err is a partial that failed a check.
func isRejected(err error) bool {
	var r *rejectedError
	return errors.As(err, &r)
}
