package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/emsf/emsf/coordinator"
	"github.com/emsf/emsf/coordinator/natsexec"
	"github.com/emsf/emsf/coordinator/owners"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
	"github.com/emsf/emsf/worker"
	"github.com/emsf/emsf/worker/wire"
)

// natsFlags are the connection flags shared by every command that talks to
// NATS (fit in cluster mode, worker, serve, publish, retrain, model).
// Secrets come from --password-file/--token-file or NATS_PASSWORD/
// NATS_TOKEN; --password and --token work too but are visible in ps.
type natsFlags struct {
	url                    string
	creds, nkey            string
	user, password, token  string
	passwordFile           string
	tokenFile              string
	tlsCA, tlsCert, tlsKey string
	prefix                 string
}

func (n *natsFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&n.url, "nats", os.Getenv("NATS_URL"), "NATS server URL(s), comma-separated (default $NATS_URL)")
	fs.StringVar(&n.creds, "creds", "", "NATS user credentials file (JWT)")
	fs.StringVar(&n.nkey, "nkey", "", "NATS NKey seed file")
	fs.StringVar(&n.user, "user", os.Getenv("NATS_USER"), "NATS user name (default $NATS_USER)")
	fs.StringVar(&n.password, "password", "", "NATS password (visible in ps: prefer --password-file or $NATS_PASSWORD)")
	fs.StringVar(&n.passwordFile, "password-file", "", "file holding the NATS password (default: $NATS_PASSWORD)")
	fs.StringVar(&n.token, "token", "", "NATS authentication token (visible in ps: prefer --token-file or $NATS_TOKEN)")
	fs.StringVar(&n.tokenFile, "token-file", "", "file holding the NATS authentication token (default: $NATS_TOKEN)")
	fs.StringVar(&n.tlsCA, "tls-ca", "", "CA certificates file to verify the NATS server with")
	fs.StringVar(&n.tlsCert, "tls-cert", "", "TLS client certificate file")
	fs.StringVar(&n.tlsKey, "tls-key", "", "TLS client key file")
	fs.StringVar(&n.prefix, "subject-prefix", wire.DefaultPrefix, "prefix of every NATS subject emsf uses")
}

// validate checks the flags and resolves the password and token: the flag,
// else the file, else the environment.
func (n *natsFlags) validate() error {
	if (n.tlsCert == "") != (n.tlsKey == "") {
		return usagef("--tls-cert and --tls-key must be given together")
	}
	var err error
	if n.password, err = secret(n.password, "--password", n.passwordFile, "--password-file", "NATS_PASSWORD"); err != nil {
		return err
	}
	if n.token, err = secret(n.token, "--token", n.tokenFile, "--token-file", "NATS_TOKEN"); err != nil {
		return err
	}
	if n.password != "" && n.user == "" {
		return usagef("a NATS password (--password, --password-file or NATS_PASSWORD) needs --user (or NATS_USER)")
	}
	if err := wire.CheckPrefix(n.prefix); err != nil {
		return usagef("--subject-prefix %q: want dot-separated tokens of letters, digits, '-' and '_'", n.prefix)
	}
	return nil
}

// secret returns the value of a secret flag, else the content of its file
// flag (trailing newline removed), else the environment variable.
func secret(value, flagName, file, fileFlag, envName string) (string, error) {
	switch {
	case value != "" && file != "":
		return "", usagef("give %s or %s, not both", flagName, fileFlag)
	case value != "":
		return value, nil
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", usagef("%s: %v", fileFlag, err)
		}
		v := strings.TrimRight(string(b), "\r\n")
		if v == "" {
			return "", usagef("%s %s is empty", fileFlag, file)
		}
		return v, nil
	}
	return os.Getenv(envName), nil
}

func (n *natsFlags) conn(name string) *worker.ConnConfig {
	return &worker.ConnConfig{URL: n.url, Name: name, Creds: n.creds, NKey: n.nkey, User: n.user, Password: n.password,
		Token: n.token, TLSCA: n.tlsCA, TLSCert: n.tlsCert, TLSKey: n.tlsKey}
}

