package natsexec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/emsf/emsf/coordinator"
)

// LatestJob returns the state of the job last updated in the KV bucket
// (with its manifest), or nil when the bucket holds none.
func (e *Executor) LatestJob(ctx context.Context) (*coordinator.JobState, error) {
	keys, err := e.kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("natsexec: list jobs: %w", err)
	}
	var latest *coordinator.JobState
	for key := range keys.Keys() {
		ent, err := e.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("natsexec: job %s: %w", key, err)
		}
		var st coordinator.JobState
		if json.Unmarshal(ent.Value(), &st) != nil {
			continue
		}
		if latest == nil || st.Updated.After(latest.Updated) {
			latest = &st
		}
	}
	if latest == nil {
		return nil, nil
	}
	st, _, err := e.State(ctx, latest.Job)
	return st, err
}
