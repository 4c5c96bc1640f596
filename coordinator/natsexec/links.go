package natsexec

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/emsf/emsf/coordinator/owners"
	"github.com/emsf/emsf/worker/wire"
)

// links is what the executor knows of its workers' links: each one's last
// probe time (the lesser of two for a worker found slow) and who is left
// out now (logged once per change).
type links struct {
	took    map[string]linkTime
	leftOut map[string]bool
}

type linkTime struct {
	took time.Duration
	at   time.Time
}

const (
	// linkTTL is how long a probe's time stands: a census within it
	// (the ingest asks for its workers several times, a rollback right
	// after) probes no one again.
	linkTTL = time.Minute
	// linkWait bounds one probe: a worker that does not echo within it
	// counts as taking linkWait (a link under 1 Mbit/s, or a frozen
	// worker, which the watch then finds).
	linkWait = 5 * time.Second
)

// placeable returns ids less the quarantined workers and those behind a
// slow link (owners.LeaveOut with Config.SlowLink), timing an echo of
// owners.LinkProbeBytes with every worker of ids whose last probe is
// older than linkTTL, in parallel. A worker found slow is probed once
// more and judged on the lesser of its two times, so that one pause does
// not leave it out. A worker that does not serve the probe (nothing
// answers its link subject) is not judged.
func (e *Executor) placeable(ctx context.Context, ids []string) []string {
	if q := e.Quarantined(); len(q) > 0 {
		ids = slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return slices.Contains(q, id) })
	}
	if e.cfg.SlowLink < 0 || len(ids) < 2 {
		return ids
	}
	now := time.Now()
	e.mu.Lock()
	var stale []string
	for _, id := range ids {
		if lt, ok := e.links.took[id]; !ok || now.Sub(lt.at) > linkTTL {
			stale = append(stale, id)
		}
	}
	e.mu.Unlock()
	e.probeLinks(ctx, stale, false)
	slow := owners.LeaveOut(e.linkTimes(ids), e.cfg.SlowLink)
	if len(slow) > 0 && len(stale) > 0 {
		e.probeLinks(ctx, slow, true)
		slow = owners.LeaveOut(e.linkTimes(ids), e.cfg.SlowLink)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.links.leftOut == nil {
		e.links.leftOut = map[string]bool{}
	}
	took := func(id string) time.Duration { return e.links.took[id].took }
	var ts []time.Duration
	for _, id := range ids {
		if lt, ok := e.links.took[id]; ok {
			ts = append(ts, lt.took)
		}
	}
	slices.Sort(ts)
	for _, id := range ids {
		out := slices.Contains(slow, id)
		switch {
		case out && !e.links.leftOut[id]:
			e.log.Warn("a worker behind a slow link is left out of the placement", "worker_id", id,
				"probe", took(id).Round(time.Millisecond), "median", ts[(len(ts)-1)/2].Round(time.Millisecond),
				"probe_bytes", 2*owners.LinkProbeBytes, "slow_link", e.cfg.SlowLink)
		case !out && e.links.leftOut[id]:
			e.log.Info("a worker's link is no longer slow: it is placed again", "worker_id", id, "probe", took(id).Round(time.Millisecond))
		}
		e.links.leftOut[id] = out
	}
	return slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return slices.Contains(slow, id) })
}

// linkTimes returns the probe times known for the workers of ids.
func (e *Executor) linkTimes(ids []string) map[string]time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	took := map[string]time.Duration{}
	for _, id := range ids {
		if lt, ok := e.links.took[id]; ok {
			took[id] = lt.took
		}
	}
	return took
}

// probeLinks times one echo with each worker of ids, in parallel, and
// records the times (with keepLess, the lesser of the new and the known).
func (e *Executor) probeLinks(ctx context.Context, ids []string, keepLess bool) {
	if len(ids) == 0 {
		return
	}
	size := min(owners.LinkProbeBytes, int(e.nc.MaxPayload())-8<<10)
	body := make([]byte, max(size, 1))
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, linkWait)
			defer cancel()
			t0 := time.Now()
			msg, err := e.nc.RequestWithContext(pctx, wire.LinkSubject(e.cfg.Prefix, id), body)
			took := time.Since(t0)
			switch {
			case err == nil && len(msg.Data) == len(body):
			case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
				took = linkWait
			default:
				// No responders (a worker that does not serve the probe),
				// a short echo, or the caller's end: not judged.
				if err != nil && !errors.Is(err, nats.ErrNoResponders) && ctx.Err() == nil {
					e.log.Debug("link probe", "worker_id", id, "error", err)
				}
				return
			}
			e.mu.Lock()
			defer e.mu.Unlock()
			if e.links.took == nil {
				e.links.took = map[string]linkTime{}
			}
			if was, ok := e.links.took[id]; keepLess && ok {
				took = min(took, was.took)
			}
			e.links.took[id] = linkTime{took: took, at: time.Now()}
		})
	}
	wg.Wait()
}
