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
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
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
func (f *serviceFlags) connect(client string) (*nats.Conn, error) {
	cc := f.conn(client)
	if cc.URL == "" {
		cc.URL = nats.DefaultURL
	}
	return cc.Connect()
}

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

// runServe is emsf serve.
func runServe(ctx context.Context, e *env, args []string) (err error) {
	fs := newFlagSet(e, "serve", "serve --name NAME (--nats URL | --embedded) [flags]")
	var (
		sf                       serviceFlags
		lf                       logFlags
		embedded                 bool
		store, listen            string
		port                     int
		mode, tie, useWorkers    string
		cfg                      service.Config
		seed                     uint64
		metricsAddr              string
		every                    int64
		replicas                 int
		streamMaxBytes           int64
		streamMaxAge, checkpoint time.Duration
		onlineEM                 onlineEMParams
	)
	sf.register(fs)
	lf.register(fs)
	fs.BoolVar(&embedded, "embedded", false, "start an embedded NATS server with JetStream (nothing to install); publish to it with --nats nats://LISTEN:PORT")
	fs.StringVar(&store, "store", "", "with --embedded: JetStream store directory (default: $XDG_STATE_HOME/emsf/nats or ~/.local/state/emsf/nats)")
	fs.StringVar(&listen, "listen", "127.0.0.1", "with --embedded: address to listen on")
	fs.IntVar(&port, "port", 4222, "with --embedded: port to listen on (-1: a random free port)")
	fs.StringVar(&mode, "mode", "refit", "retrain mode: refit (batch EM over all counts, warm-started), incremental (commit the new counts with --alpha) or online-em (online EM over the new counts, going on from the latest version's step t; --gamma-exp, --burn-in, --online-em-floor; integer counts only)")
	fs.IntVar(&cfg.Order, "order", 10, "m, the number of hidden states")
	fs.StringVar(&tie, "tie", "none", "tie mode: none, shared-k or shared-d")
	fs.Uint64Var(&seed, "seed", 1, "seed of the first version's random init")
	fs.IntVar(&cfg.MaxIter, "iters", 100, "refit: most EM iterations")
	fs.Float64Var(&cfg.Tol, "tol", 1e-6, "refit: stop when the log-likelihood per transition improves less than this (0: never, run --iters)")
	fs.IntVar(&cfg.Workers, "workers", runtime.GOMAXPROCS(0), "refit in this process: goroutines")
	fs.IntVar(&cfg.ShardNNZ, "shard-nnz", shard.DefaultTargetNNZ, "refit: nonzeros per shard")
	fs.StringVar(&useWorkers, "use-workers", "auto", "refit on emsf workers of the NATS server: auto (when any answer), yes (wait for them) or no")
	fs.DurationVar(&cfg.WorkerTimeout, "worker-timeout", 30*time.Second, "refit on workers: a task not answered within this goes to another worker")
	fs.Float64Var(&cfg.Alpha, "alpha", 0.5, "incremental: learning rate of a commit, in (0, 1]")
	fs.IntVar(&cfg.EtaMax, "eta-max", 0, "incremental: buffered nonzeros before their statistics are accumulated (0: all)")
	onlineEM.register(fs, "online-em")
	fs.Int64Var(&every, "every", 0, "retrain when this many transitions arrived since the latest version (0: off)")
	fs.DurationVar(&cfg.Interval, "interval", 0, "retrain this often when transitions arrived since the latest version (0: off)")
	fs.IntVar(&cfg.States, "states", 0, "fix the number of states: transitions beyond it are rejected (0: the model grows)")
	fs.IntVar(&cfg.Actions, "actions", 0, "fix the number of actions: transitions beyond it are rejected (0: the model grows)")
	fs.Int64Var(&cfg.MaxModelBytes, "max-model-bytes", service.DefaultMaxModelBytes, "reject transitions that would grow the model (8·n·m·(D+K blocks) bytes) beyond this")
	fs.IntVar(&cfg.MaxStates, "max-states", 0, "reject transitions with a state at or beyond this (0: the most states a one-action model within --max-model-bytes has)")
	fs.IntVar(&cfg.MaxActions, "max-actions", 0, "reject transitions with an action at or beyond this (0: the most actions a one-state model within --max-model-bytes has)")
	fs.DurationVar(&checkpoint, "checkpoint-every", 2*time.Second, "checkpoint the counts this often while transitions arrive")
	fs.IntVar(&replicas, "replicas", 1, "replicas of the stream and buckets when they are created (3 on a 3-node cluster)")
	fs.DurationVar(&streamMaxAge, "stream-max-age", 0, "when the stream is created: drop transitions older than this (0: keep)")
	fs.Int64Var(&streamMaxBytes, "stream-max-bytes", 0, "when the stream is created: its size limit in bytes (0: none)")
	fs.StringVar(&metricsAddr, "metrics-addr", "", "serve Prometheus metrics on this address, e.g. 127.0.0.1:9464 (path /metrics)")
	fs.DurationVar(&cfg.IngestDelay, "ingest-delay", 0, "testing: wait this long before counting each message")
	fs.Usage = func() {
		fmt.Fprintf(e.stdout, `Usage: emsf serve --name NAME (--nats URL | --embedded) [flags]

Owns model NAME: counts the transitions published to the JetStream stream subject
<prefix>.NAME.transitions (CSV or Arrow IPC payloads; 'emsf publish' sends a file),
retrains on a request to <prefix>.NAME.retrain ('emsf retrain --name NAME' or
'nats req emsf.NAME.retrain ""') or by --every / --interval, stores each version in
the Object Store, records it as latest in KV and announces it on <prefix>.NAME.model
('emsf model get NAME --out FILE' fetches one). Counts are checkpointed with the
stream sequence they include: a restart neither loses nor double-counts a
transition. SIGINT or SIGTERM checkpoints and exits.
`)
		printFlags(e.stdout, fs)
	}
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := sf.validate(); err != nil {
		return err
	}
	cfg.Name, cfg.Prefix, cfg.StateBucket, cfg.ModelBucket = sf.name, sf.prefix, sf.stateBucket, sf.modelBucket
	natsGiven := false
	fs.Visit(func(f *flag.Flag) { natsGiven = natsGiven || f.Name == "nats" })
	envURL := ""
	if embedded && !natsGiven {
		// NATS_URL is for the client commands: the embedded server is
		// this process's own.
		envURL, sf.url = sf.url, ""
	}
	switch {
	case embedded && natsGiven:
		return usagef("--embedded starts its own server: it cannot be combined with --nats %s (drop one of them)", sf.url)
	case !embedded && sf.url == "":
		return usagef("give --nats URL (or NATS_URL), or --embedded to start a server in this process")
	case !embedded && (store != ""):
		return usagef("--store is the embedded server's store: it needs --embedded")
	case mode != string(service.ModeRefit) && mode != string(service.ModeIncremental) && mode != string(service.ModeOnlineEM):
		return usagef("--mode %q: want refit, incremental or online-em", mode)
	case useWorkers != "auto" && useWorkers != "yes" && useWorkers != "no":
		return usagef("--use-workers %q: want auto, yes or no", useWorkers)
	case cfg.Order < 1:
		return usagef("--order %d: must be >= 1", cfg.Order)
	case cfg.MaxIter < 1:
		return usagef("--iters %d: must be >= 1", cfg.MaxIter)
	case !(cfg.Tol >= 0):
		return usagef("--tol %v: must be >= 0", cfg.Tol)
	case cfg.Workers < 1:
		return usagef("--workers %d: must be >= 1", cfg.Workers)
	case cfg.ShardNNZ < 1:
		return usagef("--shard-nnz %d: must be >= 1", cfg.ShardNNZ)
	case !(cfg.Alpha > 0 && cfg.Alpha <= 1):
		return usagef("--alpha %v: must be in (0, 1]", cfg.Alpha)
	case cfg.EtaMax < 0:
		return usagef("--eta-max %d: must be >= 0", cfg.EtaMax)
	case every < 0:
		return usagef("--every %d: must be >= 0", every)
	case cfg.Interval < 0:
		return usagef("--interval %v: must be >= 0", cfg.Interval)
	case cfg.States < 0:
		return usagef("--states %d: must be >= 0", cfg.States)
	case cfg.Actions < 0:
		return usagef("--actions %d: must be >= 0", cfg.Actions)
	case cfg.MaxModelBytes < 1:
		return usagef("--max-model-bytes %d: must be >= 1", cfg.MaxModelBytes)
	case cfg.MaxStates < 0 || cfg.MaxStates >= math.MaxInt32:
		return usagef("--max-states %d: must be in [0, %d)", cfg.MaxStates, math.MaxInt32)
	case cfg.MaxActions < 0 || cfg.MaxActions >= math.MaxInt32:
		return usagef("--max-actions %d: must be in [0, %d)", cfg.MaxActions, math.MaxInt32)
	case checkpoint <= 0:
		return usagef("--checkpoint-every %v: must be > 0", checkpoint)
	case replicas < 1 || replicas > 5:
		return usagef("--replicas %d: must be in [1, 5]", replicas)
	case streamMaxAge < 0:
		return usagef("--stream-max-age %v: must be >= 0", streamMaxAge)
	case streamMaxBytes < 0:
		return usagef("--stream-max-bytes %d: must be >= 0", streamMaxBytes)
	case cfg.WorkerTimeout <= 0:
		return usagef("--worker-timeout %v: must be > 0", cfg.WorkerTimeout)
	case cfg.IngestDelay < 0:
		return usagef("--ingest-delay %v: must be >= 0", cfg.IngestDelay)
	}
	if cfg.Tol == 0 {
		// service.Config reads a zero Tol as "the default"; --tol 0 means
		// never stop on the tolerance. The smallest positive tolerance
		// stops a refit only when its log-likelihood no longer changes at
		// all, which is the same thing.
		cfg.Tol = math.SmallestNonzeroFloat64
	}
	if embedded {
		if port != -1 && (port < 1 || port > 65535) {
			return usagef("--port %d: want 1..65535, or -1 for a random free port", port)
		}
		if net.ParseIP(listen) == nil && listen != "localhost" {
			return usagef("--listen %q: want an IP address", listen)
		}
	}
	if metricsAddr != "" {
		if _, _, err := net.SplitHostPort(metricsAddr); err != nil {
			return usagef("--metrics-addr %q: want host:port", metricsAddr)
		}
	}
	t, err := factor.ParseTie(tie)
	if err != nil {
		return usagef("--tie %q: want none, shared-k or shared-d", tie)
	}
	if err := onlineEM.validate(); err != nil {
		return err
	}
	if mode == string(service.ModeOnlineEM) && onlineEM.floor == 0 {
		return usagef("--online-em-floor 0: emsf serve needs a floor > 0 (a transition of probability 0 would fail every later retrain)")
	}
	cfg.OnlineEM = onlineEM.options()
	cfg.Tie, cfg.Seed, cfg.Every, cfg.Mode, cfg.UseWorkers = t, seed, every, service.Mode(mode), service.UseWorkers(useWorkers)
	cfg.CheckpointEvery, cfg.Replicas, cfg.StreamMaxAge, cfg.StreamMaxBytes = checkpoint, replicas, streamMaxAge, streamMaxBytes
	log, err := lf.logger(e, "emsf")
	if err != nil {
		return err
	}
	cfg.Logger = log
	if envURL != "" {
		log.Info("NATS_URL ignored: --embedded starts its own server", "NATS_URL", envURL)
	}

	url := sf.url
	if embedded {
		if store == "" {
			if store, err = defaultStore(); err != nil {
				return err
			}
		}
		srv, err := natsexec.StartEmbedded(natsexec.EmbeddedConfig{StoreDir: store, Host: listen, Port: port})
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
	sf.url = url
	nc, err := sf.connect("emsf-serve-" + sf.name)
	if err != nil {
		return err
	}
	defer nc.Close()
	defer func() { err = connErr(nc, err) }()

	if metricsAddr != "" {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		cfg.Registry = reg
		stop, err := serveMetrics(metricsAddr, reg, log)
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
		sf.name, url, url, sf.name, url, sf.name, service.RetrainSubject(sf.prefix, sf.name), sf.name, url)
	if err := svc.Run(ctx); err != nil {
		return err
	}
	if err := nc.Drain(); err != nil {
		log.Warn("drain", "error", err)
	}
	return nil
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
       emsf model export --model FILE --out DIR

  get NAME [--version V] --out FILE   fetch a version (default: the latest) of a served model
  list NAME                           list the stored versions
  status NAME                         ask the running emsf serve for its status
  export --model FILE --out DIR       write D, K, the reduced chains and the ids as .npy, .npz and CSV

Run 'emsf model get -h' for the flags.
`)
		if len(args) == 0 {
			return usagef("name a subcommand: get, list or status")
		}
		return flag.ErrHelp
	}
	sub, rest := args[0], args[1:]
	if sub == "export" {
		return runModelExport(ctx, e, rest)
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
		return usagef("unknown subcommand %q: want get, list or status", sub)
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
