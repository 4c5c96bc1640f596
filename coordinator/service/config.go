package service

import (
	"fmt"
	"math"
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
	// ModeOnlineEM feeds the new counts to online EM (factor.OnlineEM),
	// going on from the latest version's unit transitions (package doc).
	ModeOnlineEM Mode = "online-em"
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
	// Mode is ModeRefit (default), ModeIncremental or ModeOnlineEM.
	Mode Mode

	// Order is m, the number of hidden states (default 10); Tie the
	// tie mode; Seed the seed of the first version's random init.
	Order int
	Tie   factor.Tie
	Seed  uint64

	// MaxIter and Tol stop a refit (defaults 1000 and 1e-7, emsf fit's
	// relative-change rule); each version records how its refit ended
	// (Version.Status). Accel is the refit's acceleration (the zero
	// value: plain EM; emsf serve's default: SQUAREM).
	MaxIter int
	Tol     float64
	Accel   factor.Accel
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

	// OnlineEM configures ModeOnlineEM (zero value: defaults a = 0.8,
	// burn-in 100, floor factor.DefaultOnlineEMFloor). The floor must be
	// positive: without it a transition the model gives probability 0
	// would fail the retrain, and every later one (it stays pending).
	OnlineEM factor.OnlineEMOptions

	// Every retrains when this many transitions (rows) arrived since the
	// latest version; Interval retrains this often when any did. 0: off.
	Every    int64
	Interval time.Duration

	// States and Actions, when > 0, fix the model's size: transitions
	// outside it are rejected. 0 lets the model grow.
	States, Actions int

	// MaxModelBytes bounds the size of a model version (ModelBytes: the
	// model file and each copy a fit holds); default DefaultMaxModelBytes.
	// MaxStates and MaxActions bound the model's size when it grows
	// (default: the largest whose model alone, with one action or one
	// state, fits in MaxModelBytes). A row beyond either, or one whose
	// model would exceed MaxModelBytes, is rejected like a row outside a
	// fixed size, so nothing accepted asks for more memory than that.
	MaxStates, MaxActions int
	MaxModelBytes         int64

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
		c.MaxIter = 1000
	}
	if c.Tol == 0 {
		c.Tol = 1e-7
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
	if c.OnlineEM.GammaExp == 0 {
		c.OnlineEM.GammaExp = 0.8
	}
	if c.OnlineEM.BurnIn == 0 {
		c.OnlineEM.BurnIn = 100
	}
	if c.OnlineEM.Floor == 0 {
		c.OnlineEM.Floor = factor.DefaultOnlineEMFloor
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
	if c.MaxModelBytes == 0 {
		c.MaxModelBytes = DefaultMaxModelBytes
	}
	if c.MaxStates == 0 {
		c.MaxStates = MaxDim(c.MaxModelBytes, c.Order, c.Tie)
	}
	if c.MaxActions == 0 {
		c.MaxActions = MaxDim(c.MaxModelBytes, c.Order, c.Tie)
	}
	switch {
	case CheckName(c.Name) != nil:
		return fmt.Errorf("service: %w", CheckName(c.Name))
	case wire.CheckPrefix(c.Prefix) != nil:
		return fmt.Errorf("service: %w", wire.CheckPrefix(c.Prefix))
	case c.Mode != ModeRefit && c.Mode != ModeIncremental && c.Mode != ModeOnlineEM:
		return fmt.Errorf("service: mode %q: want refit, incremental or online-em", c.Mode)
	case c.UseWorkers != WorkersAuto && c.UseWorkers != WorkersAlways && c.UseWorkers != WorkersNever:
		return fmt.Errorf("service: use-workers %q: want auto, yes or no", c.UseWorkers)
	case c.Order < 1:
		return fmt.Errorf("service: order %d: must be >= 1", c.Order)
	case !(c.Alpha > 0 && c.Alpha <= 1):
		return fmt.Errorf("service: alpha %v: must be in (0, 1]", c.Alpha)
	case !(c.OnlineEM.GammaExp > 0.5 && c.OnlineEM.GammaExp <= 1):
		return fmt.Errorf("service: online EM step exponent %v: must be in (0.5, 1]", c.OnlineEM.GammaExp)
	case c.OnlineEM.BurnIn < 1:
		return fmt.Errorf("service: online EM burn-in %d: must be >= 1", c.OnlineEM.BurnIn)
	case !(c.OnlineEM.Floor > 0 && c.OnlineEM.Floor < 1):
		return fmt.Errorf("service: online EM floor %v: must be in (0, 1) (a transition of probability 0 would fail every retrain)", c.OnlineEM.Floor)
	case c.MaxIter < 0 || c.Tol < 0 || c.EtaMax < 0 || c.Every < 0 || c.Interval < 0 || c.States < 0 || c.Actions < 0:
		return fmt.Errorf("service: negative limit in %+v", *c)
	case c.MaxModelBytes < 0 || c.MaxStates < 0 || c.MaxActions < 0:
		return fmt.Errorf("service: max model bytes %d, max states %d, max actions %d: must be >= 0", c.MaxModelBytes, c.MaxStates, c.MaxActions)
	case c.MaxStates < 1 || c.MaxActions < 1:
		return fmt.Errorf("service: max model bytes %d do not hold a model of order %d with one state and one action (%d bytes)",
			c.MaxModelBytes, c.Order, factor.ModelBytes(1, c.Order, 1, c.Tie))
	case c.States > c.MaxStates:
		return fmt.Errorf("service: a fixed size of %d states is above the limit of %d states (max states, or max model bytes %d)", c.States, c.MaxStates, c.MaxModelBytes)
	case c.Actions > c.MaxActions:
		return fmt.Errorf("service: a fixed size of %d actions is above the limit of %d actions (max actions, or max model bytes %d)", c.Actions, c.MaxActions, c.MaxModelBytes)
	case c.States > 0 && c.Actions > 0 && factor.ModelBytes(c.States, c.Order, c.Actions, c.Tie) > c.MaxModelBytes:
		return fmt.Errorf("service: a fixed size of %d states and %d actions needs a model of %d bytes, above max model bytes %d",
			c.States, c.Actions, factor.ModelBytes(c.States, c.Order, c.Actions, c.Tie), c.MaxModelBytes)
	case wire.CheckBucket(c.StateBucket) != nil:
		return fmt.Errorf("service: %w", wire.CheckBucket(c.StateBucket))
	case wire.CheckBucket(c.ModelBucket) != nil:
		return fmt.Errorf("service: %w", wire.CheckBucket(c.ModelBucket))
	}
	return nil
}

// DefaultMaxModelBytes is the default Config.MaxModelBytes: 4 GiB.
const DefaultMaxModelBytes = 4 << 30

// MaxDim is the largest n such that a model of n states, order m and one
// action fits in maxBytes (the same bound holds for actions with one
// state), capped below math.MaxInt32 (the largest index a count table
// holds).
func MaxDim(maxBytes int64, m int, tie factor.Tie) int {
	if m < 1 {
		return 0
	}
	per := factor.ModelBytes(1, m, 1, tie)
	return int(min(maxBytes/per, math.MaxInt32-1))
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