// clusterFlags are the flags of emsf fit that turn on cluster mode.
type clusterFlags struct {
	natsFlags
	embedded      bool
	store         string
	minWorkers    int
	waitWorkers   time.Duration
	workerTimeout time.Duration
	probeEvery    time.Duration
	frozenAfter   time.Duration
	slowLink      float64
	objectBucket  string
	kvBucket      string
	replicas      int
	job           string
	resume        bool
	// The owners exchange (natsexec.FitOwners).
	exchange        string
	colBlocks       int
	checkpointEvery int
	speculation     bool
	// verify is the fraction of tasks of the coordinator exchange checked
	// on another worker (coordinator.Options.Verify).
	verify     float64
	verifyLast bool
	// params are the fit's parameters (fitFlags.params), recorded in the
	// job state and compared by --resume.
	params map[string]string
	// accelExplicit and stopExplicit: --accel squarem and --stop
	// validation were asked for (not chosen by auto).
	accelExplicit, stopExplicit, priorExplicit bool
	// plainDefault: the fit is plain because the exchange is not the
	// coordinator's and no flag of how it estimates was given
	// (fitFlags.clusterPlainDefault).
	plainDefault bool
	// report, when set, is the fit's progress: it rate-limits the line
	// logged per cluster iteration (iterationLine).
	report *progress
}

// iterationLine logs the report of one cluster iteration: through the
// fit's progress when there is one (at most one line per --log-every,
// none under the live status line, every one at debug level), else at
// info level.
func (c *clusterFlags) iterationLine(log hclog.Logger, fields ...any) {
	if c.report != nil {
		c.report.detail(log, "cluster iteration", fields)
		return
	}
	log.Info("cluster iteration", fields...)
}

func (c *clusterFlags) register(fs *flag.FlagSet) {
	c.natsFlags.register(fs)
	fs.BoolVar(&c.embedded, "embedded", false, "cluster mode on this machine: start an embedded NATS server (127.0.0.1, random port) and --workers in-process workers")
	fs.StringVar(&c.store, "store", "", "with --embedded: JetStream store directory (default: a temporary directory, removed at exit)")
	fs.IntVar(&c.minWorkers, "min-workers", 1, "cluster mode: wait for this many workers before the first iteration")
	fs.DurationVar(&c.waitWorkers, "wait-workers", 30*time.Second, "cluster mode: how long to wait for --min-workers (and, with --exchange owners, for any worker after all were lost)")
	fs.DurationVar(&c.waitWorkers, "worker-wait", 30*time.Second, "the same as --wait-workers")
	fs.DurationVar(&c.workerTimeout, "worker-timeout", 30*time.Second, "cluster mode: a task not answered within this is handed to another worker")
	fs.DurationVar(&c.probeEvery, "worker-probe", time.Second, "cluster mode: how often the worker holding a task is pinged; one that no longer answers loses the task at once")
	fs.DurationVar(&c.frozenAfter, "worker-frozen", 15*time.Second, "cluster mode: a worker holding a task that leaves its pings unanswered this long counts as frozen (a stopped process): its task is recomputed elsewhere")
	c.registerSlowLink(fs)
	fs.StringVar(&c.objectBucket, "bucket-objects", wire.DefaultObjectBucket, "cluster mode: JetStream Object Store bucket for shards, models and job manifests")
	fs.StringVar(&c.kvBucket, "bucket-jobs", wire.DefaultKVBucket, "cluster mode: JetStream KV bucket for job state")
	fs.IntVar(&c.replicas, "replicas", 1, "cluster mode: replicas of the buckets when they are created (3 on a 3-node cluster)")
	fs.StringVar(&c.job, "job", "", "cluster mode: job name (KV key and object names; default: derived from data and parameters)")
	fs.StringVar(&c.exchange, "exchange", "auto", "cluster mode: how statistics travel: owners (each column block of K and row group of D owned by a worker and folded there, the coordinator moves only m-vectors and scalars: scales past one machine; EMSF only), coordinator (every K block and K̂ through the coordinator; also runs --algorithm mu-*), or auto: owners, and coordinator for --algorithm mu-*")
	fs.IntVar(&c.colBlocks, "col-blocks", 0, "with --exchange owners: column blocks per K block (0: one per 4 MiB of K, at most 1024)")
	fs.BoolVar(&c.speculation, "speculation", true, "with --exchange owners: idle workers take a straggler's queued shards and back up its running task (first answer wins; the model is the same); false for measuring the protocol's own bytes")
	fs.Float64Var(&c.verify, "verify", 0.02, "cluster mode: the fraction of tasks computed again on another worker and compared bit for bit. --exchange coordinator: a worker whose partial differs from the coordinator's own is quarantined and the iteration's pass runs again; --exchange owners: on a mismatch a third worker computes the task, the one the other two disagree with is quarantined, and its work since its last verified answer is redone from a checkpoint (0: check nothing)")
	fs.BoolVar(&c.verifyLast, "verify-last", false, "with --exchange coordinator: also check each worker's last task of every iteration before its commit, so that a worker caught never leaves an unchecked partial in an earlier iteration (costs 30-40 % of the wall time: scripts/verify_cost.sh)")
	fs.IntVar(&c.checkpointEvery, "checkpoint-every", 10, "with --exchange owners: iterations between checkpoints of the owners' blocks (a lost worker costs a replay of at most this many)")
	fs.BoolVar(&c.resume, "resume", false, "cluster mode: continue the job from its last committed iteration in the KV bucket (a fit with SQUAREM or the held-out rule, --exchange coordinator: from its last resume point), bitwise; refuses, naming what differs, when the data or parameters are not the job's")
}

