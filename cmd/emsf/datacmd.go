package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/coordinator/ingest"
	"github.com/emsf/emsf/coordinator/natsexec"
	"github.com/emsf/emsf/shard"
	"github.com/emsf/emsf/worker"
	"github.com/emsf/emsf/worker/wire"
)

// runData is emsf data: datasets of transitions in the Object Store,
// uploaded once and read by a fit's workers (or by a local fit) as
// --input nats-obj://BUCKET/NAME.
func runData(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(e.stdout, `Usage: emsf data <put|list|ingest> [flags]

  put NAME FILE…   upload the files as dataset NAME (replacing its parts), read as
                   --input nats-obj://BUCKET/NAME; each file is one part, read whole
  list [NAME]      list the parts of dataset NAME (default: every dataset)
  ingest --input DATASET
                   build the shards of a dataset on the cluster's workers (the
                   distributed ingest: the coordinator reads no transition) and
                   print their manifest; bitwise the shards emsf fit builds

Run 'emsf data put -h' (or list, ingest) for the flags.
`)
		if len(args) == 0 {
			return usagef("name a subcommand: put, list or ingest")
		}
		return flag.ErrHelp
	}
	sub, rest := args[0], args[1:]
	if sub == "ingest" {
		return runIngest(ctx, e, rest)
	}
	var synopsis string
	switch sub {
	case "put":
		synopsis = "data put NAME FILE… [flags]"
	case "list":
		synopsis = "data list [NAME] [flags]"
	default:
		return usagef("unknown subcommand %q: want put, list or ingest", sub)
	}
	fs := newFlagSet(e, "data "+sub, synopsis)
	var (
		nf     natsFlags
		bucket string
	)
	nf.register(fs)
	fs.StringVar(&bucket, "bucket", wire.DefaultObjectBucket, "Object Store bucket of the dataset")
	pos, err := parseArgs(fs, rest)
	if err != nil {
		return err
	}
	if err := nf.validate(); err != nil {
		return err
	}
	if nf.url == "" {
		return usagef("--nats is required (or set NATS_URL)")
	}
	if err := wire.CheckBucket(bucket); err != nil {
		return usagef("--bucket %q: want letters, digits, '-' and '_'", bucket)
	}
	switch {
	case sub == "put" && len(pos) < 2:
		return usagef("give a dataset NAME and the FILEs to upload")
	case sub == "list" && len(pos) > 1:
		return usagef("unexpected argument %q (one NAME)", pos[1])
	}
	nc, err := nf.conn("emsf-data").Connect()
	if err != nil {
		return fmt.Errorf("--nats %s: %w", nf.url, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if sub == "put" {
		name := pos[0]
		for _, p := range pos[1:] {
			if _, err := arrowio.ListDataset(p, ""); err != nil {
				return err
			}
		}
		infos, err := worker.PutDataset(ctx, js, nc.MaxPayload(), bucket, name, pos[1:])
		if err != nil {
			return err
		}
		total := uint64(0)
		for _, info := range infos {
			total += info.Size
		}
		fmt.Fprintf(e.stdout, "dataset %s: %d parts, %d bytes\ninput: %s%s/%s\n", name, len(infos), total, worker.ObjectScheme, bucket, name)
		return nil
	}
	name := ""
	if len(pos) == 1 {
		name = pos[0]
	}
	sets, err := worker.ListDatasets(ctx, js, bucket, name)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DATASET\tPARTS\tBYTES\tINPUT")
	for _, d := range sets {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s%s/%s\n", d.Name, d.Parts, d.Bytes, worker.ObjectScheme, bucket, d.Name)
		if name != "" {
			for _, p := range d.Files {
				fmt.Fprintf(tw, "  %s\t\t%d\t%s\n", p.Name[len(worker.ObjectScheme)+len(bucket)+1:], p.Size, p.Format)
			}
		}
	}
	return tw.Flush()
}

// runIngest is emsf data ingest: the distributed ingest of a dataset on
// the workers of --nats (natsexec.Executor.Ingest), its shards left in
// the workers' caches (and with --store in the Object Store), its
// manifest printed and, with --manifest, written as JSON (every shard's
// line with the worker that holds it).
func runIngest(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "data ingest", "data ingest --nats URL --input DATASET [flags]")
	var (
		in          inputFlags
		cf          clusterFlags
		shardNNZ    int
		colCells    int
		holdout     float64
		seed        uint64
		splitBytes  int64
		store       bool
		manifestOut string
		level       string
		budgets     ingest.Options
	)
	in.register(fs)
	cf.natsFlags.register(fs)
	fs.StringVar(&cf.job, "job", "", "job name (default: ingest- and the time)")
	fs.IntVar(&cf.minWorkers, "min-workers", 1, "wait for this many workers before reading")
	fs.DurationVar(&cf.waitWorkers, "wait-workers", 30*time.Second, "how long to wait for --min-workers")
	fs.DurationVar(&cf.probeEvery, "worker-probe", time.Second, "how often a worker with a request in hand is pinged; one that no longer answers is lost (the ingest plans again without it)")
	fs.DurationVar(&cf.frozenAfter, "worker-frozen", 15*time.Second, "a worker that leaves its pings unanswered this long counts as lost")
	cf.registerSlowLink(fs)
	fs.StringVar(&cf.objectBucket, "bucket-objects", wire.DefaultObjectBucket, "Object Store bucket of the shards (--store-shards)")
	fs.IntVar(&shardNNZ, "shard-nnz", shard.DefaultTargetNNZ, "target nonzeros per shard (as emsf fit)")
	fs.IntVar(&colCells, "col-cells", 1, "column cells per row range of a shard (as emsf fit)")
	fs.Float64Var(&holdout, "holdout", 0, "fraction of transitions held out (as emsf fit: also builds the held-out and the all-data shards)")
	fs.Uint64Var(&seed, "seed", 1, "seed of the holdout draws (as emsf fit)")
	fs.Int64Var(&splitBytes, "split-bytes", 0, "bytes of input per split read by one worker (default: 4 splits per worker, at least 1 MiB, at most 64 MiB)")
	fs.BoolVar(&store, "store-shards", false, "also put every shard into the Object Store (shards/<checksum>)")
	fs.StringVar(&manifestOut, "manifest", "", "write the shard lines (JSON) to this file")
	fs.Int64Var(&budgets.OutboxBytes, "outbox-bytes", 32<<20, "a worker's budget of segments not yet pulled from it (its reading waits beyond)")
	fs.Int64Var(&budgets.AheadBytes, "ahead-bytes", 32<<20, "a worker's budget of segments received ahead of the split it counts (its pulling waits beyond)")
	fs.StringVar(&level, "log-level", "info", "log level: trace, debug, info, warn, error")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := in.validate(); err != nil {
		return err
	}
	if err := cf.natsFlags.validate(); err != nil {
		return err
	}
	if cf.url == "" {
		return usagef("--nats is required (or set NATS_URL)")
	}
	if err := cf.validateSlowLink(); err != nil {
		return err
	}
	if !(holdout >= 0 && holdout < 1) {
		return usagef("--holdout %v: must be in [0, 1)", holdout)
	}
	if budgets.OutboxBytes < 1 || budgets.AheadBytes < 1 {
		return usagef("--outbox-bytes and --ahead-bytes must be >= 1")
	}
	if shardNNZ < 1 || colCells < 1 || colCells > shard.MaxColCells || splitBytes < 0 {
		return usagef("--shard-nnz and --col-cells must be >= 1 (--col-cells at most %d), --split-bytes >= 0", shard.MaxColCells)
	}
	lvl := hclog.LevelFromString(level)
	if lvl == hclog.NoLevel {
		return usagef("--log-level %q: want trace, debug, info, warn or error", level)
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "emsf", Level: lvl, Output: e.stderr, Color: hclog.ColorOff})
	job := cf.job
	if job == "" {
		job = "ingest-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	}
	nc, err := cf.conn("emsf-ingest").Connect()
	if err != nil {
		return fmt.Errorf("--nats %s: %w", cf.url, err)
	}
	defer nc.Close()
	exec, err := natsexec.New(ctx, nc, natsexec.Config{Prefix: cf.prefix, ObjectBucket: cf.objectBucket,
		ProbeEvery: cf.probeEvery, FrozenAfter: cf.frozenAfter, SlowLink: cf.slowLinkFactor(), Logger: log})
	if err != nil {
		return err
	}
	defer exec.Close()
	deadline := time.Now().Add(cf.waitWorkers)
	for {
		ids, err := exec.Census(ctx)
		if err != nil {
			return err
		}
		if len(ids) >= cf.minWorkers {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d workers answer, --min-workers %d: none more came within --wait-workers %v", len(ids), cf.minWorkers, cf.waitWorkers)
		}
	}
	t0 := time.Now()
	iopts := ingest.Options{Job: job, Input: in.input, Format: in.format, Read: in.readOptions(),
		MaxStates: maxInferredStates, MaxActions: maxInferredActions, SplitBytes: splitBytes, Holdout: holdout, Seed: seed,
		Target: shardNNZ, ColCells: colCells, Store: store, OutboxBytes: budgets.OutboxBytes, AheadBytes: budgets.AheadBytes, Logger: log}
	iopts.IDs, iopts.AutoIDs = in.ingestIDs()
	res, err := exec.Ingest(ctx, iopts)
	if err != nil {
		var se *ingest.SizeError
		if errors.As(err, &se) {
			return usagef("%v (--states N / --actions N)", err)
		}
		return err
	}
	if res.IDs.Any() {
		// The vocabulary's ranges are for a fit's model: none here.
		exec.RemoveVocab(context.WithoutCancel(ctx), job, res)
	}
	fmt.Fprintf(e.stdout, "dataset %s: %d files, %d splits, %d transitions, n=%d u=%d, fingerprint %s; %d epoch(s), %s\n",
		in.input, len(res.Files), len(res.Splits), res.Transitions, res.N, res.U, res.Fingerprint, res.Epochs, time.Since(t0).Round(time.Millisecond))
	for k, set := range res.Sets {
		holders := map[string]int{}
		for _, l := range set.Lines {
			holders[l.Holder]++
		}
		fmt.Fprintf(e.stdout, "%s: %d transitions, %d shards, %d nonzeros, total count %g, on %d workers\n",
			[]string{"train", "held-out", "all"}[k], set.Transitions, len(set.Lines), set.Manifest.NNZ, set.Manifest.Total, len(holders))
	}
	if manifestOut != "" {
		data, err := json.MarshalIndent(res, "", " ")
		if err != nil {
			return err
		}
		if err := arrowio.WriteFileAtomic(manifestOut, data); err != nil {
			return err
		}
	}
	return nil
}
