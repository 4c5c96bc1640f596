package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/coordinator/natsexec"
	"github.com/emsf/emsf/coordinator/service"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
	"github.com/emsf/emsf/worker"
	"github.com/emsf/emsf/worker/wire"
)

// serviceFlags are the flags shared by serve, publish, retrain and model:
// the connection, the model name and the buckets.
type serviceFlags struct {
	natsFlags
	name        string
	stateBucket string
	modelBucket string
}

func (f *serviceFlags) register(fs *flag.FlagSet) {
	f.natsFlags.register(fs)
	fs.StringVar(&f.name, "name", "", "model name (letters, digits, '-', '_'): subjects <prefix>.NAME.transitions, .retrain, .status, .model")
	fs.StringVar(&f.stateBucket, "bucket-serve", service.DefaultStateBucket, "JetStream KV bucket holding each model's latest version")
	fs.StringVar(&f.modelBucket, "bucket-models", service.DefaultModelBucket, "JetStream Object Store bucket holding model versions and count checkpoints")
}

func (f *serviceFlags) validate() error {
	if f.name == "" {
		return usagef("--name is required")
	}
	if err := service.CheckName(f.name); err != nil {
		return usagef("--name: %v", err)
	}
	if wire.CheckBucket(f.stateBucket) != nil {
		return usagef("--bucket-serve %q: want letters, digits, '-' and '_'", f.stateBucket)
	}
	if wire.CheckBucket(f.modelBucket) != nil {
		return usagef("--bucket-models %q: want letters, digits, '-' and '_'", f.modelBucket)
	}
	return f.natsFlags.validate()
}

// connect connects to --nats, NATS_URL, or else the default local server
// (where emsf serve --embedded listens by default).
func (f *serviceFlags) connect(client string) (*nats.Conn, error) { return f.dial(client) }

// connErr adds the connection's last asynchronous error (a permissions
// violation arrives that way, and the call itself only times out) to err.
func connErr(nc *nats.Conn, err error) error {
	if err == nil || nc == nil {
		return err
	}
	if last := nc.LastError(); last != nil && !strings.Contains(err.Error(), last.Error()) {
		return fmt.Errorf("%w (%v)", err, worker.AuthHint(last))
	}
	return err
}

// serveFlags are emsf serve's flags: the connection and model name, the
// logs, the embedded server, and the service.Config fields a user sets,
// bound to cfg and registered with service.DefaultConfig()'s values as
// their defaults (the one place they are written). config checks them
// (service.Config.Validate, each error naming its flag) and returns the
// Config.
type serveFlags struct {
	serviceFlags
	logs          logFlags
	embedded      bool
	store, listen string
	port          int
	metricsAddr   string
	// Flags whose values are converted into cfg by config.
	mode, tie, useWorkers, purge string
	accel                        string
	keepVersions                 int
	quality                      serveQuality
	onlineEM                     onlineEMParams
	cfg                          service.Config
}

// serveFieldFlags names the flag of each service.Config field serveFlags
// sets (service.ConfigError names the field).
var serveFieldFlags = map[string]string{
	"Mode": "mode", "UseWorkers": "use-workers", "Order": "order", "MaxIter": "iters", "Tol": "tol", "Workers": "workers",
	"ShardNNZ": "shard-nnz", "WorkerTimeout": "worker-timeout", "Verify": "verify", "Alpha": "alpha", "EtaMax": "eta-max",
	"OnlineEM.GammaExp": "gamma-exp", "OnlineEM.BurnIn": "burn-in", "OnlineEM.Floor": "online-em-floor",
	"Policy.Every": "every", "Policy.Interval": "interval", "States": "states", "Actions": "actions",
	"MaxModelBytes": "max-model-bytes", "MaxStates": "max-states", "MaxActions": "max-actions",
	"CheckpointEvery": "checkpoint-every", "Replicas": "replicas", "StreamMaxAge": "stream-max-age",
	"StreamMaxBytes": "stream-max-bytes", "StreamPurge": "stream-purge", "StreamKeep": "stream-keep",
	"KeepVersions": "keep-versions", "BufferRows": "buffer-rows", "StopTimeout": "stop-timeout", "IngestDelay": "ingest-delay",
	"Quality.Validation": "validation", "Quality.Smooth": "smooth", "Quality.Patience": "patience", "Quality.MinGain": "min-gain",
}