// registerSlowLink registers --slow-link (fit and data ingest).
func (c *clusterFlags) registerSlowLink(fs *flag.FlagSet) {
	fs.Float64Var(&c.slowLink, "slow-link", owners.DefaultSlowLink, "cluster mode: a worker whose link echoes a 256 KiB probe more than this many times slower than the median worker's (and 50 ms slower) reads no data and is placed no work while it stays slow; 0: place every worker")
}

func (c *clusterFlags) validateSlowLink() error {
	if !(c.slowLink == 0 || c.slowLink >= 1) || math.IsInf(c.slowLink, 0) {
		return usagef("--slow-link %v: want 0 (off) or a factor >= 1", c.slowLink)
	}
	return nil
}

// slowLinkFactor is natsexec.Config.SlowLink for --slow-link (0: off).
func (c *clusterFlags) slowLinkFactor() float64 {
	if c.slowLink == 0 {
		return -1
	}
	return c.slowLink
}

// enabled reports whether cluster mode was asked for.
func (c *clusterFlags) enabled() bool { return c.url != "" || c.embedded }

func (c *clusterFlags) validate() error {
	if !c.enabled() {
		return nil
	}
	if c.embedded && c.url != "" {
		return usagef("--embedded starts its own server: it cannot be combined with --nats %s (or NATS_URL)", c.url)
	}
	if c.store != "" && !c.embedded {
		return usagef("--store is the embedded server's store: it needs --embedded")
	}
	if c.minWorkers < 0 {
		return usagef("--min-workers %d: must be >= 0", c.minWorkers)
	}
	if c.waitWorkers <= 0 {
		return usagef("--wait-workers %v: must be > 0", c.waitWorkers)
	}
	if c.workerTimeout <= 0 {
		return usagef("--worker-timeout %v: must be > 0", c.workerTimeout)
	}
	if c.probeEvery <= 0 {
		return usagef("--worker-probe %v: must be > 0", c.probeEvery)
	}
	if c.frozenAfter <= 0 {
		return usagef("--worker-frozen %v: must be > 0", c.frozenAfter)
	}
	if err := c.validateSlowLink(); err != nil {
		return err
	}
	if wire.CheckBucket(c.objectBucket) != nil {
		return usagef("--bucket-objects %q: want letters, digits, '-' and '_'", c.objectBucket)
	}
	if wire.CheckBucket(c.kvBucket) != nil {
		return usagef("--bucket-jobs %q: want letters, digits, '-' and '_'", c.kvBucket)
	}
	if c.replicas < 1 || c.replicas > 5 {
		return usagef("--replicas %d: must be in [1, 5]", c.replicas)
	}
	switch c.exchange {
	case "auto", "coordinator", "owners":
	default:
		return usagef("--exchange %q: want auto, owners or coordinator", c.exchange)
	}
	if c.colBlocks < 0 {
		return usagef("--col-blocks %d: must be >= 0", c.colBlocks)
	}
	if !(c.verify >= 0 && c.verify <= 1) {
		return usagef("--verify %v: must be in [0, 1]", c.verify)
	}
	if c.checkpointEvery < 1 {
		return usagef("--checkpoint-every %d: must be >= 1", c.checkpointEvery)
	}
	if c.job != "" && wire.CheckBucket(c.job) != nil {
		return usagef("--job %q: want letters, digits, '-' and '_'", c.job)
	}
	return c.natsFlags.validate()
}

