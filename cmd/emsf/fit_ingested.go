package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/coordinator/ingest"
	"github.com/emsf/emsf/coordinator/natsexec"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/worker/wire"
)

// A cluster fit whose coordinator holds metadata only: the distributed
// ingest builds the shards on the workers (and stores them once in the
// Object Store, for recovery), the workers cut the row groups of D and
// draw the random init, the owners exchange fits, and the workers write
// its last checkpoint as the parts of a model dataset into the Object
// Store: the dataset --out names there, or one that the coordinator
// copies into the directory --out names, or assembles (streamed) into
// the one file the local fit writes (byte for byte: `emsf fit --plain`
// on the same data). The coordinator opens no data file and holds no
// shard, row of D or column of K.

// ingestedPath says whether the fit runs from metadata (ingestedFit),
// and if not, why not: what only a coordinator holding the data or the
// model does.
func (f *fitFlags) ingestedPath() (bool, string) {
	c := &f.cluster
	switch {
	case !c.enabled():
		return false, "not a cluster fit"
	case c.exchange == "coordinator":
		return false, "--exchange coordinator moves the model through the coordinator"
	case f.initModel != "":
		return false, "--init: the coordinator holds the warm-start model"
	case c.resume:
		return false, "--resume checks the data against the job's as the coordinator reads it"
	case !f.plain:
		return false, "a quality flag (--smooth, --stop, --accel, --prior-d/-k) asks for smoothing, held-out scoring or the unseen rows of D set from the data, which the coordinator does with the data in hand"
	case f.holdout > 0 || len(f.orders) > 1 || f.restarts > 1:
		return false, "--holdout, several --order values and --restarts compare models in the coordinator"
	case f.tieV == factor.TieSharedD:
		return false, "--tie shared-d: the coordinator cuts the row groups of the one D"
	case f.in.input == "-":
		return false, "standard input is read by the coordinator"
	}
	return true, ""
}

// coordinatorMemoryLimit is the Go runtime's soft memory limit in the
// coordinator of a fit from metadata: it holds lines of splits, shards
// and row groups, m-vectors, and at the end, for --out FILE, a record
// batch or two of the model it assembles (4 MiB of values each) with
// their builders. Measured (docs/scaling.md §9.9): 69, 78 and 86 MiB
// peak RSS at n = 10^5, 4·10^5 and 1.6·10^6.
const coordinatorMemoryLimit = 96 << 20

