package natsexec_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/emsf/emsf/coordinator"
	"github.com/emsf/emsf/coordinator/natsexec"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
	"github.com/emsf/emsf/worker"
)

// A float32 fit on a local cluster (coordinator exchange, 1 and 3
// workers) is bitwise factor.Fit's float32 fit, and the workers derive
// their shards' rows of D (rounded as the commit rounds them: the task
// names the precision) instead of fetching them.
func TestFitFloat32Cluster(t *testing.T) {
	const n, m = 300, 8
	mats := factor.RandomCounts(n, 2, 12, 4, 3)
	shards, man := shard.Split(mats, n, 700)
	md0 := factor.NewRandom(n, m, 2, factor.TieNone, 5)
	md0.SetPrecision(factor.Float32)
	const iters = 5
	want := md0.Clone()
	if _, err := factor.Fit(context.Background(), want, shard.Blocks(shards), factor.FitOptions{Workers: 2,
		Converger: factor.Converger{MaxIter: iters}}); err != nil {
		t.Fatal(err)
	}
	for _, workers := range []int{1, 3} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			ctx := context.Background()
			lc, err := natsexec.StartLocalCluster(ctx, natsexec.LocalClusterConfig{StoreDir: t.TempDir(), Workers: workers, InProcess: true}, worker.Starter(worker.Config{}))
			if err != nil {
				t.Fatal(err)
			}
			defer lc.Close()
			got := md0.Clone()
			if _, err := coordinator.Fit(ctx, lc.Exec, shards, man, got, coordinator.Options{
				Job: "f32", Converger: factor.Converger{MaxIter: iters}, Checkpoint: lc.Exec,
				MinWorkers: workers, TaskTimeout: time.Minute,
			}); err != nil {
				t.Fatal(err)
			}
			if !got.Equal(want) || got.LogLik != want.LogLik {
				t.Fatalf("cluster float32 model differs from factor.Fit's (loglik %.17g vs %.17g)", got.LogLik, want.LogLik)
			}
			var derived int64
			for _, w := range lc.Workers {
				derived += w.Stats().DerivedRows
			}
			if want := int64((iters - 1) * len(shards)); derived < want/2 {
				t.Errorf("workers derived the rows of D of %d tasks, want about %d", derived, want)
			}
		})
	}
}
