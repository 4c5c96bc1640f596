package service

import (
	"fmt"
	"math"
	"runtime"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/emsf/emsf/coordinator/natsexec"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
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
	// Version is the version the micro service announces, in semantic
	// versioning (default "0.0.0"): emsf serve gives the binary's.
	Version string

	// Order is m, the number of hidden states (default 10); Tie the
	// tie mode; Seed the seed of the first version's random init (used as
	// it is, 0 included; DefaultConfig's is 1).
	Order int
	Tie   factor.Tie
	Seed  uint64

	// MaxIter and Tol stop a refit (defaults 1000 and 1e-7, emsf fit's
	// relative-change rule; TolNever: never on the change, MaxIter
	// passes); each version records how its refit ended (Version.Status). Accel is the refit's acceleration (the zero
	// value: plain EM; emsf serve's default: SQUAREM).
	MaxIter int
	Tol     float64
	Accel   factor.Accel
	// Quality is what a refit estimates beside its stopping (ModeRefit
	// only). The zero value is maximum-likelihood EM from NewRandom, each
	// version served as its D·K; emsf serve's default is emsf fit's
	// (DefaultQuality; the factor package doc): a validation split of the
	// counts, MAP-EM, the first version started from the counts, the
	// held-out stopping rule, and a predictive rule tuned on the split and
	// stored with each version, which every query then answers with.
	Quality Quality
	// Workers is the number of goroutines of an in-process refit
	// (default GOMAXPROCS); ShardNNZ the shard size (default shard.DefaultTargetNNZ).
	Workers  int
	ShardNNZ int
	// UseWorkers says whether refits use NATS workers (default auto);
	// Exec configures the executor then (its Prefix is Prefix).
	UseWorkers UseWorkers
	Exec       natsexec.Config
	// WorkerTimeout is a cluster task's lease (default 30s).
	WorkerTimeout time.Duration
	// Verify is the fraction of a refit's cluster tasks checked on
	// another worker (coordinator.Options.Verify; default 0.02).
	Verify float64

	// Alpha is the learning rate of an incremental commit (default 0.5);
	// EtaMax its buffer (default 0: unbounded; see factor.IncrementalOptions).
	Alpha  float64
	EtaMax int

	// OnlineEM configures ModeOnlineEM (zero value: defaults a = 0.8,
	// burn-in 100, floor factor.DefaultOnlineEMFloor). The floor must be
	// positive: without it a transition the model gives probability 0
	// would fail the retrain, and every later one (it stays pending).
	OnlineEM factor.OnlineEMOptions

	// Policy says when the service retrains by itself (default: never,
	// only when asked).
	Policy Policy

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
	// arrives (default 2s): at least, for a checkpoint that takes d waits
	// CheckpointCost·d after it, so that checkpoints take at most about a
	// tenth of the time whatever the table's size.
	CheckpointEvery time.Duration

	// StateBucket (KV) and ModelBucket (Object Store) hold the latest
	// version and the models and checkpoints; Replicas their replicas and
	// the stream's (default 1). StreamMaxAge and StreamMaxBytes limit the
	// stream when it is created (default: no limit; a limit can drop
	// transitions no checkpoint holds yet: StreamPurge is the safe way to
	// bound the stream).
	StateBucket, ModelBucket string
	Replicas                 int
	StreamMaxAge             time.Duration
	StreamMaxBytes           int64

	// StreamPurge says what becomes of the messages a checkpoint holds
	// (default PurgeCheckpointed: they are purged from the stream once the
	// checkpoint is stored, but for the last StreamKeep of them).
	StreamPurge Purge
	StreamKeep  uint64

	// KeepVersions is how many model versions the Object Store keeps, the
	// latest and those before it (default DefaultKeepVersions; < 0: all).
	KeepVersions int

	// BufferRows is the count table's least buffer (shard.Table's
	// MinBufferRows; default shard.DefaultMinBufferRows).
	BufferRows int

	// StopTimeout bounds each step of a stop after the fit in progress has
	// ended (the last checkpoint, the purge; default 30s).
	StopTimeout time.Duration

	// Logger receives the logs (default: none); Registry the Prometheus
	// metrics (default: none).
	Logger   hclog.Logger
	Registry prometheus.Registerer

	// IngestDelay sleeps this long per message (tests: to kill the process
	// mid-stream).
	IngestDelay time.Duration
}