// serveQuality holds the flags of a refit's estimate
// (service.Config.Quality), as emsf fit's of the same names.
type serveQuality struct {
	smooth, stop string
	validation   float64
	patience     int
	minGain      float64
	plain        bool
}

// serveQualityFlags are the flags --plain sets itself, and that apply to
// --mode refit only.
var serveQualityFlags = []string{"smooth", "stop", "validation", "patience", "min-gain"}

func (q *serveQuality) register(fs *flag.FlagSet) {
	d := service.DefaultQuality()
	fs.StringVar(&q.smooth, "smooth", string(d.Smooth), "refit: the predictive rule stored with each version and used by every query: auto (the counts, discounted, backed off to D·K interpolated with the next-state frequencies, chosen per action on the --validation split: emsf fit's default), background (λ only: no counts stored) or none (D·K)")
	fs.StringVar(&q.stop, "stop", "auto", "refit: stopping rule beside --iters and --tol: validation (stop once the --validation score has not gained for --patience scores, and keep the best iterate), tol (the relative change alone), or auto: validation")
	fs.Float64Var(&q.validation, "validation", d.Validation, "refit: fraction of every count held out (seeded by --seed) to choose the rule and to stop")
	fs.IntVar(&q.patience, "patience", d.Patience, "refit with --stop validation: scores in a row without gain before it stops")
	fs.Float64Var(&q.minGain, "min-gain", d.MinGain, "refit with --stop validation: the least rise of the validation score (nats per validation transition) that counts as a gain")
	fs.BoolVar(&q.plain, "plain", false, "refit as before issue 28, bitwise: plain EM (--accel none) from a random start, no prior, no validation split, no rule, the relative change alone")
}

// config returns the refit's Quality for mode, and the acceleration
// --plain implies (accel otherwise).
func (q *serveQuality) config(fs *flag.FlagSet, mode string, accel factor.Accel) (service.Quality, factor.Accel, error) {
	given := ""
	for _, name := range append(serveQualityFlags, "plain") {
		if flagGiven(fs, name) && given == "" {
			given = name
		}
	}
	switch {
	case mode != string(service.ModeRefit):
		if given != "" {
			return service.Quality{}, accel, usagef("--%s tunes a refit: it needs --mode refit (not %s)", given, mode)
		}
		return service.Quality{}, accel, nil
	case q.plain:
		for _, name := range append(serveQualityFlags, "accel") {
			if flagGiven(fs, name) {
				return service.Quality{}, accel, usagef("--plain sets --%s itself: give it alone", name)
			}
		}
		return service.Quality{}, factor.AccelNone, nil
	case !(q.validation > 0 && q.validation < 1):
		return service.Quality{}, accel, usagef("--validation %v: must be in (0, 1)", q.validation)
	}
	c := service.DefaultQuality()
	c.Validation, c.Patience, c.MinGain = q.validation, q.patience, q.minGain
	switch q.smooth {
	case "auto", "background":
		c.Smooth = service.Smooth(q.smooth)
	case "none":
		c.Smooth = service.SmoothNone
	default:
		return service.Quality{}, accel, usagef("--smooth %q: want auto, background or none", q.smooth)
	}
	switch q.stop {
	case "auto", "validation":
	case "tol":
		if flagGiven(fs, "patience") || flagGiven(fs, "min-gain") {
			return service.Quality{}, accel, usagef("--patience and --min-gain tune --stop validation, and --stop tol stops on the relative change alone: drop them")
		}
		c.Patience = 0
	default:
		return service.Quality{}, accel, usagef("--stop %q: want auto, validation or tol", q.stop)
	}
	if c.Patience < 1 && q.stop != "tol" {
		return service.Quality{}, accel, usagef("--patience %d: must be >= 1", q.patience)
	}
	if c.Smooth == service.SmoothNone && c.Patience == 0 {
		c.Validation = 0 // nothing to choose or to stop on: no split
	}
	return c, accel, nil
}

