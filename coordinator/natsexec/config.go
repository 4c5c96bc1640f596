package natsexec

import (
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/emsf/emsf/coordinator/owners"
	"github.com/emsf/emsf/worker/wire"
)

// Config configures an Executor.
type Config struct {
	// Prefix is the subject prefix (default wire.DefaultPrefix).
	Prefix string
	// ObjectBucket and KVBucket name the buckets (defaults
	// wire.DefaultObjectBucket and wire.DefaultKVBucket); they are
	// created when missing, with file storage and Replicas replicas
	// (default 1; 3 on a 3-node cluster).
	ObjectBucket, KVBucket string
	Replicas               int
	// PingWait is how long a worker census waits for PING replies
	// (default 250ms); PingEvery how old a census (Workers' own or a
	// caller's Census) may be before Workers refreshes it in the
	// background (default 5s).
	PingWait, PingEvery time.Duration
	// ProbeEvery is how often the executor checks that the worker holding
	// a task is still connected (default 1s): a $SRV.PING to that worker
	// that finds no responders fails the task at once (it is handed out
	// again) instead of at the end of its lease.
	ProbeEvery time.Duration
	// FrozenAfter is how long the worker holding a task may leave its
	// PINGs unanswered before it counts as frozen (a stopped process, a
	// machine that hangs) and loses the task (default 15s; it is
	// recomputed elsewhere, a late answer is dropped). A live worker
	// answers PING from its own goroutine while it computes.
	FrozenAfter time.Duration
	// QuarantineAfter is how many of a worker's partials may fail the
	// executor's checks (label, CRC, encoding, values, log-likelihood)
	// before it is quarantined (default 3): logged with its id, given no
	// more tasks (it is left out of direct hand-outs and named in every
	// task's Avoid), and its answers are dropped.
	QuarantineAfter int
	// SlowLink is the factor of owners.LeaveOut: a worker whose link
	// probe takes more than SlowLink times the median worker's is left
	// out of the ingest's and the owners exchange's placements while it
	// stays slow (0: owners.DefaultSlowLink; negative: no probe, every
	// worker is placed).
	SlowLink float64
	// Logger receives the executor's logs (default: none).
	Logger hclog.Logger
	// ResumeEvery is how many times its cost a fit with loop state
	// (factor.LoopState: SQUAREM, the held-out rule) runs between two
	// resume points (0: resumeEvery); negative takes one at every commit.
	ResumeEvery float64
}

func (c *Config) defaults() error {
	if c.Prefix == "" {
		c.Prefix = wire.DefaultPrefix
	}
	if c.ObjectBucket == "" {
		c.ObjectBucket = wire.DefaultObjectBucket
	}
	if c.KVBucket == "" {
		c.KVBucket = wire.DefaultKVBucket
	}
	if c.Replicas <= 0 {
		c.Replicas = 1
	}
	if c.PingWait <= 0 {
		c.PingWait = 250 * time.Millisecond
	}
	if c.PingEvery <= 0 {
		c.PingEvery = 5 * time.Second
	}
	if c.FrozenAfter <= 0 {
		c.FrozenAfter = 15 * time.Second
	}
	if c.ProbeEvery <= 0 {
		c.ProbeEvery = time.Second
	}
	if c.SlowLink == 0 {
		c.SlowLink = owners.DefaultSlowLink
	}
	if c.QuarantineAfter <= 0 {
		c.QuarantineAfter = 3
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if err := wire.CheckPrefix(c.Prefix); err != nil {
		return fmt.Errorf("natsexec: %w", err)
	}
	for _, b := range []string{c.ObjectBucket, c.KVBucket} {
		if err := wire.CheckBucket(b); err != nil {
			return fmt.Errorf("natsexec: %w", err)
		}
	}
	return nil
}
