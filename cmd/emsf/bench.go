package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"time"

	"gonum.org/v1/gonum/stat"

	"github.com/emsf/emsf/coordinator"
	"github.com/emsf/emsf/coordinator/natsexec"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
	"github.com/emsf/emsf/worker"
)

func runBench(ctx context.Context, e *env, args []string) error {
	var n, perRow, m, u, iters, shardNNZ int
	var workersList, tieS, precS string
	var seed uint64
	var cluster clusterFlags
	var clusterBench bool
	ingest := inputFlags{ids: idsAuto} // as emsf fit reads (standard input of ids is replayed)
	var ingestProfile string
	fs := newFlagSet(e, "bench", "bench [flags]")
	fs.IntVar(&n, "states", 20000, "number of states n")
	fs.IntVar(&perRow, "per-row", 100, "nonzeros per row of each count matrix (nnz = n·per-row·u)")
	fs.IntVar(&m, "order", 32, "order m")
	fs.IntVar(&u, "actions", 1, "number of actions u")
	fs.IntVar(&iters, "iters", 5, "iterations to time (the median is reported)")
	fs.StringVar(&workersList, "workers", "1,2", "comma-separated goroutine counts to time")
	fs.StringVar(&tieS, "tie", "none", "tie mode")
	fs.IntVar(&shardNNZ, "shard-nnz", shard.DefaultTargetNNZ, "target nonzeros per shard (with --cluster: each shard's partial is ≈ (rows + columns touched)·m·8 bytes, so one or two shards per worker move least; a cluster fit equals a local fit bitwise only with the same --shard-nnz)")
	fs.Uint64Var(&seed, "seed", 1, "seed of the data and the model")
	fs.StringVar(&precS, "precision", "float64", "precision of the factors, float64 or float32 (as emsf fit --precision; local iterations only)")
	cluster.register(fs)
	fs.BoolVar(&clusterBench, "cluster", false, "also time cluster iterations over loopback NATS (embedded server, in-process workers, one per --workers entry) on the same shards and print their ratio to local")
	fs.StringVar(&ingest.input, "ingest", "", "instead: read and count this transitions file as emsf fit does (any format) and report transitions/s, the CSR's size and the peak RSS")
	fs.StringVar(&ingestProfile, "ingest-cpuprofile", "", "with --ingest: write a CPU profile of the ingest to this file (go tool pprof)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if ingest.input != "" {
		return benchIngest(ctx, e, &ingest, ingestProfile)
	}
	workers, err := intList("workers", workersList)
	if err != nil {
		return err
	}
	tie, err := factor.ParseTie(tieS)
	prec, perr := factor.ParsePrecision(precS)
	switch {
	case err != nil:
		return usagef("--tie %q: want none, shared-k or shared-d", tieS)
	case perr != nil:
		return usagef("--precision %q: want float64 or float32", precS)
	case prec != factor.Float64 && clusterBench:
		return usagef("--precision %s times local iterations only: drop --cluster", prec)
	case n < 1:
		return usagef("--states %d: must be >= 1", n)
	case perRow < 1 || perRow > n:
		return usagef("--per-row %d: must be in [1, --states]", perRow)
	case m < 1 || m > n:
		return usagef("--order %d: must be in [1, --states]", m)
	case u < 1:
		return usagef("--actions %d: must be >= 1", u)
	case iters < 1:
		return usagef("--iters %d: must be >= 1", iters)
	}
	for _, w := range workers {
		if w < 1 {
			return usagef("--workers %d: must be >= 1", w)
		}
	}

	mats := factor.RandomCounts(n, u, perRow, 4, seed) // as BenchmarkIteration
	shards, man := shard.Split(mats, n, shardNNZ)
	blocks := shard.Blocks(shards)
	nz := factor.NNZ(blocks)
	fmt.Fprintf(e.stdout, "emsf bench: n=%d m=%d u=%d nnz=%d shards=%d precision=%s GOMAXPROCS=%d %s/%s\n",
		n, m, u, nz, len(blocks), prec, runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(e.stdout, "%-8s %-8s %12s %12s %12s\n", "workers", "loglik", "s/iter", "ns/nonzero", "iter/s")
	local := map[int]float64{}
	for _, w := range workers {
		for _, withLL := range []bool{false, true} {
			// The previous run's model and accumulator are garbage:
			// collect them before allocating the next, so that the peak
			// RSS is one fit's, not two.
			runtime.GC()
			md := factor.NewRandom(n, m, u, tie, seed)
			if prec != factor.Float64 {
				md.SetPrecision(prec)
			}
			acc := factor.NewAccumulator(md)
			var ps factor.Passer
			times := make([]time.Duration, 0, iters)
			for range iters {
				t0 := time.Now()
				if err := ps.Pass(ctx, md, blocks, acc, w, withLL); err != nil {
					return err
				}
				acc.CommitWorkers(md, 1, 0, w) // rounds a float32 model too
				times = append(times, time.Since(t0))
			}
			med := median(times).Seconds()
			if !withLL {
				local[w] = med
			}
			fmt.Fprintf(e.stdout, "%-8d %-8v %12.4f %12.1f %12.2f\n", w, withLL, med, med*1e9/float64(nz), 1/med)
		}
	}
	if !clusterBench {
		return nil
	}
	// Cluster mode: the same shards and model, iters+1 iterations (the
	// first uploads shards and fills the workers' caches and is not timed),
	// loglik on the last one only, as a fit with a fixed iteration count.
	fmt.Fprintf(e.stdout, "\ncluster (loopback NATS, embedded server, in-process workers; ratio = cluster s/iter / local s/iter, same workers)\n")
	fmt.Fprintf(e.stdout, "%-8s %-8s %12s %12s %12s\n", "workers", "mode", "s/iter", "MB/iter", "ratio")
	var phases []coordinator.IterReport
	for _, w := range workers {
		dir, err := os.MkdirTemp("", "emsf-bench-nats-")
		if err != nil {
			return fmt.Errorf("bench: store directory: %w", err)
		}
		md := factor.NewRandom(n, m, u, tie, seed)
		res, err := natsexec.Bench(ctx, dir, w, iters+1, shards, man, md, worker.Starter(worker.Config{}))
		os.RemoveAll(dir)
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "%-8d %-8s %12.4f %12.1f %12.2f\n", w, "cluster", res.MedianSecondsPerIter,
			res.BytesPerIter/1e6, res.MedianSecondsPerIter/local[w])
		phases = append(phases, res.Phases)
	}
	// Where a cluster iteration goes (medians; compute includes a
	// worker's waits for rows of K still in flight).
	fmt.Fprintf(e.stdout, "\nphases (median ms per iteration)\n%-8s %8s %8s %8s %8s %8s %8s %8s %8s\n",
		"workers", "wall", "model", "compute", "encode", "fetch", "reduce", "commit", "transfer")
	ms := func(d time.Duration) float64 { return d.Seconds() * 1e3 }
	for k, p := range phases {
		fmt.Fprintf(e.stdout, "%-8d %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f\n", workers[k], ms(p.Wall), ms(p.ModelFetch),
			ms(p.Compute), ms(p.PartialEncode), ms(p.PartialFetch), ms(p.Reduce), ms(p.Commit), ms(p.Transfer))
	}
	return nil
}

// median returns the empirical median of ts (for an even count, the
// lower of the two middle values).
func median(ts []time.Duration) time.Duration {
	s := make([]float64, len(ts))
	for k, t := range ts {
		s[k] = float64(t)
	}
	slices.Sort(s)
	return time.Duration(stat.Quantile(0.5, stat.Empirical, s, nil))
}
