package natsexec

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
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
// the last $SRV.PING census. The first call waits for a census; later
// ones refresh it in the background when older than PingEvery, or wait
// for a new one when the last found none.
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
		e.mu.Lock()
		e.census.alive, e.census.ids, e.census.at = len(ids), ids, time.Now()
		e.mu.Unlock()
		return len(ids), nil
	}
	if stale && !c.running && !e.closing {
		e.census.running = true
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			pctx, cancel := context.WithTimeout(context.Background(), 2*e.cfg.PingWait+time.Second)
			defer cancel()
			ids, err := e.Census(pctx)
			e.mu.Lock()
			defer e.mu.Unlock()
			e.census.running = false
			if err == nil {
				e.census.alive, e.census.ids, e.census.at = len(ids), ids, time.Now()
			}
		}()
	}
	e.mu.Unlock()
	return c.alive, nil
}

// Census lists the ids of the workers under this prefix that answer a
// $SRV.PING within the executor's PingWait.
func (e *Executor) Census(ctx context.Context) ([]string, error) {
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
	ctx, cancel := context.WithTimeout(ctx, e.cfg.PingWait)
	defer cancel()
	seen := map[string]bool{}
	var ids []string
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			break
		}
		var p micro.Ping
		if json.Unmarshal(m.Data, &p) != nil || p.Metadata["prefix"] != e.cfg.Prefix || seen[p.ID] {
			continue
		}
		seen[p.ID] = true
		ids = append(ids, p.ID)
	}
	slices.Sort(ids)
	return ids, nil
}