// jobName returns --job, or a name derived from the data and the fit.
func (c *clusterFlags) jobName(man *shard.Manifest, md *factor.Model, opts factor.FitOptions) string {
	if c.job != "" {
		return c.job
	}
	h := sha256.New()
	for _, s := range man.Shards {
		h.Write([]byte(s.Checksum))
	}
	fmt.Fprintf(h, "|%d|%d|%d|%s|%d|%d|%v|%v|%d", md.N, md.M, md.U, md.Tie, md.Seed, md.Iteration, opts.Alpha,
		opts.Converger.Tol, opts.Converger.MaxIter)
	if alg := c.params["algorithm"]; alg != "" && alg != algEMSF {
		// MU: another job (EMSF's names stay as they were).
		fmt.Fprintf(h, "|%s|%s", alg, c.params["loss"])
	}
	if prec := c.params[paramPrecision]; prec != "" {
		// float32: another job (float64's names stay as they were).
		fmt.Fprintf(h, "|%s", prec)
	}
	return "fit-" + hex.EncodeToString(h.Sum(nil))[:16]
}

// executor connects to --nats (or starts the --embedded cluster of
// workers in-process workers) and returns the executor, how many workers
// to wait for, and done, which closes what it started.
func (c *clusterFlags) executor(ctx context.Context, logger hclog.Logger, workers int) (_ *natsexec.Executor, minWorkers int, done func(), _ error) {
	log := logger.Named("cluster")
	var closers []func()
	done = func() {
		for k := len(closers) - 1; k >= 0; k-- {
			closers[k]()
		}
	}
	fail := func(err error) (*natsexec.Executor, int, func(), error) {
		done()
		return nil, 0, func() {}, err
	}
	ecfg := natsexec.Config{Prefix: c.prefix, ObjectBucket: c.objectBucket, KVBucket: c.kvBucket,
		Replicas: c.replicas, ProbeEvery: c.probeEvery, FrozenAfter: c.frozenAfter, SlowLink: c.slowLinkFactor(), Logger: logger}
	minWorkers = c.minWorkers
	if c.embedded {
		dir := c.store
		if dir == "" {
			tmp, err := os.MkdirTemp("", "emsf-nats-")
			if err != nil {
				return fail(fmt.Errorf("cluster: store directory: %w", err))
			}
			closers = append(closers, func() { os.RemoveAll(tmp) })
			dir = tmp
		}
		// The workers share this machine: each announces its share of
		// its memory, so that together they announce the machine's.
		mem, _ := machineMemory()
		lc, err := natsexec.StartLocalCluster(ctx, natsexec.LocalClusterConfig{StoreDir: dir, Workers: workers,
			InProcess: true, Exec: ecfg, Sync: c.store != ""}, worker.Starter(worker.Config{Prefix: c.prefix, JobsBucket: c.kvBucket, Logger: logger,
			Memory: mem / int64(max(1, workers))}))
		if err != nil {
			return fail(err)
		}
		closers = append(closers, func() {
			if err := lc.Close(); err != nil {
				log.Warn("stopping the embedded cluster", "error", err)
			}
		})
		log.Info("embedded NATS server", "url", lc.URL(), "store", dir, "workers", len(lc.Workers))
		return lc.Exec, max(minWorkers, len(lc.Workers)), done, nil
	}
	nc, err := c.conn("emsf-coordinator").Connect()
	if err != nil {
		return fail(err)
	}
	closers = append(closers, nc.Close)
	nc.SetDisconnectErrHandler(func(_ *nats.Conn, err error) {
		if err != nil {
			log.Warn("disconnected", "error", err)
		}
	})
	nc.SetReconnectHandler(func(nc *nats.Conn) { log.Info("reconnected", "url", nc.ConnectedUrlRedacted()) })
	log.Info("connected", "url", nc.ConnectedUrlRedacted(), "max_payload", nc.MaxPayload())
	exec, err := natsexec.New(ctx, nc, ecfg)
	if err != nil {
		return fail(err)
	}
	closers = append(closers, exec.Close)
	return exec, minWorkers, done, nil
}