// Quality configures what a refit estimates as emsf fit does (the factor
// package doc); the zero value is none of it.
type Quality struct {
	// Validation is the fraction of every count held out of the refit to
	// choose the predictive rule and to stop (shard.SplitCounts, seeded by
	// Config.Seed); 0: no split, so neither.
	Validation float64
	// Smooth is the predictive rule each version stores: SmoothAuto (the
	// counts backed off to D·K, factor.Smoothing, chosen on the split),
	// SmoothBackground (D·K interpolated with the next-state frequencies
	// only: no counts stored), or SmoothNone (D·K). A version whose
	// counts would take its model file beyond MaxModelBytes stores the
	// background rule instead (the log says so).
	Smooth Smooth
	// Patience and MinGain are the held-out stopping rule's
	// (factor.EarlyStop): a refit stops once Patience scores on the split
	// in a row have not gained MinGain, beside MaxIter and Tol, and keeps
	// its best iterate; Patience 0: the relative change alone.
	Patience int
	MinGain  float64
	// Prior is MAP-EM's Dirichlet prior (zero: none).
	Prior factor.Prior
	// Seeded starts the first version from the counts (factor.NewSeeded)
	// rather than from NewRandom.
	Seeded bool
}

// Smooth is Quality.Smooth.
type Smooth string

// The rules a version can store.
const (
	SmoothNone       Smooth = ""
	SmoothAuto       Smooth = "auto"
	SmoothBackground Smooth = "background"
)

// DefaultQuality is emsf fit's defaults, for a refit: emsf serve's.
func DefaultQuality() Quality {
	return Quality{Validation: 0.1, Smooth: SmoothAuto, Patience: factor.DefaultPatience, MinGain: factor.DefaultMinGain,
		Prior: factor.Prior{D: factor.DefaultPriorD, K: factor.DefaultPriorK}, Seeded: true}
}

// split reports whether a refit holds counts out.
func (q Quality) split() bool { return q.Validation > 0 }

// Purge says what becomes of the stream's messages a checkpoint holds.
type Purge string

const (
	// PurgeCheckpointed purges them once the checkpoint that holds them is
	// stored (keeping the last StreamKeep): the stream holds what no
	// checkpoint holds yet, and a restart loses nothing (package doc).
	PurgeCheckpointed Purge = "checkpointed"
	// PurgeNever keeps them (the stream's own limits apply).
	PurgeNever Purge = "never"
)

// DefaultKeepVersions is the default Config.KeepVersions.
const DefaultKeepVersions = 10

// TolNever is the Tol of a refit that never stops on the relative change
// of its log-likelihood, only after MaxIter passes (a zero Tol takes the
// default). The smallest positive tolerance is not the same: a refit
// whose log-likelihood stops changing at all (an exact fixed point,
// which SQUAREM reaches on small counts) stops there.
const TolNever = -1.0

// CheckpointCost is the least pause after a checkpoint, in units of the
// time it took (Config.CheckpointEvery).
const CheckpointCost = 10