func (f *serveFlags) register(fs *flag.FlagSet) {
	d := service.DefaultConfig()
	c := &f.cfg
	f.serviceFlags.register(fs)
	f.logs.register(fs)
	fs.BoolVar(&f.embedded, "embedded", false, "start an embedded NATS server with JetStream (nothing to install); publish to it with --nats nats://LISTEN:PORT")
	fs.StringVar(&f.store, "store", "", "with --embedded: JetStream store directory (default: $XDG_STATE_HOME/emsf/nats or ~/.local/state/emsf/nats)")
	fs.StringVar(&f.listen, "listen", "127.0.0.1", "with --embedded: address to listen on")
	fs.IntVar(&f.port, "port", 4222, "with --embedded: port to listen on (-1: a random free port)")
	fs.StringVar(&f.mode, "mode", string(d.Mode), "retrain mode: refit (batch EM over all counts, warm-started), incremental (commit the new counts with --alpha) or online-em (online EM over the new counts, going on from the latest version's step t; --gamma-exp, --burn-in, --online-em-floor; integer counts only)")
	fs.IntVar(&c.Order, "order", d.Order, "m, the number of hidden states")
	fs.StringVar(&f.tie, "tie", d.Tie.String(), "tie mode: none, shared-k or shared-d")
	fs.Uint64Var(&c.Seed, "seed", d.Seed, "seed of the first version's start and of the refit's --validation split")
	fs.IntVar(&c.MaxIter, "iters", d.MaxIter, "refit: most EM passes (a version whose refit stops here records status \"iteration limit\" and is warned about)")
	fs.Float64Var(&c.Tol, "tol", d.Tol, "refit: stop when the relative change of the log-likelihood is at most this (0: never, run --iters); emsf fit's rule")
	fs.StringVar(&f.accel, "accel", "squarem", "refit: squarem (SQUAREM, as emsf fit) or none (plain EM)")
	f.quality.register(fs)
	fs.IntVar(&c.Workers, "workers", d.Workers, "refit in this process: goroutines")
	fs.IntVar(&c.ShardNNZ, "shard-nnz", d.ShardNNZ, "refit: nonzeros per shard")
	fs.StringVar(&f.useWorkers, "use-workers", string(d.UseWorkers), "refit on emsf workers of the NATS server: auto (when any answer), yes (wait for them) or no")
	fs.DurationVar(&c.WorkerTimeout, "worker-timeout", d.WorkerTimeout, "refit on workers: a task not answered within this goes to another worker")
	fs.Float64Var(&c.Verify, "verify", d.Verify, "refit on workers: the fraction of tasks computed again on another worker and compared bit for bit, besides each worker's last task of every iteration (a worker caught is quarantined; 0: check nothing)")
	fs.Float64Var(&c.Alpha, "alpha", d.Alpha, "incremental: learning rate of a commit, in (0, 1]")
	fs.IntVar(&c.EtaMax, "eta-max", d.EtaMax, "incremental: buffered nonzeros before their statistics are accumulated (0: all)")
	f.onlineEM.register(fs, "online-em", d.OnlineEM)
	fs.Int64Var(&c.Policy.Every, "every", d.Policy.Every, "retrain when this many transitions arrived since the latest version (0: off)")
	fs.DurationVar(&c.Policy.Interval, "interval", d.Policy.Interval, "retrain this often when transitions arrived since the latest version (0: off)")
	fs.IntVar(&c.States, "states", d.States, "fix the number of states: transitions beyond it are rejected (0: the model grows)")
	fs.IntVar(&c.Actions, "actions", d.Actions, "fix the number of actions: transitions beyond it are rejected (0: the model grows)")
	fs.Int64Var(&c.MaxModelBytes, "max-model-bytes", d.MaxModelBytes, "reject transitions that would grow the model (8·n·m·(D+K blocks) bytes) beyond this")
	fs.IntVar(&c.MaxStates, "max-states", d.MaxStates, "reject transitions with a state at or beyond this (0: the most states a one-action model within --max-model-bytes has)")
	fs.IntVar(&c.MaxActions, "max-actions", d.MaxActions, "reject transitions with an action at or beyond this (0: the most actions a one-state model within --max-model-bytes has)")
	fs.DurationVar(&c.CheckpointEvery, "checkpoint-every", d.CheckpointEvery, fmt.Sprintf("checkpoint the counts this often while transitions arrive (and at least %d times as long as the last checkpoint took)", service.CheckpointCost))
	fs.IntVar(&c.Replicas, "replicas", d.Replicas, "replicas of the stream and buckets when they are created (3 on a 3-node cluster)")
	fs.DurationVar(&c.StreamMaxAge, "stream-max-age", d.StreamMaxAge, "when the stream is created: drop transitions older than this (0: keep; a limit can drop transitions no checkpoint holds yet: --stream-purge bounds the stream safely)")
	fs.Int64Var(&c.StreamMaxBytes, "stream-max-bytes", d.StreamMaxBytes, "when the stream is created: its size limit in bytes (0: none; see --stream-max-age)")
	fs.StringVar(&f.purge, "stream-purge", string(d.StreamPurge), "checkpointed: purge the transitions a stored checkpoint holds from the stream (it keeps what no checkpoint holds yet); never: keep them")
	fs.Uint64Var(&c.StreamKeep, "stream-keep", d.StreamKeep, "with --stream-purge checkpointed: keep this many messages below the checkpoint's sequence in the stream")
	fs.IntVar(&f.keepVersions, "keep-versions", d.KeepVersions, "model versions the Object Store keeps, the latest and those before it (0: all)")
	fs.IntVar(&c.BufferRows, "buffer-rows", d.BufferRows, "rows the count table buffers before merging them (at least; it buffers a sixteenth of the distinct transitions when more); while a retrain reads the counts, ingestion waits once the buffer is full")
	fs.DurationVar(&c.StopTimeout, "stop-timeout", d.StopTimeout, "on SIGINT or SIGTERM: bound of the last checkpoint and purge (after the retrain in progress, if any, has seen the stop)")
	fs.StringVar(&f.metricsAddr, "metrics-addr", "", "serve Prometheus metrics on this address, e.g. 127.0.0.1:9464 (path /metrics)")
	fs.DurationVar(&c.IngestDelay, "ingest-delay", d.IngestDelay, "testing: wait this long before counting each message")
}