// fitCluster fits md in place like factor.Fit(ctx, md, shard.Blocks(shards),
// opts), bitwise, with the statistics computed by NATS workers: in-process
// ones behind an embedded server with --embedded (workers of them), or
// whatever workers serve --nats.
func fitCluster(ctx context.Context, c *clusterFlags, logger hclog.Logger, shards []*shard.Shard, man *shard.Manifest, md *factor.Model, opts factor.FitOptions, workers int) (factor.FitResult, error) {
	log := logger.Named("cluster")
	exec, minWorkers, done, err := c.executor(ctx, logger, workers)
	if err != nil {
		return factor.FitResult{}, err
	}
	defer done()
	job := c.jobName(man, md, opts)
	if c.exchange == "auto" {
		// MU's commit rules run on the coordinator (factor.MUCommit); a
		// resumed job keeps the exchange it started with.
		c.exchange = "owners"
		if opts.Commit != nil {
			c.exchange = "coordinator"
		}
		if c.resume {
			if st, _, err := exec.State(ctx, job); err == nil && (st.Params["exchange"] == "owners" || st.Params["exchange"] == "coordinator") {
				c.exchange = st.Params["exchange"]
				if _, smoothed := st.Params["accel"]; smoothed && c.exchange == "coordinator" && c.plainDefault {
					// This run was resolved as the owners' plain EM (the
					// data read without a validation part): not the job.
					return factor.FitResult{}, usagef("--resume: job %s ran the coordinator exchange with SQUAREM, MAP-EM and the held-out rule (accel %s in its checkpoint); resume it with the command that started it, --exchange coordinator included",
						job, st.Params["accel"])
				}
			}
		}
	}
	if c.exchange == "owners" && (opts.Accel != factor.AccelNone || opts.EarlyStop != nil || opts.Prior.Active()) {
		// The owners hold the factors: the coordinator cannot extrapolate
		// them or keep a best iterate (docs: what the owners need).
		if c.accelExplicit {
			return factor.FitResult{}, usagef("--accel squarem: the owners exchange runs plain EM (its owners hold D and K): use --exchange coordinator, or --accel none")
		}
		if c.stopExplicit {
			return factor.FitResult{}, usagef("--stop validation: the owners exchange cannot keep the best iterate (its owners hold D and K): use --exchange coordinator, or --stop tol")
		}
		if c.priorExplicit {
			return factor.FitResult{}, usagef("--prior-d/--prior-k: the owners exchange commits plain EM (its owners hold D and K): use --exchange coordinator, or --prior-d 0 --prior-k 0")
		}
		log.Info("the owners exchange runs plain EM with the relative-change rule and no prior (--accel auto, --stop auto, default priors); --exchange coordinator runs SQUAREM, MAP-EM and the held-out rule")
		opts.Accel, opts.EarlyStop, opts.Prior = factor.AccelNone, nil, nil
		c.params = maps.Clone(c.params)
		delete(c.params, "accel")
		delete(c.params, "prior_d")
		delete(c.params, "prior_k")
		c.params["stop"] = "tol"
	}
	params := c.jobParams(md, opts)
	if c.resume {
		if err := c.checkResume(ctx, exec, job, params, man); err != nil {
			return factor.FitResult{}, err
		}
	}
	if c.exchange == "owners" {
		return c.fitOwners(ctx, log, exec, job, params, man, shards, md, opts, minWorkers)
	}
	return coordinator.Fit(ctx, exec, shards, man, md, coordinator.Options{
		Job:           job,
		Params:        params,
		Alpha:         opts.Alpha,
		Commit:        opts.Commit,
		GroupNNZ:      opts.GroupNNZ,
		Converger:     opts.Converger,
		Accel:         opts.Accel,
		EarlyStop:     opts.EarlyStop,
		Prior:         opts.Prior,
		Progress:      opts.Progress,
		TaskTimeout:   c.workerTimeout,
		MinWorkers:    minWorkers,
		WaitWorkers:   c.waitWorkers,
		Checkpoint:    exec,
		SaveLoopState: true,
		Resume:        c.resume,
		Logger:        log,
		Verify:        c.verify,
		VerifyLast:    c.verifyLast,
		Report: func(r coordinator.IterReport) {
			c.iterationLine(log, "job", job, "iter", r.Iteration, "wall", r.Wall.Round(time.Microsecond),
				"compute", r.Compute.Round(time.Microsecond), "transfer", r.Transfer.Round(time.Microsecond),
				"reduce", r.Reduce.Round(time.Microsecond), "commit", r.Commit.Round(time.Microsecond),
				"bytes", r.Bytes, "tasks", r.Tasks, "retried", r.Retried, "dropped", r.Dropped,
				"rejected", r.Rejected, "verified", r.Verified, "mismatches", r.Mismatches, "redone", r.Redone,
				"workers", r.Workers, "sum_x", r.SumX)
		},
	})
}