// DefaultConfig returns the default of every field (Name aside; MaxStates
// and MaxActions 0, derived from MaxModelBytes and Order by New): what New
// takes for a zero field, and where emsf serve's flags start. It is the
// one place the defaults are written.
func DefaultConfig() Config {
	return Config{
		Prefix: wire.DefaultPrefix, Mode: ModeRefit,
		Order: 10, Seed: 1, MaxIter: 1000, Tol: 1e-7, Version: "0.0.0", Workers: runtime.GOMAXPROCS(0), ShardNNZ: shard.DefaultTargetNNZ,
		UseWorkers: WorkersAuto, WorkerTimeout: 30 * time.Second, Verify: 0.02,
		Alpha:           0.5,
		OnlineEM:        factor.OnlineEMOptions{GammaExp: 0.8, BurnIn: 100, Floor: factor.DefaultOnlineEMFloor},
		MaxModelBytes:   DefaultMaxModelBytes,
		CheckpointEvery: 2 * time.Second,
		StateBucket:     DefaultStateBucket, ModelBucket: DefaultModelBucket, Replicas: 1,
		StreamPurge: PurgeCheckpointed, KeepVersions: DefaultKeepVersions,
		BufferRows: shard.DefaultMinBufferRows, StopTimeout: 30 * time.Second,
	}
}