// config checks the flags and returns the service's Config (its Logger and
// Registry left to the caller).
func (f *serveFlags) config(fs *flag.FlagSet) (service.Config, error) {
	if err := f.serviceFlags.validate(); err != nil {
		return service.Config{}, err
	}
	switch {
	case f.embedded && flagGiven(fs, "nats"):
		return service.Config{}, usagef("--embedded starts its own server: it cannot be combined with --nats %s (drop one of them)", f.url)
	case !f.embedded && f.url == "":
		return service.Config{}, usagef("give --nats URL (or NATS_URL), or --embedded to start a server in this process")
	case !f.embedded && f.store != "":
		return service.Config{}, usagef("--store is the embedded server's store: it needs --embedded")
	case f.embedded && f.port != -1 && (f.port < 1 || f.port > 65535):
		return service.Config{}, usagef("--port %d: want 1..65535, or -1 for a random free port", f.port)
	case f.embedded && net.ParseIP(f.listen) == nil && f.listen != "localhost":
		return service.Config{}, usagef("--listen %q: want an IP address", f.listen)
	}
	if f.metricsAddr != "" {
		if _, _, err := net.SplitHostPort(f.metricsAddr); err != nil {
			return service.Config{}, usagef("--metrics-addr %q: want host:port", f.metricsAddr)
		}
	}
	tie, err := factor.ParseTie(f.tie)
	if err != nil {
		return service.Config{}, usagef("--tie %q: want none, shared-k or shared-d", f.tie)
	}
	accel, err := factor.ParseAccel(f.accel)
	if err != nil {
		return service.Config{}, usagef("--accel %q: want squarem or none", f.accel)
	}
	if err := f.onlineEM.validate(); err != nil {
		return service.Config{}, err
	}
	if f.mode == string(service.ModeOnlineEM) && f.onlineEM.floor == 0 {
		return service.Config{}, usagef("--online-em-floor 0: emsf serve needs a floor > 0 (a transition of probability 0 would fail every later retrain)")
	}
	c := f.cfg
	c.Name, c.Prefix, c.StateBucket, c.ModelBucket = f.name, f.prefix, f.stateBucket, f.modelBucket
	c.Mode, c.Tie, c.UseWorkers, c.StreamPurge = service.Mode(f.mode), tie, service.UseWorkers(f.useWorkers), service.Purge(f.purge)
	c.OnlineEM = f.onlineEM.options()
	if c.Quality, accel, err = f.quality.config(fs, f.mode, accel); err != nil {
		return service.Config{}, err
	}
	c.Accel, c.Version = accel, semver()
	c.KeepVersions = f.keepVersions
	if f.keepVersions == 0 {
		c.KeepVersions = -1 // all
	}
	// Config reads zero as "the default" where the flags mean zero.
	if c.Tol == 0 {
		c.Tol = service.TolNever // --tol 0: run --iters passes
	}
	if err := c.Validate(); err != nil {
		var ce *service.ConfigError
		if errors.As(err, &ce) {
			if name, ok := serveFieldFlags[ce.Field]; ok {
				return service.Config{}, usagef("--%s %s: %s", name, service.FormatValue(ce.Value), ce.Rule)
			}
		}
		return service.Config{}, usagef("%v", err)
	}
	return c, nil
}

