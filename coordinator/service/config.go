package service

import (
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/emsf/emsf/coordinator/natsexec"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/worker/wire"
)

// Mode is how a retrain uses the data.
type Mode string

const (
	// ModeRefit runs batch EM over all counts, warm-started.
	ModeRefit Mode = "refit"
	// ModeIncremental commits the new counts with learning rate Alpha.
	ModeIncremental Mode = "incremental"
)

// UseWorkers says whether refits use the cluster's workers.
type UseWorkers string

const (
	// WorkersAuto uses emsf workers when any answer, else fits in-process.
	WorkersAuto UseWorkers = "auto"
	// WorkersAlways needs workers (a refit waits for them and fails
	// without).
	WorkersAlways UseWorkers = "yes"
	// WorkersNever always fits in-process.
	WorkersNever UseWorkers = "no"
)

// Default bucket names.
const (
	DefaultStateBucket = "emsf-serve"
	DefaultModelBucket = "emsf-models"
)

// Config configures a Service. Name is required; the zero value of every
// other field is a documented default.
type Config struct {
	// Name is the model name the service owns (letters, digits, '-', '_').
	Name string
	// Prefix is the subject prefix (default wire.DefaultPrefix).
	Prefix string
	// Mode is ModeRefit (default) or ModeIncremental.
	Mode Mode

	// Order is m, the number of hidden states (default 10); Tie the
	// tie mode; Seed the seed of the first version's random init.
	Order int
	Tie   factor.Tie
	Seed  uint64

	// MaxIter and Tol stop a refit (defaults 100 and 1e-6).
	MaxIter int
	Tol     float64
	// Workers is the number of goroutines of an in-process refit
	// (default 1); ShardNNZ the shard size (default shard.DefaultTargetNNZ).
	Workers  int
	ShardNNZ int
	// UseWorkers says whether refits use NATS workers (default auto);
	// Exec configures the executor then (its Prefix is Prefix).
	UseWorkers UseWorkers
	Exec       natsexec.Config
	// WorkerTimeout is a cluster task's lease (default 30s).
	WorkerTimeout time.Duration

	// Alpha is the learning rate of an incremental commit (default 0.5);
	// EtaMax its buffer (default 0: unbounded; see factor.IncrementalOptions).
	Alpha  float64
	EtaMax int

	// Every retrains when this many transitions (rows) arrived since the
	// latest version; Interval retrains this often when any did. 0: off.
	Every    int64
	Interval time.Duration

	// States and Actions, when > 0, fix the model's size: transitions
	// outside it are rejected. 0 lets the model grow.
	States, Actions int

	// CheckpointEvery is how often the counts are checkpointed while data
	// arrives (default 2s).
	CheckpointEvery time.Duration

	// StateBucket (KV) and ModelBucket (Object Store) hold the latest
	// version and the models and checkpoints; Replicas their replicas and
	// the stream's (default 1). StreamMaxAge and StreamMaxBytes limit the
	// stream when it is created (default: no limit).
	StateBucket, ModelBucket string
	Replicas                 int
	StreamMaxAge             time.Duration
	StreamMaxBytes           int64

	// Logger receives the logs (default: none); Registry the Prometheus
	// metrics (default: none).
	Logger   hclog.Logger
	Registry prometheus.Registerer

	// IngestDelay sleeps this long per message (tests: to kill the process
	// mid-stream).
	IngestDelay time.Duration
}

func (c *Config) defaults() error {
	if c.Prefix == "" {
		c.Prefix = wire.DefaultPrefix
	}
	if c.Mode == "" {
		c.Mode = ModeRefit
	}
	if c.Order == 0 {
		c.Order = 10
	}
	if c.MaxIter == 0 {
		c.MaxIter = 100
	}
	if c.Tol == 0 {
		c.Tol = 1e-6
	}
	if c.Workers <= 0 {
		c.Workers = 1
	}
	if c.UseWorkers == "" {
		c.UseWorkers = WorkersAuto
	}
	if c.WorkerTimeout <= 0 {
		c.WorkerTimeout = 30 * time.Second
	}
	if c.Alpha == 0 {
		c.Alpha = 0.5
	}
	if c.CheckpointEvery <= 0 {
		c.CheckpointEvery = 2 * time.Second
	}
	if c.StateBucket == "" {
		c.StateBucket = DefaultStateBucket
	}
	if c.ModelBucket == "" {
		c.ModelBucket = DefaultModelBucket
	}
	if c.Replicas <= 0 {
		c.Replicas = 1
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	c.Exec.Prefix = c.Prefix
	switch {
	case CheckName(c.Name) != nil:
		return fmt.Errorf("service: %w", CheckName(c.Name))
	case wire.CheckPrefix(c.Prefix) != nil:
		return fmt.Errorf("service: %w", wire.CheckPrefix(c.Prefix))
	case c.Mode != ModeRefit && c.Mode != ModeIncremental:
		return fmt.Errorf("service: mode %q: want refit or incremental", c.Mode)
	case c.UseWorkers != WorkersAuto && c.UseWorkers != WorkersAlways && c.UseWorkers != WorkersNever:
		return fmt.Errorf("service: use-workers %q: want auto, yes or no", c.UseWorkers)
	case c.Order < 1:
		return fmt.Errorf("service: order %d: must be >= 1", c.Order)
	case !(c.Alpha > 0 && c.Alpha <= 1):
		return fmt.Errorf("service: alpha %v: must be in (0, 1]", c.Alpha)
	case c.MaxIter < 0 || c.Tol < 0 || c.EtaMax < 0 || c.Every < 0 || c.Interval < 0 || c.States < 0 || c.Actions < 0:
		return fmt.Errorf("service: negative limit in %+v", *c)
	case wire.CheckBucket(c.StateBucket) != nil:
		return fmt.Errorf("service: %w", wire.CheckBucket(c.StateBucket))
	case wire.CheckBucket(c.ModelBucket) != nil:
		return fmt.Errorf("service: %w", wire.CheckBucket(c.ModelBucket))
	}
	return nil
}

// CheckName checks a model name: one subject token of letters, digits,
// '-' and '_' (it names subjects, a stream, keys and objects).
func CheckName(name string) error {
	if name == "" {
		return fmt.Errorf("model name is empty")
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return fmt.Errorf("model name %q: want letters, digits, '-' and '_'", name)
		}
	}
	return nil
}

// TransitionsSubject is where transitions for model name are published.
func TransitionsSubject(prefix, name string) string { return prefix + "." + name + ".transitions" }

// RetrainSubject is the retrain request subject of model name.
func RetrainSubject(prefix, name string) string { return prefix + "." + name + ".retrain" }

// StatusSubject is the status request subject of model name.
func StatusSubject(prefix, name string) string { return prefix + "." + name + ".status" }

// ModelSubject is where new versions of model name are announced.
func ModelSubject(prefix, name string) string { return prefix + "." + name + ".model" }

// StreamName is the JetStream stream of model name's transitions.
func StreamName(prefix, name string) string {
	return strings.ToUpper(strings.ReplaceAll(prefix, ".", "_")) + "_" + name
}

// LatestKey is the KV key holding model name's latest Version.
func LatestKey(name string) string { return name + ".latest" }

// ModelObject is the object holding version v of model name.
func ModelObject(name string, v int) string { return fmt.Sprintf("%s/models/%d", name, v) }

// StateObject is the object holding model name's checkpoint.
func StateObject(name string) string { return name + "/state" }
