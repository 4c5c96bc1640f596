package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go"

	"github.com/emsf/emsf/worker"
	"github.com/emsf/emsf/worker/wire"
)

// runWorker is emsf worker: a NATS micro service computing shard
// statistics until SIGINT/SIGTERM (ctx), after which it stops (cancelling
// the task it runs: the coordinator hands it out again), drains and exits 0.
func runWorker(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(stderr) // errors
	var (
		nf        natsFlags
		name      string
		level     string
		jsonLog   bool
		maxShards int
		jobs      string
		delay     time.Duration
		delayFrom int
		wrongFrom int
		memDir    string
		holdSeg   int
		holdFed   int
	)
	nf.register(fs)
	fs.StringVar(&name, "name", "emsf-worker", "client name shown by the NATS server")
	fs.StringVar(&level, "log-level", "info", "log level: trace, debug, info, warn, error")
	fs.BoolVar(&jsonLog, "log-json", false, "log as JSON lines")
	fs.IntVar(&maxShards, "max-cached-shards", 0, "shards kept in memory across iterations (0: all)")
	fs.StringVar(&jobs, "bucket-jobs", wire.DefaultKVBucket, "JetStream KV bucket of the job records (the coordinators' --bucket-jobs): an owners epoch is taken up, and a job ended, only when its record there says so")
	fs.DurationVar(&delay, "task-delay", 0, "testing: wait this long before computing each task")
	fs.IntVar(&delayFrom, "task-delay-from", 0, "testing: apply --task-delay to the tasks of this iteration and later only (0: all)")
	fs.IntVar(&wrongFrom, "task-wrong-from", 0, "testing: compute owners tasks wrong from this iteration on (a faulty machine, for the tests of --verify; 0: never)")
	fs.IntVar(&holdSeg, "ingest-hold-segment", 0, "testing: hold the ingest's mapper after it put this many segments in its outbox (printing so), until the worker is killed (0: never)")
	fs.IntVar(&holdFed, "ingest-hold-fed", 0, "testing: hold the ingest's reducer after it counted this many splits (printing so), until the worker is killed (0: never)")
	fs.StringVar(&memDir, "memprofile-dir", os.Getenv(memProfileEnv), "debugging: write mem.tsv (resident set and Go heap at each owners operation and each new peak) and heap profiles at the peaks into this directory (default $"+memProfileEnv+")")
	fs.Usage = func() {
		fs.SetOutput(stdout) // help
		fmt.Fprintf(fs.Output(), "Usage: emsf worker --nats URL [flags]\n\n"+
			"Runs a cluster worker: a NATS micro service (%q, see 'nats micro ls') that computes the\n"+
			"statistics of shards for 'emsf fit --nats URL'. Start as many as you like, anywhere;\n"+
			"SIGINT or SIGTERM cancels the task at hand (the coordinator hands it to another worker) and exits.\n"+
			"Memory: GOGC is %d unless the environment sets it; under a cgroup memory limit GOMEMLIMIT is %.0f%% of it\n"+
			"unless the environment sets it.\n", wire.ServiceName, workerGCPercent, 100*workerMemoryLimitFraction)
		printFlags(fs.Output(), fs)
		fs.SetOutput(stderr)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "emsf worker: "+format+"\n", a...)
		return code
	}
	if fs.NArg() > 0 {
		return fail(2, "unexpected argument %q", fs.Arg(0))
	}
	if nf.url == "" {
		return fail(2, "--nats is required (or set NATS_URL)")
	}
	if err := nf.validate(); err != nil {
		return fail(2, "%v", err)
	}
	lvl := hclog.LevelFromString(level)
	if lvl == hclog.NoLevel {
		return fail(2, "--log-level %q: want trace, debug, info, warn or error", level)
	}
	if wire.CheckBucket(jobs) != nil {
		return fail(2, "--bucket-jobs %q: want letters, digits, '-' and '_'", jobs)
	}
	if maxShards < 0 {
		return fail(2, "--max-cached-shards %d: must be >= 0", maxShards)
	}
	if delay < 0 {
		return fail(2, "--task-delay %v: must be >= 0", delay)
	}
	if delayFrom < 0 {
		return fail(2, "--task-delay-from %d: must be >= 0", delayFrom)
	}
	if wrongFrom < 0 {
		return fail(2, "--task-wrong-from %d: must be >= 0", wrongFrom)
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "emsf", Level: lvl, Output: stderr, JSONFormat: jsonLog, Color: hclog.ColorOff})
	setWorkerMemory(log)

	closed, connected := make(chan struct{}), make(chan struct{})
	var once sync.Once
	nc, err := nf.conn(name).Connect(
		nats.RetryOnFailedConnect(true),
		nats.ClosedHandler(func(*nats.Conn) { close(closed) }),
		nats.ConnectHandler(func(*nats.Conn) { once.Do(func() { close(connected) }) }),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("disconnected", "error", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("reconnected", "url", c.ConnectedUrlRedacted()) }),
	)
	if err != nil {
		return fail(1, "%v", err)
	}
	// Ready only once connected: a server that refuses the credentials
	// closes the connection, and that is the error.
	if !nc.IsConnected() {
		log.Info("waiting for the NATS server", "url", nf.url)
		select {
		case <-connected:
		case <-closed:
			return fail(1, "connection to NATS closed: %v", worker.AuthHint(nc.LastError()))
		case <-ctx.Done():
			nc.Close()
			return 0
		}
	}
	if holdSeg < 0 || holdFed < 0 {
		nc.Close()
		return fail(2, "--ingest-hold-segment and --ingest-hold-fed must be >= 0")
	}
	mw, err := startMemWatch(memDir, memWatchInterval)
	if err != nil {
		nc.Close()
		return fail(2, "%v", err)
	}
	defer mw.Close()
	mem, _ := machineMemory()
	cfg := worker.Config{Prefix: nf.prefix, JobsBucket: jobs, Logger: log, MaxCachedShards: maxShards, Delay: delay, DelayFrom: delayFrom, WrongFrom: wrongFrom, Memory: mem,
		IngestHooks: ingestHolds(ctx, stdout, holdSeg, holdFed)}
	if mw != nil {
		cfg.OnOwnersOp = func(op string, iter int) { mw.Phase(op + "-" + strconv.Itoa(iter)) }
	}
	w, err := worker.Start(ctx, nc, cfg)
	if err != nil {
		nc.Close()
		return fail(1, "%v", err)
	}
	fmt.Fprintf(stdout, "worker %s ready on %s\n", w.ID(), wire.TaskSubject(nf.prefix))
	select {
	case <-ctx.Done():
	case <-closed:
		if err := nc.LastError(); err != nil {
			return fail(1, "connection to NATS closed: %v", worker.AuthHint(err))
		}
		return fail(1, "connection to NATS closed")
	}
	log.Info("draining")
	if err := w.Stop(); err != nil {
		log.Warn("stop", "error", err)
	}
	if err := nc.Drain(); err != nil {
		nc.Close()
		return 0
	}
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		nc.Close()
	}
	return 0
}

// ingestHolds returns the hooks of --ingest-hold-segment and
// --ingest-hold-fed: after the seg-th segment put in the outbox (the
// fed-th split counted), print "ingest: holding …" and block until ctx
// ends, so that a test kills the worker at that exact point.
func ingestHolds(ctx context.Context, stdout io.Writer, seg, fed int) worker.IngestHooks {
	var mu sync.Mutex
	segs, splits := 0, 0
	hold := func(what string) {
		fmt.Fprintf(stdout, "ingest: holding after %s\n", what)
		<-ctx.Done()
	}
	var h worker.IngestHooks
	if seg > 0 {
		h.Segment = func(split, reducer, seq int) {
			mu.Lock()
			segs++
			n := segs
			mu.Unlock()
			if n == seg {
				hold(fmt.Sprintf("segment %d (split %d, reducer %d, seq %d)", n, split, reducer, seq))
			}
		}
	}
	if fed > 0 {
		h.Fed = func(split int) {
			mu.Lock()
			splits++
			n := splits
			mu.Unlock()
			if n == fed {
				hold(fmt.Sprintf("counting split %d", split))
			}
		}
	}
	return h
}
