package natsexec_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/emsf/emsf/coordinator/natsexec"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
	"github.com/emsf/emsf/worker"
)

// BenchmarkClusterIteration times cluster iterations over loopback NATS
// with 1 and 2 in-process workers, on the workload of factor's
// BenchmarkIteration (default shards, and 1M-nonzero shards); it reports
// seconds and bytes per iteration.
func BenchmarkClusterIteration(b *testing.B) {
	for _, size := range []struct {
		name              string
		n, perRow, m, nnz int
	}{
		{"small", 2000, 50, 16, shard.DefaultTargetNNZ},
		{"medium", 20000, 100, 32, shard.DefaultTargetNNZ},
		// One shard per worker at 2 workers: a partial is ≈ (rows +
		// columns touched)·m·8 bytes whatever the shard's size, so fewer
		// shards move less.
		{"medium-shard1M", 20000, 100, 32, 1000000},
	} {
		mats := factor.RandomCounts(size.n, 1, size.perRow, 5, 1)
		shards, man := shard.Split(mats, size.n, size.nnz)
		md := factor.NewRandom(size.n, size.m, 1, factor.TieNone, 1)
		for _, workers := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/workers=%d", size.name, workers), func(b *testing.B) {
				var sec, bytes float64
				for b.Loop() {
					res, err := natsexec.Bench(context.Background(), b.TempDir(), workers, 4, shards, man, md, worker.Starter(worker.Config{}))
					if err != nil {
						b.Fatal(err)
					}
					sec += res.SecondsPerIter
					bytes += res.BytesPerIter
				}
				b.ReportMetric(sec/float64(b.N), "s/iter")
				b.ReportMetric(bytes/float64(b.N), "B/iter")
			})
		}
	}
}