// fitOwners is fitCluster with the owners exchange.
func (c *clusterFlags) fitOwners(ctx context.Context, log hclog.Logger, exec *natsexec.Executor, job string, params map[string]string, man *shard.Manifest, shards []*shard.Shard, md *factor.Model, opts factor.FitOptions, minWorkers int) (factor.FitResult, error) {
	if opts.Commit != nil {
		return factor.FitResult{}, usagef("--exchange owners runs EMSF only: drop --algorithm %s or use --exchange coordinator", c.params["algorithm"])
	}
	return exec.FitOwners(ctx, md, shards, natsexec.OwnersOptions{
		Job:         job,
		WaitWorkers: c.waitWorkers,
		Params:      params,
		Manifest:    man,
		Options:     c.ownersOptions(log, job, len(shards), opts, minWorkers),
	})
}

// ownersOptions are the owners exchange's options of a fit of job over
// shards shards: the flags', opts' and its report, one line an
// iteration (iterationLine). Resume is the flag's; the caller sets what
// else its path needs.
func (c *clusterFlags) ownersOptions(log hclog.Logger, job string, shards int, opts factor.FitOptions, minWorkers int) owners.Options {
	return owners.Options{
		Alpha:           opts.Alpha,
		Converger:       opts.Converger,
		Progress:        opts.Progress,
		GroupNNZ:        opts.GroupNNZ,
		ColBlocks:       c.colBlocks,
		CheckpointEvery: c.checkpointEvery,
		NoBackups:       !c.speculation,
		Verify:          c.verify,
		TaskTimeout:     c.workerTimeout,
		MinWorkers:      minWorkers,
		Resume:          c.resume,
		Report: func(r natsexec.OwnersReport) {
			c.iterationLine(log, "job", job, "exchange", "owners", "iter", r.Iteration, "wall", r.Wall.Round(time.Microsecond),
				"coordinator_bytes", r.Bytes, "workers", r.Workers, "epoch", r.Epoch, "rollbacks", r.Rollbacks, "rebalances", r.Rebalances,
				"shards", shards, "backups", r.Backups, "quarantined", r.Quarantined, "verifications", r.Verifications, "rogues", r.Rogues)
		},
	}
}

