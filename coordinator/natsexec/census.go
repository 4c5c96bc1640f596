package natsexec

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/emsf/emsf/worker/wire"
)

type censusState struct {
	alive   int
	ids     []string // sorted
	at      time.Time
	running bool
}

// Workers returns the number of workers under this prefix that answered
// the last $SRV.PING census: Workers' own or a caller's Census (a caller
// that waited for its workers with Census hands them to the fit). The
// first call waits for a census when there was none; later ones refresh
// it in the background when older than PingEvery, or wait for a new one
// when the last found none.
func (e *Executor) Workers(ctx context.Context) (int, error) {
	e.mu.Lock()
	c := e.census
	stale := time.Since(c.at) > e.cfg.PingEvery
	if c.at.IsZero() || c.alive == 0 {
		e.mu.Unlock()
		ids, err := e.Census(ctx)
		if err != nil {
			return 0, err
		}
		return len(ids), nil
	}
	refresh := stale && !c.running
	if refresh {
		e.census.running = true
	}
	e.mu.Unlock()
	if refresh {
		started := e.goRoutine(func() {
			pctx, cancel := context.WithTimeout(e.stopped, 2*e.cfg.PingWait+time.Second)
			defer cancel()
			_, _ = e.Census(pctx)
			e.mu.Lock()
			e.census.running = false
			e.mu.Unlock()
		})
		if !started {
			e.mu.Lock()
			e.census.running = false
			e.mu.Unlock()
		}
	}
	return c.alive, nil
}

// Census lists the ids of the workers under this prefix that answer a
// $SRV.PING within the executor's PingWait, and records them as the
// census that Workers reads and that tasks are assigned by.
func (e *Executor) Census(ctx context.Context) ([]string, error) {
	start := time.Now()
	ids, err := e.ping(ctx)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	// Of two censuses that overlap, the one that began last is kept.
	if !start.Before(e.census.at) {
		e.census.alive, e.census.ids, e.census.at = len(ids), ids, start
	}
	e.mu.Unlock()
	return ids, nil
}

// Memory returns the sum of the memory the workers of ids announced
// (worker.Config.Memory, seen by a census), and whether each of them
// announced it.
func (e *Executor) Memory(ids []string) (int64, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var sum int64
	for _, id := range ids {
		mem, ok := e.memory[id]
		if !ok {
			return sum, false
		}
		sum += mem
	}
	return sum, len(ids) > 0
}

// ping sends a $SRV.PING to the workers under this prefix and collects the
// ids of those that answer within PingWait.
func (e *Executor) ping(ctx context.Context) ([]string, error) {
	inbox := e.nc.NewRespInbox()
	sub, err := e.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, fmt.Errorf("natsexec: ping: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	subj, err := micro.ControlSubject(micro.PingVerb, wire.ServiceName, "")
	if err != nil {
		return nil, fmt.Errorf("natsexec: ping: %w", err)
	}
	if err := e.nc.PublishRequest(subj, inbox, nil); err != nil {
		return nil, fmt.Errorf("natsexec: ping: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, e.cfg.PingWait)
	defer cancel()
	seen := map[string]bool{}
	var ids []string
	for {
		m, err := sub.NextMsgWithContext(wctx)
		if err != nil {
			// The caller's end is an error (a census cut short is not
			// recorded); the end of PingWait is the census' end.
			if ctx.Err() != nil {
				return nil, fmt.Errorf("natsexec: census: %w", ctx.Err())
			}
			break
		}
		var p micro.Ping
		if json.Unmarshal(m.Data, &p) != nil || p.Metadata["prefix"] != e.cfg.Prefix || seen[p.ID] {
			continue
		}
		seen[p.ID] = true
		ids = append(ids, p.ID)
		if mem, err := strconv.ParseInt(p.Metadata[wire.MetaMemory], 10, 64); err == nil && mem > 0 {
			e.mu.Lock()
			e.memory[p.ID] = mem
			e.mu.Unlock()
		}
	}
	slices.Sort(ids)
	return ids, nil
}