// runServe is emsf serve.
func runServe(ctx context.Context, e *env, args []string) (err error) {
	fs := newFlagSet(e, "serve", "serve --name NAME (--nats URL | --embedded) [flags]")
	var f serveFlags
	f.register(fs)
	fs.Usage = func() {
		fmt.Fprintf(e.stdout, `Usage: emsf serve --name NAME (--nats URL | --embedded) [flags]

Owns model NAME: counts the transitions published to the JetStream stream subject
<prefix>.NAME.transitions (CSV or Arrow IPC payloads; 'emsf publish' sends a file),
retrains on a request to <prefix>.NAME.retrain ('emsf retrain --name NAME' or
'nats req emsf.NAME.retrain ""') or by --every / --interval, stores each version in
the Object Store, records it as latest in KV and announces it on <prefix>.NAME.model
('emsf model get NAME --out FILE' fetches one). Counts are checkpointed with the
stream sequence they include: a restart neither loses nor double-counts a
transition, and the stream keeps only what no checkpoint holds yet (--stream-purge).
SIGINT or SIGTERM stops it: requests waiting for a retrain are refused, the counts
are checkpointed, and it exits 0.
`)
		printFlags(e.stdout, fs)
	}
	if err := parse(fs, args); err != nil {
		return err
	}
	envURL := ""
	if f.embedded && !flagGiven(fs, "nats") {
		// NATS_URL is for the client commands: the embedded server is
		// this process's own.
		envURL, f.url = f.url, ""
	}
	cfg, err := f.config(fs)
	if err != nil {
		return err
	}
	log, err := f.logs.logger(e, "emsf")
	if err != nil {
		return err
	}
	cfg.Logger = log
	if envURL != "" {
		log.Info("NATS_URL ignored: --embedded starts its own server", "NATS_URL", envURL)
	}

	url := f.url
	if f.embedded {
		store := f.store
		if store == "" {
			if store, err = defaultStore(); err != nil {
				return err
			}
		}
		srv, err := natsexec.StartEmbedded(natsexec.EmbeddedConfig{StoreDir: store, Host: f.listen, Port: f.port})
		if err != nil {
			return err
		}
		defer func() {
			srv.Shutdown()
			srv.WaitForShutdown()
		}()
		url = srv.ClientURL()
		log.Info("embedded NATS server", "url", url, "store", store)
	}
	f.url = url
	nc, err := f.connect("emsf-serve-" + f.name)
	if err != nil {
		return err
	}
	defer nc.Close()
	defer func() { err = connErr(nc, err) }()

	if f.metricsAddr != "" {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		cfg.Registry = reg
		stop, err := serveMetrics(f.metricsAddr, reg, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	svc, err := service.New(ctx, nc, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "emsf serve: model %s on %s\n  publish:  emsf publish --nats %s --name %s --input FILE\n  retrain:  emsf retrain --nats %s --name %s   (or: nats req %s '')\n  fetch:    emsf model get %s --nats %s --out model.arrow\n",
		f.name, url, url, f.name, url, f.name, service.RetrainSubject(f.prefix, f.name), f.name, url)
	if err := svc.Run(ctx); err != nil {
		return err
	}
	// Replies and announcements still buffered go out before the
	// connection closes; a connection that is reconnecting has nothing to
	// flush that would arrive.
	if nc.IsConnected() {
		if err := nc.Drain(); err != nil {
			log.Warn("drain", "error", err)
		}
	}
	return nil
}

// flagGiven reports whether flag name was set on the command line.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// defaultStore is the embedded server's store when --store is not given:
// it must outlive the process (the counts and versions live there).
func defaultStore() (string, error) {
	base := os.Getenv("XDG_STATE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", usagef("no --store given and no home directory to default to: %v", err)
		}
		base = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(base, "emsf", "nats"), nil
}

// serveMetrics serves reg on addr/metrics until stop is called.
func serveMetrics(addr string, reg *prometheus.Registry, log hclog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("serve: --metrics-addr %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server", "error", err)
		}
	}()
	log.Info("metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
}

// runPublish is emsf publish.
func runPublish(ctx context.Context, e *env, args []string) (err error) {
	fs := newFlagSet(e, "publish", "publish --name NAME --input FILE [--nats URL] [flags]")
	var (
		sf           serviceFlags
		in           inputFlags
		maxRows      int
		dedup        bool
		create       bool
		allowRejects bool
	)
	sf.register(fs)
	in.register(fs)
	fs.BoolVar(&create, "create", false, "create the model's stream when no emsf serve answers for --name and the stream does not exist (without it that is an error: a mistyped name)")
	fs.BoolVar(&allowRejects, "allow-rejects", false, "send a file some of whose rows the served model rejects (outside its size or limits); without it such a file sends nothing and exits 1")
	fs.IntVar(&maxRows, "max-rows", 0, "most transitions per message (default: as many as the server's max payload holds)")
	fs.BoolVar(&dedup, "dedup", false, "give each message an id derived from the file's content, so that publishing the same file again within 2 minutes (e.g. a retry) stores nothing twice")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := sf.validate(); err != nil {
		return err
	}
	if err := in.validate(); err != nil {
		return err
	}
	if maxRows < 0 {
		return usagef("--max-rows %d: must be >= 0", maxRows)
	}
	if in.input == arrowio.StdinPath {
		// Publishing reads its input twice (every row is checked before
		// the first is sent): from a copy.
		path, remove, err := spoolStdin(os.Stdin)
		if err != nil {
			return err
		}
		defer remove()
		in.input = path
	}
	opts := service.PublishOptions{Prefix: sf.prefix, Name: sf.name, Read: in.readOptions(), MaxRows: maxRows, Create: create, AllowRejects: allowRejects,
		AutoIDs: in.ids == idsAuto}
	if in.ids == idsString {
		opts.Read.StateIDs, opts.Read.ActionIDs = &shard.Vocab{}, &shard.Vocab{}
	}
	if dedup {
		sum, err := fileDigest(in.input)
		if err != nil {
			return err
		}
		opts.MsgIDPrefix = sum[:32]
	}
	nc, err := sf.connect("emsf-publish")
	if err != nil {
		return err
	}
	defer nc.Close()
	defer func() { err = connErr(nc, err) }()
	res, err := service.PublishFile(ctx, nc, in.input, opts, service.StoreConfig{StateBucket: sf.stateBucket, ModelBucket: sf.modelBucket})
	if res.Messages > 0 || err == nil {
		fmt.Fprintf(e.stdout, "published %d transitions in %d messages (%d bytes) to %s, stream %s sequences %d..%d",
			res.Rows, res.Messages, res.Bytes, res.Subject, res.Stream, res.FirstSeq, res.LastSeq)
		if res.Duplicates > 0 {
			fmt.Fprintf(e.stdout, "; %d messages (%d transitions) were duplicates, not stored again", res.Duplicates, res.DuplicateRows)
		}
		fmt.Fprintf(e.stdout, "\nstream sequence reached: %d (emsf retrain --name %s includes it; --after-seq %d)\n", res.LastSeq, sf.name, res.LastSeq)
		if res.Outside > 0 {
			fmt.Fprintf(e.stderr, "emsf publish: warning: %d transitions were sent that emsf serve rejects (--allow-rejects; the rest is kept); first: %s\n",
				res.Outside, strings.Join(res.Reasons, "; "))
		}
		if !res.Served {
			fmt.Fprintf(e.stderr, "emsf publish: warning: no emsf serve answers for model %s now: the transitions wait in stream %s until one starts\n", sf.name, res.Stream)
		}
	}
	return err
}

// runRetrain is emsf retrain.
func runRetrain(ctx context.Context, e *env, args []string) (err error) {
	fs := newFlagSet(e, "retrain", "retrain --name NAME [--nats URL] [--after-seq N] [--wait D] [--timeout D]")
	var (
		sf       serviceFlags
		timeout  time.Duration
		wait     time.Duration
		afterSeq uint64
	)
	sf.register(fs)
	fs.DurationVar(&timeout, "timeout", 10*time.Minute, "how long to wait for the new version")
	fs.Uint64Var(&afterSeq, "after-seq", 0, "the version includes the stream up to this sequence ('emsf publish' prints the one it reached; 0: the stream's last sequence now)")
	fs.DurationVar(&wait, "wait", service.DefaultCatchUpWait, "how long the service waits for its ingestion to reach that sequence before it answers with an error")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := sf.validate(); err != nil {
		return err
	}
	if timeout <= 0 {
		return usagef("--timeout %v: must be > 0", timeout)
	}
	if wait < 0 {
		return usagef("--wait %v: must be >= 0", wait)
	}
	body, err := json.Marshal(service.RetrainRequest{AfterSeq: afterSeq, Wait: wait.String()})
	if err != nil {
		return err
	}
	nc, err := sf.connect("emsf-retrain")
	if err != nil {
		return err
	}
	defer nc.Close()
	defer func() { err = connErr(nc, err) }()
	return request(ctx, e, nc, service.RetrainSubject(sf.prefix, sf.name), sf.name, body, timeout)
}

// request sends an empty request to an emsf serve endpoint and prints the
// JSON reply; a micro error reply is an error.
func request(ctx context.Context, e *env, nc *nats.Conn, subject, name string, body []byte, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	m, err := nc.RequestWithContext(ctx, subject, body)
	if errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("no emsf serve answers for model %s on %s (is it running?)", name, subject)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: no answer within --timeout %v", subject, timeout)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", subject, err)
	}
	if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
		return fmt.Errorf("%s (code %s)", m.Header.Get("Nats-Service-Error"), code)
	}
	return printJSON(e, subject, m.Data)
}