// defaults fills every zero field from DefaultConfig, derives MaxStates
// and MaxActions, and checks the result (Validate).
func (c *Config) defaults() error {
	d := DefaultConfig()
	fill(&c.Prefix, d.Prefix)
	fill(&c.Mode, d.Mode)
	fill(&c.Order, d.Order)
	fill(&c.MaxIter, d.MaxIter)
	fill(&c.Tol, d.Tol)
	fill(&c.ShardNNZ, d.ShardNNZ)
	fill(&c.UseWorkers, d.UseWorkers)
	fill(&c.Alpha, d.Alpha)
	fill(&c.OnlineEM.GammaExp, d.OnlineEM.GammaExp)
	fill(&c.OnlineEM.BurnIn, d.OnlineEM.BurnIn)
	fill(&c.OnlineEM.Floor, d.OnlineEM.Floor)
	fill(&c.MaxModelBytes, d.MaxModelBytes)
	fill(&c.StateBucket, d.StateBucket)
	fill(&c.ModelBucket, d.ModelBucket)
	fill(&c.StreamPurge, d.StreamPurge)
	fill(&c.KeepVersions, d.KeepVersions)
	fill(&c.BufferRows, d.BufferRows)
	fill(&c.Version, d.Version)
	if c.Workers <= 0 {
		c.Workers = d.Workers
	}
	if c.WorkerTimeout <= 0 {
		c.WorkerTimeout = d.WorkerTimeout
	}
	if c.CheckpointEvery <= 0 {
		c.CheckpointEvery = d.CheckpointEvery
	}
	if c.StopTimeout <= 0 {
		c.StopTimeout = d.StopTimeout
	}
	if c.Replicas <= 0 {
		c.Replicas = d.Replicas
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	c.Exec.Prefix = c.Prefix
	if c.MaxStates == 0 {
		c.MaxStates = MaxDim(c.MaxModelBytes, c.Order, c.Tie)
	}
	if c.MaxActions == 0 {
		c.MaxActions = MaxDim(c.MaxModelBytes, c.Order, c.Tie)
	}
	return c.Validate()
}

// fill sets *x to d when it is the zero value.
func fill[T comparable](x *T, d T) {
	var zero T
	if *x == zero {
		*x = d
	}
}

// ConfigError is a Config field that breaks a rule: the field's name as
// written in Config ("Order", "OnlineEM.Floor", "Policy.Every"), its
// value, and the rule. emsf serve names the flag instead of the field.
type ConfigError struct {
	Field string
	Value any
	Rule  string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("service: %s %s: %s", e.Field, FormatValue(e.Value), e.Rule)
}

// FormatValue writes a field's value as errors show it (strings quoted).
func FormatValue(v any) string {
	switch x := v.(type) {
	case string:
		return fmt.Sprintf("%q", x)
	case Mode, UseWorkers, Purge:
		return fmt.Sprintf("%q", x)
	}
	return fmt.Sprint(v)
}

// Validate checks a Config as New will use it: zero means the default
// (DefaultConfig) only where New fills it, so a zero Order, Workers or
// CheckpointEvery, say, is an error here (emsf serve checks its flags
// with it); MaxStates and MaxActions 0 are derived. The first field that
// breaks a rule is a *ConfigError.
func (c *Config) Validate() error {
	bad := func(field string, v any, rule string, args ...any) error {
		return &ConfigError{Field: field, Value: v, Rule: fmt.Sprintf(rule, args...)}
	}
	maxStates, maxActions := c.MaxStates, c.MaxActions
	if maxStates == 0 {
		maxStates = MaxDim(c.MaxModelBytes, c.Order, c.Tie)
	}
	if maxActions == 0 {
		maxActions = MaxDim(c.MaxModelBytes, c.Order, c.Tie)
	}
	switch {
	case CheckName(c.Name) != nil:
		return fmt.Errorf("service: %w", CheckName(c.Name))
	case wire.CheckPrefix(c.Prefix) != nil:
		return fmt.Errorf("service: %w", wire.CheckPrefix(c.Prefix))
	case c.Mode != ModeRefit && c.Mode != ModeIncremental && c.Mode != ModeOnlineEM:
		return bad("Mode", c.Mode, "want refit, incremental or online-em")
	case c.UseWorkers != WorkersAuto && c.UseWorkers != WorkersAlways && c.UseWorkers != WorkersNever:
		return bad("UseWorkers", c.UseWorkers, "want auto, yes or no")
	case c.Order < 1:
		return bad("Order", c.Order, "must be >= 1")
	case c.MaxIter < 1:
		return bad("MaxIter", c.MaxIter, "must be >= 1")
	case !(c.Tol >= 0 || c.Tol == TolNever):
		return bad("Tol", c.Tol, "must be >= 0 (or TolNever)")
	case c.Workers < 1:
		return bad("Workers", c.Workers, "must be >= 1")
	case c.ShardNNZ < 1:
		return bad("ShardNNZ", c.ShardNNZ, "must be >= 1")
	case c.WorkerTimeout <= 0:
		return bad("WorkerTimeout", c.WorkerTimeout, "must be > 0")
	case !(c.Verify >= 0 && c.Verify <= 1):
		return bad("Verify", c.Verify, "must be in [0, 1]")
	case !(c.Alpha > 0 && c.Alpha <= 1):
		return bad("Alpha", c.Alpha, "must be in (0, 1]")
	case c.EtaMax < 0:
		return bad("EtaMax", c.EtaMax, "must be >= 0")
	case !(c.OnlineEM.GammaExp > 0.5 && c.OnlineEM.GammaExp <= 1):
		return bad("OnlineEM.GammaExp", c.OnlineEM.GammaExp, "must be in (0.5, 1]")
	case c.OnlineEM.BurnIn < 1:
		return bad("OnlineEM.BurnIn", c.OnlineEM.BurnIn, "must be >= 1")
	case !(c.OnlineEM.Floor > 0 && c.OnlineEM.Floor < 1):
		return bad("OnlineEM.Floor", c.OnlineEM.Floor, "must be in (0, 1) (a transition of probability 0 would fail every retrain)")
	case !(c.Quality.Validation >= 0 && c.Quality.Validation < 1):
		return bad("Quality.Validation", c.Quality.Validation, "must be in [0, 1)")
	case c.Quality.Smooth != SmoothNone && c.Quality.Smooth != SmoothAuto && c.Quality.Smooth != SmoothBackground:
		return bad("Quality.Smooth", c.Quality.Smooth, "want auto, background or none")
	case c.Quality.Patience < 0:
		return bad("Quality.Patience", c.Quality.Patience, "must be >= 0")
	case !(c.Quality.MinGain >= 0 && c.Quality.MinGain < math.Inf(1)):
		return bad("Quality.MinGain", c.Quality.MinGain, "must be a number >= 0")
	case !(c.Quality.Prior.D >= 0 && c.Quality.Prior.D < math.Inf(1)):
		return bad("Quality.Prior.D", c.Quality.Prior.D, "must be a number >= 0")
	case !(c.Quality.Prior.K >= 0 && c.Quality.Prior.K < math.Inf(1)):
		return bad("Quality.Prior.K", c.Quality.Prior.K, "must be a number >= 0")
	case !c.Quality.split() && (c.Quality.Smooth != SmoothNone || c.Quality.Patience > 0):
		return bad("Quality.Validation", c.Quality.Validation, "a rule to choose or a held-out stop needs a validation fraction > 0")
	case c.Mode != ModeRefit && c.Quality != (Quality{}):
		return bad("Mode", c.Mode, "the refit's quality settings (validation split, rule, held-out stop, prior, seeded start) apply to mode refit only")
	case c.Policy.Every < 0:
		return bad("Policy.Every", c.Policy.Every, "must be >= 0")
	case c.Policy.Interval < 0:
		return bad("Policy.Interval", c.Policy.Interval, "must be >= 0")
	case c.States < 0:
		return bad("States", c.States, "must be >= 0")
	case c.Actions < 0:
		return bad("Actions", c.Actions, "must be >= 0")
	case c.MaxModelBytes < 1:
		return bad("MaxModelBytes", c.MaxModelBytes, "must be >= 1")
	case c.MaxStates < 0 || c.MaxStates >= math.MaxInt32:
		return bad("MaxStates", c.MaxStates, "must be in [0, %d)", math.MaxInt32)
	case c.MaxActions < 0 || c.MaxActions >= math.MaxInt32:
		return bad("MaxActions", c.MaxActions, "must be in [0, %d)", math.MaxInt32)
	case maxStates < 1 || maxActions < 1:
		return bad("MaxModelBytes", c.MaxModelBytes, "does not hold a model of order %d with one state and one action (%d bytes)",
			c.Order, factor.ModelBytes(1, c.Order, 1, c.Tie))
	case c.States > maxStates:
		return bad("States", c.States, "a fixed size above the limit of %d states (max states, or max model bytes %d)", maxStates, c.MaxModelBytes)
	case c.Actions > maxActions:
		return bad("Actions", c.Actions, "a fixed size above the limit of %d actions (max actions, or max model bytes %d)", maxActions, c.MaxModelBytes)
	case c.States > 0 && c.Actions > 0 && factor.ModelBytes(c.States, c.Order, c.Actions, c.Tie) > c.MaxModelBytes:
		return bad("States", c.States, "a fixed size of %d states and %d actions needs a model of %d bytes, above max model bytes %d",
			c.States, c.Actions, factor.ModelBytes(c.States, c.Order, c.Actions, c.Tie), c.MaxModelBytes)
	case c.CheckpointEvery <= 0:
		return bad("CheckpointEvery", c.CheckpointEvery, "must be > 0")
	case c.StopTimeout <= 0:
		return bad("StopTimeout", c.StopTimeout, "must be > 0")
	case c.Replicas < 1 || c.Replicas > 5:
		return bad("Replicas", c.Replicas, "must be in [1, 5]")
	case c.StreamMaxAge < 0:
		return bad("StreamMaxAge", c.StreamMaxAge, "must be >= 0")
	case c.StreamMaxBytes < 0:
		return bad("StreamMaxBytes", c.StreamMaxBytes, "must be >= 0")
	case c.StreamPurge != PurgeCheckpointed && c.StreamPurge != PurgeNever:
		return bad("StreamPurge", c.StreamPurge, "want checkpointed or never")
	case c.BufferRows < 1:
		return bad("BufferRows", c.BufferRows, "must be >= 1")
	case c.IngestDelay < 0:
		return bad("IngestDelay", c.IngestDelay, "must be >= 0")
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
