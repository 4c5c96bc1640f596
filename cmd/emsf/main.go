// Command emsf learns compact models of Markov decision processes from
// logged transitions: for every action a stochastic factorization
// P^a ≈ D^a K^a fitted by EMSF, and the tools that use it.
//
// This file is the thin entry point: subcommand dispatch and the shared
// logging setup. Each subcommand lives in a file of its own with its own
// flag.FlagSet; the math is in package factor, formats in arrowio, the job
// in coordinator.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"runtime/debug"
	"sort"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"
)

// command is one subcommand.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, env *env, args []string) error
}

// env is what every subcommand gets: its output streams.
type env struct {
	stdout, stderr io.Writer
	// hugePages: a local fit asks for huge pages on its heap (hugeHeap);
	// set by main, so never in a test that calls run.
	hugePages bool
}

func commands() []command {
	return []command{
		{"demo", "generate an MDP, fit it, and compare with counting (start here)", runDemo},
		{"fit", "fit a stochastic factorization to transitions", runFit},
		{"gen", "generate a synthetic MDP and sample transitions from it", runGen},
		{"eval", "evaluate a model against data and against a true model", runEval},
		{"inspect", "print a model's summary", runInspect},
		{"trick", "reduced chains K^a D^a and the stationary distribution", runTrick},
		{"query", "ask a model (file or served): top-k next states, probabilities, memberships, chains, plans; JSON in the model's ids", runQuery},
		{"bench", "time one EM iteration on generated data", runBench},
		{"experiment", "reproduce the papers' figures: CSV of every run and a PNG plot", runExperiment},
		{"serve", "own a model name: count transitions from NATS, retrain, publish versions", runServe},
		{"publish", "send a transitions file to a served model's stream", runPublish},
		{"retrain", "ask emsf serve for a new model version now", runRetrain},
		{"model", "fetch (get), list or inspect (status) a served model's versions; assemble or split a model dataset", runModel},
		{"scaling", "cost model of a cluster iteration at scale; --check against scripts/netns-cluster.sh", runScaling},
		{"data", "upload datasets of transitions to the Object Store (put) and list them", runData},
		{"worker", "run a cluster worker (NATS micro service)", func(ctx context.Context, e *env, args []string) error {
			if rc := runWorker(ctx, args, e.stdout, e.stderr); rc != 0 {
				return exitCode(rc)
			}
			return nil
		}},
	}
}

// exitCode is an error that carries an exit status already reported.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func main() {
	os.Exit(runEnv(os.Args[1:], &env{stdout: os.Stdout, stderr: os.Stderr, hugePages: true}))
}

func run(args []string, stdout, stderr io.Writer) int {
	return runEnv(args, &env{stdout: stdout, stderr: stderr})
}

func runEnv(args []string, e *env) int {
	stdout, stderr := e.stdout, e.stderr
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(args) > 0 && (args[0] == "--version" || args[0] == "-version" || args[0] == "version") {
		fmt.Fprintln(stdout, version())
		return 0
	}
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		if len(args) > 1 {
			return run([]string{args[1], "-h"}, stdout, stderr)
		}
		usage(stdout)
		return 0
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, e, args[1:])
		var ec exitCode
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		case errors.As(err, &ec):
			return int(ec)
		case errors.As(err, new(usageError)):
			fmt.Fprintf(stderr, "emsf %s: %v\n", c.name, err)
			return 2
		default:
			fmt.Fprintf(stderr, "emsf %s: %v\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "emsf: unknown command %q; run 'emsf help' for the list\n", args[0])
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "emsf learns stochastic factorizations P^a ≈ D^a K^a of MDPs from transitions.")
	fmt.Fprintln(w, "\nUsage: emsf <command> [flags]\n\nCommands:")
	cs := commands()
	sort.Slice(cs, func(i, j int) bool { return cs[i].name < cs[j].name })
	for _, c := range cs {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'emsf help <command>' or 'emsf <command> -h' for a command's flags; 'emsf --version' for the version.")
}

