package natsexec

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/emsf/emsf/coordinator"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
)

// BenchResult is the cost of cluster iterations measured by Bench.
type BenchResult struct {
	Workers    int
	Iterations int
	// SecondsPerIter and BytesPerIter average the timed iterations (all
	// but the first, which uploads shards and fills the workers' caches).
	SecondsPerIter float64
	BytesPerIter   float64
	// MedianSecondsPerIter is the median wall time of the timed
	// iterations (robust to a noisy machine).
	MedianSecondsPerIter float64
	// Phases holds the median of each phase of the timed iterations
	// (Wall, Compute, Transfer, Reduce, Commit, ModelFetch, PartialEncode,
	// PartialFetch; see coordinator.IterReport).
	Phases  coordinator.IterReport
	Reports []coordinator.IterReport
}

// Bench fits a copy of md for iters iterations (at least 2) on a local
// cluster of workers workers over 127.0.0.1 TCP (store in storeDir) and
// reports the cost per iteration. The log-likelihood is computed on the
// last iteration only, as a plain fit with a fixed iteration count does.
func Bench[W LocalWorker](ctx context.Context, storeDir string, workers, iters int, shards []*shard.Shard, man *shard.Manifest, md *factor.Model, start StartWorker[W]) (BenchResult, error) {
	iters = max(iters, 2)
	lc, err := StartLocalCluster(ctx, LocalClusterConfig{StoreDir: storeDir, Workers: workers}, start)
	if err != nil {
		return BenchResult{}, err
	}
	defer lc.Close()
	res := BenchResult{Workers: workers, Iterations: iters}
	_, err = coordinator.Fit(ctx, lc.Exec, shards, man, md.Clone(), coordinator.Options{
		Job:         fmt.Sprintf("bench-%d", time.Now().UnixNano()),
		Converger:   factor.Converger{MaxIter: iters},
		Checkpoint:  lc.Exec,
		MinWorkers:  workers,
		TaskTimeout: 5 * time.Minute,
		Report:      func(r coordinator.IterReport) { res.Reports = append(res.Reports, r) },
	})
	if err != nil {
		return res, err
	}
	var wall time.Duration
	var bytes int64
	walls := make([]time.Duration, 0, len(res.Reports)-1)
	for _, r := range res.Reports[1:] {
		wall += r.Wall
		bytes += r.Bytes
		walls = append(walls, r.Wall)
	}
	slices.Sort(walls)
	res.MedianSecondsPerIter = walls[len(walls)/2].Seconds()
	ph := &res.Phases
	for _, f := range []struct {
		dst *time.Duration
		get func(coordinator.IterReport) time.Duration
	}{
		{&ph.Wall, func(r coordinator.IterReport) time.Duration { return r.Wall }},
		{&ph.Compute, func(r coordinator.IterReport) time.Duration { return r.Compute }},
		{&ph.Transfer, func(r coordinator.IterReport) time.Duration { return r.Transfer }},
		{&ph.Reduce, func(r coordinator.IterReport) time.Duration { return r.Reduce }},
		{&ph.Commit, func(r coordinator.IterReport) time.Duration { return r.Commit }},
		{&ph.ModelFetch, func(r coordinator.IterReport) time.Duration { return r.ModelFetch }},
		{&ph.PartialEncode, func(r coordinator.IterReport) time.Duration { return r.PartialEncode }},
		{&ph.PartialFetch, func(r coordinator.IterReport) time.Duration { return r.PartialFetch }},
	} {
		ds := make([]time.Duration, 0, len(res.Reports)-1)
		for _, r := range res.Reports[1:] {
			ds = append(ds, f.get(r))
		}
		slices.Sort(ds)
		*f.dst = ds[len(ds)/2]
	}
	n := float64(len(res.Reports) - 1)
	res.SecondsPerIter = wall.Seconds() / n
	res.BytesPerIter = float64(bytes) / n
	return res, nil
}