// printJSON prints a JSON reply indented, its fields and numbers as they
// came (what emsf query prints too).
func printJSON(e *env, what string, data []byte) error {
	var out bytes.Buffer
	if err := json.Indent(&out, data, "", "  "); err != nil {
		return fmt.Errorf("%s: reply is not JSON: %w", what, err)
	}
	fmt.Fprintln(e.stdout, out.String())
	return nil
}

// runModel is emsf model get|list|status.
func runModel(ctx context.Context, e *env, args []string) (err error) {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(e.stdout, `Usage: emsf model <get|list|status> NAME [flags]
       emsf model <assemble|split> IN --out OUT [flags]
       emsf model export --model FILE --out DIR

  get NAME [--version V] --out FILE   fetch a version (default: the latest) of a served model
  list NAME                           list the stored versions
  status NAME                         ask the running emsf serve for its status
  export --model FILE --out DIR       write D, K, the reduced chains and the ids as .npy, .npz and CSV
  assemble DATASET --out FILE         write a model dataset (a directory or nats-obj://BUCKET/PREFIX) as one model file
  split FILE --out DATASET            write a model file as a dataset: parts and a manifest

Run 'emsf model get -h' (or assemble -h, split -h) for the flags.
`)
		if len(args) == 0 {
			return usagef("name a subcommand: get, list, status, export, assemble or split")
		}
		return flag.ErrHelp
	}
	sub, rest := args[0], args[1:]
	if sub == "export" {
		return runModelExport(ctx, e, rest)
	}
	if sub == "assemble" || sub == "split" {
		return runModelParts(ctx, e, sub, rest)
	}
	fs := newFlagSet(e, "model "+sub, sub+" NAME [flags]")
	var (
		sf      serviceFlags
		version int
		out     string
		timeout time.Duration
	)
	sf.register(fs)
	if sub == "get" {
		fs.IntVar(&version, "version", 0, "version to fetch (default: the latest)")
		fs.StringVar(&out, "out", "", "model file to write (Arrow IPC; required)")
	}
	fs.DurationVar(&timeout, "timeout", 30*time.Second, "how long to wait for the server")
	switch sub {
	case "get", "list", "status":
	default:
		return usagef("unknown subcommand %q: want get, list, status, assemble or split", sub)
	}
	// NAME may come anywhere among the flags.
	pos, err := parseArgs(fs, rest)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return usagef("unexpected argument %q (one NAME)", pos[1])
	}
	if len(pos) == 1 {
		fs.Set("name", pos[0])
	}
	if err := sf.validate(); err != nil {
		return err
	}
	if sub == "get" && out == "" {
		return usagef("--out is required")
	}
	if version < 0 {
		return usagef("--version %d: must be >= 1", version)
	}
	if timeout <= 0 {
		return usagef("--timeout %v: must be > 0", timeout)
	}
	nc, err := sf.connect("emsf-model")
	if err != nil {
		return err
	}
	defer nc.Close()
	defer func() { err = connErr(nc, err) }()
	if sub == "status" {
		return request(ctx, e, nc, service.StatusSubject(sf.prefix, sf.name), sf.name, nil, timeout)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	st, err := service.OpenStoresReadOnly(ctx, js, sf.stateBucket, sf.modelBucket)
	if err != nil {
		return err
	}
	if sub == "list" {
		vs, err := st.List(ctx, sf.name)
		if err != nil {
			return err
		}
		if len(vs) == 0 {
			if err := missingModel(ctx, nc, st, sf.prefix, sf.name, sf.modelBucket); err != nil {
				return err
			}
			return fmt.Errorf("model %s has no versions in bucket %s", sf.name, sf.modelBucket)
		}
		fmt.Fprintf(e.stdout, "%-8s %-20s %-12s %8s %8s %14s %12s %10s %s\n", "version", "created", "mode", "n", "u", "loglik", "transitions", "seq", "object")
		for _, v := range vs {
			fmt.Fprintf(e.stdout, "%-8d %-20s %-12s %8d %8d %14.6g %12d %10d %s\n", v.Version, v.Created.UTC().Format(time.DateTime),
				v.Mode, v.N, v.U, v.LogLik, v.Transitions, v.StreamSeq, v.Object)
		}
		return nil
	}
	f, err := st.Get(ctx, sf.name, version)
	if err != nil {
		if merr := missingModel(ctx, nc, st, sf.prefix, sf.name, sf.modelBucket); merr != nil {
			return merr
		}
		return err
	}
	data, v := f.Data, f.Info
	if err := arrowio.WriteFileAtomic(out, data); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "wrote %s: model %s version %d (%d bytes, n=%d m=%d u=%d, loglik %s, %d transitions up to stream sequence %d)\n",
		out, sf.name, v.Version, len(data), v.N, v.M, v.U, strconv.FormatFloat(v.LogLik, 'g', 8, 64), v.Transitions, v.StreamSeq)
	return nil
}

// fileDigest is the SHA-256 (hex) of a file's content.
func fileDigest(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("--input: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("--input %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