// version returns the binary's version (semver) and the VCS commit it was
// built from (from the build information), e.g.
//
//	emsf 0.0.0-devel (commit 1a2b…, 2026-11-27T04:00:00Z) go1.26.0
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "emsf " + semver() + " (no build information)"
	}
	v := "emsf " + semver()
	var rev, at, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = ", modified"
			}
		}
	}
	if rev != "" {
		v += fmt.Sprintf(" (commit %s, %s%s)", rev, at, dirty)
	}
	return v + " " + bi.GoVersion
}

// semverPattern is semantic versioning 2.0.0 (the regular expression
// semver.org suggests, which NATS micro services check their version
// against).
var semverPattern = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$`)

// semver is the binary's version in semantic versioning, the one emsf
// --version prints and emsf serve's micro service announces: the module
// version without its "v" (a release tag, or the pseudo-version the go
// command stamps on a build in a checkout), else "0.0.0-devel" (a build
// without a module version: "(devel)").
func semver() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v := strings.TrimPrefix(bi.Main.Version, "v"); semverPattern.MatchString(v) {
			return v
		}
	}
	return "0.0.0-devel"
}

// usageError is a bad flag or argument; it exits with status 2.
type usageError struct{ msg string }

func (u usageError) Error() string { return u.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

// newFlagSet returns a flag set whose help (-h) goes to e.stdout, its
// flags grouped by what they are about (see printFlags), and that returns
// errors instead of printing or exiting: parse turns them into usage
// errors.
func newFlagSet(e *env, name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		fmt.Fprintf(e.stdout, "Usage: emsf %s\n", synopsis)
		printFlags(e.stdout, fs)
	}
	return fs
}

// parse parses args and turns flag errors into usage errors. On -h it
// prints the help (fs.Usage) and returns flag.ErrHelp. Arguments that are
// not flags are refused.
func parse(fs *flag.FlagSet, args []string) error {
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	return nil
}

// parseArgs parses args, whose flags and other arguments may come in any
// order ("get NAME --out f" and "get --out f NAME"), and returns the
// arguments that are not flags.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	usage := fs.Usage
	fs.Usage = func() {} // flag calls it on errors too: help is printed below, on -h only
	defer func() { fs.Usage = usage }()
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				usage()
				return nil, err
			}
			return nil, usageError{err.Error() + " (see 'emsf help " + fs.Name() + "')"}
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// flagGroups are the sections of a command's help, in order, and the flags
// each holds; a flag in none is listed under "Other flags".
type flagGroup struct {
	title string
	names []string
}

func flagGroups() []flagGroup {
	return []flagGroup{
		{"Input", []string{"input", "input-format", "ids", "col-state", "col-action", "col-next", "col-count", "states", "actions", "model", "truth", "name", "version", "rho", "check", "skip", "input-nats"}},
		{"Model", []string{"order", "orders", "tie", "init", "init-smooth", "algorithm", "loss", "seed", "true-order", "rows", "conc"}},
		{"Sampling", []string{"transitions", "sampling", "episode-len", "per-row"}},
		{"Fit", []string{"iters", "tol", "time-limit", "restarts", "workers", "alpha", "precision", "holdout", "shard-nnz", "col-cells", "group-nnz",
			"incremental", "passes", "eta-max", "commit-every", "online-em", "gamma-exp", "burn-in", "online-em-floor", "mode", "every", "interval"}},
		{"Quality and speed", []string{"smooth", "stop", "accel", "start", "validation", "patience", "min-gain", "prior-d", "prior-k", "plain", "train", "baselines", "mix"}},
		{"Analysis", []string{"policy", "top", "cnt"}},
		{"Experiment", []string{"paper", "runs", "sizes", "bases", "hands", "batch-hands", "batches", "eval-hands", "epsilon", "emsf-init",
			"observations", "hmm-iters", "hmm-eps", "gen-iters", "epca-iters", "nmf-steps"}},
		{"Benchmark", []string{"cluster", "ingest", "ingest-cpuprofile", "cpuprofile"}},
		{"Cost model", []string{"nodes", "nnz", "shards", "gbit", "rtt", "conns", "window", "cores", "box-cores", "cpu-per-byte", "box-cpu-per-byte",
			"merge-bw", "ns-per-nnz", "wire-overhead", "serial", "memory", "gogc", "check-memory"}},
		{"Output", []string{"out", "format", "dir", "part-rows", "string-ids"}},
		{"Publishing and retraining", []string{"create", "allow-rejects", "dedup", "max-rows", "after-seq", "wait", "keep-versions", "buffer-rows", "stop-timeout"}},
		{"Service limits", []string{"max-states", "max-actions", "max-model-bytes"}},
		{"Cluster and NATS", []string{"nats", "embedded", "creds", "nkey", "user", "password", "password-file", "token", "token-file", "tls-ca", "tls-cert", "tls-key",
			"subject-prefix", "bucket-jobs", "bucket-models", "bucket-objects", "bucket-partials", "bucket-serve", "job", "resume",
			"exchange", "col-blocks", "speculation", "min-workers", "wait-workers", "worker-wait", "worker-probe", "worker-timeout", "worker-frozen", "slow-link", "verify", "verify-last", "use-workers", "replicas", "store", "listen", "port",
			"max-cached-shards", "task-delay", "task-delay-from", "task-wrong-from", "ingest-hold-segment", "ingest-hold-fed", "stream-max-age", "stream-max-bytes", "stream-purge", "stream-keep", "checkpoint-every", "ingest-delay", "metrics-addr", "timeout"}},
		{"Query", []string{"bench", "load", "queries", "k", "clients", "duration", "warmup", "max-k"}},
		{"Logging and progress", []string{"quiet", "verbose", "log-level", "log-json", "log-every", "memprofile-dir"}},
	}
}

// printFlags prints fs's flags like flag.PrintDefaults, with two dashes,
// in the sections of flagGroups that have any.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	groups := flagGroups()
	group := map[string]int{}
	for g, fg := range groups {
		for _, n := range fg.names {
			group[n] = g
		}
	}
	sections := make([][]*flag.Flag, len(groups)+1)
	fs.VisitAll(func(f *flag.Flag) {
		g, ok := group[f.Name]
		if !ok {
			g = len(groups)
		}
		sections[g] = append(sections[g], f)
	})
	for g, flags := range sections {
		if len(flags) == 0 {
			continue
		}
		title := "Other flags"
		if g < len(groups) {
			title = groups[g].title
		}
		fmt.Fprintf(w, "\n%s:\n", title)
		for _, f := range flags {
			kind, usage := flag.UnquoteUsage(f)
			line := "  --" + f.Name
			if kind != "" {
				line += " " + kind
			}
			line += "\n    \t" + strings.ReplaceAll(usage, "\n", "\n    \t")
			switch def := f.DefValue; {
			case def == "" || def == "0" || def == "false" || def == "0s":
			case fmt.Sprintf("%T", f.Value) == "*flag.stringValue":
				line += fmt.Sprintf(" (default %q)", def)
			default:
				line += fmt.Sprintf(" (default %v)", def)
			}
			fmt.Fprintln(w, line)
		}
	}
}

// logFlags are the logging flags every long-running command shares.
type logFlags struct {
	quiet bool
	json  bool
	level string
}

func (l *logFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&l.quiet, "quiet", false, "print only warnings and errors")
	fs.BoolVar(&l.json, "log-json", false, "log as JSON lines")
	fs.StringVar(&l.level, "log-level", "info", "log level: trace, debug, info, warn, error")
}

func (l *logFlags) logger(e *env, name string) (hclog.Logger, error) {
	lvl := hclog.LevelFromString(l.level)
	if lvl == hclog.NoLevel {
		return nil, usagef("--log-level %q: want trace, debug, info, warn or error", l.level)
	}
	if l.quiet {
		lvl = hclog.Warn
	}
	return hclog.New(&hclog.LoggerOptions{
		Name:       name,
		Level:      lvl,
		Output:     e.stderr,
		JSONFormat: l.json,
		Color:      hclog.ColorOff,
	}), nil
}

// intList parses "5,10,20".
func intList(flagName, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		var v int
		if _, err := fmt.Sscanf(f, "%d", &v); err != nil || fmt.Sprint(v) != f {
			return nil, usagef("--%s %q: %q is not an integer", flagName, s, f)
		}
		out = append(out, v)
	}
	return out, nil
}