// jobParams are the parameters recorded in the job state: the fit's
// flags, with the order, tie and seed of this model and the converger of
// this fit.
func (c *clusterFlags) jobParams(md *factor.Model, opts factor.FitOptions) map[string]string {
	p := maps.Clone(c.params)
	if p == nil {
		p = map[string]string{}
	}
	// The restart count is not a property of one restart's job.
	delete(p, "restarts")
	if p["algorithm"] == "" {
		p["algorithm"] = algEMSF
	}
	p["exchange"] = c.exchange
	if c.exchange == "owners" {
		p["col_blocks"] = strconv.Itoa(c.colBlocks)
		// The owners run plain EM to the relative change, whichever
		// path read the data (fitIngested, or this coordinator for
		// --resume): one record of it.
		delete(p, "accel")
		delete(p, "prior_d")
		delete(p, "prior_k")
		p["stop"] = "tol"
	}
	p["order"] = strconv.Itoa(md.M)
	p["tie"] = md.Tie.String()
	p["seed"] = strconv.FormatUint(md.Seed, 10)
	p["alpha"] = strconv.FormatFloat(opts.Alpha, 'g', -1, 64)
	p["tol"] = strconv.FormatFloat(opts.Converger.Tol, 'g', -1, 64)
	p["iters"] = strconv.Itoa(opts.Converger.MaxIter)
	return p
}

// checkResume refuses --resume when the job's checkpoint is of other data
// or parameters, naming what differs. A job named after its data and
// parameters (no --job) that has no checkpoint is compared with the last
// job in the bucket instead: the run it means to resume had other data or
// parameters, or there is none to resume (an empty bucket starts afresh).
func (c *clusterFlags) checkResume(ctx context.Context, exec *natsexec.Executor, job string, params map[string]string, man *shard.Manifest) error {
	// The same data under another path is the same job.
	cmp := maps.Clone(params)
	delete(cmp, "input")
	// A float64 fit records no precision: compare it as float64.
	if cmp[paramPrecision] == "" {
		cmp[paramPrecision] = factor.Float64.String()
	}
	st, _, err := exec.State(ctx, job)
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("cluster: --resume: %w", err)
	}
	if err == nil && st.Iteration > 0 {
		return withInput(coordinator.CheckResume(emsfByDefault(st), cmp, man), st, params)
	}
	if c.job != "" {
		return nil // a named job without a checkpoint starts afresh
	}
	last, err := exec.LatestJob(ctx)
	if err != nil {
		return fmt.Errorf("cluster: --resume: %w", err)
	}
	if last == nil {
		return nil
	}
	if err := coordinator.CheckResume(emsfByDefault(last), cmp, man); err != nil {
		return fmt.Errorf("cluster: --resume: bucket %s has no checkpoint of job %s (named after this run's data and parameters); the last job there: %w",
			c.kvBucket, job, withInput(err, last, params))
	}
	return nil
}

// emsfByDefault returns st, with algorithm emsf in its parameters when
// they name none (a checkpoint from before MU ran on a cluster) and
// precision float64 when they name none (a float64 fit's, or one from
// before --precision), so that resuming refuses to go on with another
// algorithm or precision.
func emsfByDefault(st *coordinator.JobState) *coordinator.JobState {
	if st.Params["algorithm"] != "" && st.Params[paramPrecision] != "" {
		return st
	}
	c := *st
	c.Params = maps.Clone(st.Params)
	if c.Params == nil {
		c.Params = map[string]string{}
	}
	if c.Params["algorithm"] == "" {
		c.Params["algorithm"] = algEMSF
	}
	if c.Params[paramPrecision] == "" {
		c.Params[paramPrecision] = factor.Float64.String()
	}
	return &c
}

// withInput adds the input files to a resume error when they differ.
func withInput(err error, st *coordinator.JobState, params map[string]string) error {
	if err == nil || st.Params["input"] == params["input"] || st.Params["input"] == "" {
		return err
	}
	return fmt.Errorf("%w (input %s in the checkpoint, %s now)", err, st.Params["input"], params["input"])
}