// fitIngested is runFit on the metadata path.
func fitIngested(ctx context.Context, e *env, f *fitFlags, log hclog.Logger) error {
	c := &f.cluster
	m := f.orders[0]
	// The coordinator's heap is what the workers' is: record batches and
	// row buffers of the model it streams at the end, pointer-free and
	// cheap to mark, and their garbage. GOGC 25 and a soft limit of
	// coordinatorMemoryLimit (or the one already set, if lower) keep its
	// peak near what is live; both as they were when the fit returns
	// (tests run fits in one process). The environment's GOGC and
	// GOMEMLIMIT win.
	if os.Getenv("GOGC") == "" {
		defer debug.SetGCPercent(debug.SetGCPercent(workerGCPercent))
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		defer debug.SetMemoryLimit(debug.SetMemoryLimit(min(coordinatorMemoryLimit, debug.SetMemoryLimit(-1))))
	}
	exec, minWorkers, done, err := c.executor(ctx, log, f.workers)
	if err != nil {
		return err
	}
	defer done()
	deadline := time.Now().Add(c.waitWorkers)
	var workers []string
	for {
		ids, err := exec.Census(ctx)
		if err != nil {
			return err
		}
		if len(ids) >= max(1, minWorkers) {
			workers = ids
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d workers answer, --min-workers %d: none more came within --wait-workers %v", len(ids), minWorkers, c.waitWorkers)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	ijob := "ingest-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if c.job != "" {
		ijob = c.job + "-ingest"
	}
	// User ids (--ids): the workers build the sorted vocabulary in
	// ranges; its ranges wait in the Object Store for the model's parts.
	iopts := ingest.Options{Job: ijob, Input: f.in.input, Format: f.in.format, Read: f.in.readOptions(),
		MaxStates: maxInferredStates, MaxActions: maxInferredActions, Target: f.shardNNZ, ColCells: f.colCells, Store: true, Logger: log,
	}
	iopts.IDs, iopts.AutoIDs = f.in.ingestIDs()
	res, err := exec.Ingest(ctx, iopts)
	if err != nil {
		var se *ingest.SizeError
		switch {
		case errors.As(err, &se):
			return usagef("%v (--states N / --actions N)", err)
		case f.in.ids == idsInt && arrowio.IsStringIDs(err):
			return fmt.Errorf("%w (--ids int reads integer indices only: drop it, or give --ids auto, to read ids)", err)
		}
		return err
	}
	if res.IDs.Any() {
		defer exec.RemoveVocab(context.WithoutCancel(ctx), ijob, res)
	}
	set := res.Sets[0]
	if m > res.N {
		return usagef("--order %d: must be at most the number of states n = %d", m, res.N)
	}
	// Limits before allocation (--max-model-bytes): the workers hold the
	// model between them, once; refuse it here, before any is drawn,
	// against their memory (not this machine's).
	fp := factor.Footprint{N: res.N, M: m, U: res.U, Tie: f.tieV, Float32: f.precisionV == factor.Float32, GroupNNZ: f.groupNNZ,
		NNZ: int64(set.Manifest.NNZ)}
	mem, known := exec.Memory(workers)
	if err := f.limits.checkCluster("a cluster fit (--algorithm emsf; its workers hold the model)", fp, fp.Model(), mem, len(workers), known); err != nil {
		return err
	}
	log.Info("data", "input", f.in.input, "transitions", res.Transitions, "states", res.N, "actions", res.U,
		"nonzeros", set.Manifest.NNZ, "shards", len(set.Lines), "splits", len(res.Splits), "ingest_epochs", res.Epochs)

	hdr := &factor.Model{N: res.N, M: m, U: res.U, Tie: f.tieV, Seed: f.seed, Precision: f.precisionV, LogLik: math.NaN(), WKL: math.NaN()}
	opts := factor.FitOptions{Alpha: f.alpha, GroupNNZ: f.groupNNZ, Converger: f.stop.converger(),
		Progress: f.report.iterations(f.stop.iters, "order", m, "seed", f.seed)}
	c.exchange = "owners"
	c.params = maps.Clone(f.params(m))
	delete(c.params, "accel")
	delete(c.params, "prior_d")
	delete(c.params, "prior_k")
	c.params["stop"] = "tol"
	job := c.jobName(set.Manifest, hdr, opts)
	oj, err := exec.IngestedJob(ctx, job, set.Lines, f.tieV)
	if err != nil {
		return err
	}

	// The workers write the model's parts into the Object Store: the
	// dataset --out names there, or one under the job's name that this
	// coordinator then assembles into the file --out names, or copies
	// into its directory, and removes.
	url := exec.JobModelURL(job)
	toStore := strings.HasPrefix(f.out, wire.ObjectScheme)
	if toStore {
		url = f.out
	}
	parts, err := exec.ModelParts(ctx, url, toStore)
	if err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	if toStore {
		if err := checkNoDataset(ctx, parts, url); err != nil {
			return err
		}
	}
	model := exec.NewDrawnModel(hdr, parts.String(), f.format)
	committed := false
	defer func() {
		// The job's own dataset goes once assembled or copied (or
		// failed); a dataset --out names stays, unless the fit failed
		// before its manifest.
		if toStore && committed {
			return
		}
		for _, name := range append(model.Files, arrowio.ManifestName) {
			if err := parts.Remove(context.WithoutCancel(ctx), name); err != nil {
				log.Warn("could not remove a part of the model from the Object Store", "part", name, "dataset", parts.String(), "error", err)
			}
		}
	}()
	// ingestedPath: no --resume here.
	oopts := c.ownersOptions(log.Named("cluster"), job, len(oj.Shards), opts, minWorkers)
	oopts.Evaluate = true
	fr, err := exec.RunOwners(ctx, oj, hdr, model, natsexec.OwnersOptions{
		Job:         job,
		WaitWorkers: c.waitWorkers,
		Params:      c.jobParams(hdr, opts),
		Manifest:    set.Manifest,
		Options:     oopts,
	})
	f.report.done()
	if err != nil {
		return err
	}
	status := fr.Status.String()
	log.Info("fit done", "order", m, "seed", f.seed, "status", status, "iterations", fr.Iterations, "loglik", hdr.LogLik,
		"elapsed", fr.Elapsed.Round(time.Millisecond))
	f.warnEarly(log, fr.Status, "order", m, "seed", f.seed, "iterations", fr.Iterations)
	mf := &arrowio.ModelFile{Model: hdr, Fingerprint: res.Fingerprint, Params: f.params(m), Status: status,
		ReduceOrder: factor.ReduceOrder, GroupNNZ: f.groupNNZ}
	if res.IDs.Any() {
		// The vocabularies' parts, streamed from the ranges the workers
		// stored (this coordinator holds an id at a time).
		shape := arrowio.ShapeOf(hdr)
		for g, name := range arrowio.VocabNames {
			if res.IDs[g] {
				shape.IDs = append(shape.IDs, name)
			}
		}
		vparts, sums, err := exec.VocabParts(ctx, ijob, res, parts, shape, f.format)
		if err != nil {
			return err
		}
		for _, p := range vparts {
			model.Files = append(model.Files, p.File)
		}
		if _, err := arrowio.CommitModelDatasetIDs(ctx, parts, mf, append(slices.Clone(model.Parts), vparts...), sums); err != nil {
			return err
		}
	} else if _, err := arrowio.CommitModelDataset(ctx, parts, mf, model.Parts); err != nil {
		return err
	}
	committed = true
	switch {
	case toStore:
	case datasetOut(f.out):
		if _, err := arrowio.CopyModelDataset(ctx, parts, arrowio.DirParts{Dir: f.out}); err != nil {
			return err
		}
	default:
		if err := arrowio.AssembleModel(ctx, parts, f.out, f.format); err != nil {
			return err
		}
	}
	fmt.Fprintf(e.stdout, "model n=%d m=%d u=%d tie=%s: %d iterations (%s), log-likelihood %.6g, WKL %.6g\nwrote %s\n",
		hdr.N, hdr.M, hdr.U, hdr.Tie, hdr.Iteration, status, hdr.LogLik, hdr.WKL, f.out)
	return nil
}
