package coordinator_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/emsf/emsf/coordinator"
	"github.com/emsf/emsf/coordinator/coordtest"
	"github.com/emsf/emsf/coordinator/natsexec"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
)

// MU under the wkl loss on NATS workers (they compute EMSF's partials;
// the coordinator commits with factor.MUCommit) ends bitwise where the
// local factor.MU ends, for every rule and tie mode, with 1 and 3
// workers: model, log-likelihood, WKL, iterations, objective, status,
// row deviation and every progress report; the job state records every
// iteration, and a job stopped after 2 iterations and resumed ends where
// the uninterrupted one does.
func TestFitNATSMU(t *testing.T) {
	shards, man := testData(t, 200, 2, 3000, 300)
	blocks := shard.Blocks(shards)
	conv := factor.Converger{Tol: 1e-12, MaxIter: 5}
	same := func(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) }
	// fit runs MU by rule from seed 3 on the cluster as job (resuming it
	// when resume) and returns the finished model, its result and row
	// deviation, and the progress reports.
	fit := func(t *testing.T, exec *natsexec.Executor, job string, tie factor.Tie, rule factor.MURule, conv factor.Converger, resume bool) (*factor.Model, factor.FitResult, float64, []factor.IterStats) {
		t.Helper()
		md := factor.NewRandom(man.N, 4, man.U, tie, 3)
		c, err := factor.NewMUCommit(md, blocks, rule)
		if err != nil {
			t.Fatal(err)
		}
		var stats []factor.IterStats
		ctx, cancel := context.WithTimeout(context.Background(), coordtest.Patience)
		defer cancel()
		res, err := coordinator.Fit(ctx, exec, shards, man, md, coordinator.Options{GroupNNZ: testGroupNNZ,
			Job: job, Converger: conv, Commit: c.Commit, TaskTimeout: time.Minute, Checkpoint: exec, Resume: resume,
			Progress: func(s factor.IterStats) { stats = append(stats, s) },
			Logger:   hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: testWriter{t}}),
		})
		if err != nil {
			t.Fatalf("job %s: %v", job, err)
		}
		dev, err := factor.MUFinish(md, blocks)
		if err != nil {
			t.Fatal(err)
		}
		return md, res, dev, stats
	}
	for _, workers := range []int{1, 3} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			s := startServer(t, 0)
			startWorkers(t, s, workers)
			exec := newNATSExec(t, s)
			waitCensus(t, exec, workers)
			for _, tie := range []factor.Tie{factor.TieNone, factor.TieSharedK, factor.TieSharedD} {
				for _, rule := range []factor.MURule{factor.MUNorm, factor.MURepa, factor.MURela} {
					name := fmt.Sprintf("mu-%v tie %v", rule, tie)
					var wantS []factor.IterStats
					want, wantR, err := factor.MU(context.Background(), man.N, 4, man.U, blocks, 3, factor.MUOptions{
						Rule: rule, Tie: tie, Workers: 2, GroupNNZ: testGroupNNZ, Converger: conv,
						Progress: func(s factor.IterStats) { wantS = append(wantS, s) }})
					if err != nil {
						t.Fatal(err)
					}
					job := fmt.Sprintf("mu-%v-%v", rule, tie)
					md, res, dev, gotS := fit(t, exec, job, tie, rule, conv, false)
					if !md.Equal(want) {
						t.Fatalf("%s: model differs from factor.MU's", name)
					}
					if res.Status != wantR.Status || res.Iterations != wantR.Iterations || !same(res.LogLik, wantR.Objective) ||
						!same(dev, wantR.MaxRowDeviation) || md.Iteration != want.Iteration ||
						!same(md.LogLik, want.LogLik) || !same(md.WKL, want.WKL) {
						t.Fatalf("%s: result %+v (row deviation %v, model iteration %d, loglik %v, WKL %v), want %+v (%d, %v, %v)",
							name, res, dev, md.Iteration, md.LogLik, md.WKL, wantR, want.Iteration, want.LogLik, want.WKL)
					}
					if len(gotS) != len(wantS) {
						t.Fatalf("%s: %d progress calls, want %d", name, len(gotS), len(wantS))
					}
					for k, s := range gotS {
						if w := wantS[k]; s.Iteration != w.Iteration || !same(s.LogLik, w.LogLik) || !same(s.RelChange, w.RelChange) {
							t.Fatalf("%s: progress %d = %+v, want %+v", name, k, s, w)
						}
					}
					st, _, err := exec.State(context.Background(), job)
					if err != nil {
						t.Fatal(err)
					}
					if st.Iteration != res.Iterations || st.Status != res.Status.String() {
						t.Errorf("%s: job state at iteration %d status %q, want %d %q", name, st.Iteration, st.Status, res.Iterations, res.Status)
					}
					if workers == 1 || tie != factor.TieNone {
						continue
					}
					// Stopped after 2 iterations, resumed to the end.
					short := conv
					short.MaxIter = 2
					fit(t, exec, job+"-resumed", tie, rule, short, true)
					md, res, _, gotS = fit(t, exec, job+"-resumed", tie, rule, conv, true)
					if len(gotS) != 3 || gotS[0].Iteration != 3 {
						t.Fatalf("%s: resumed fit ran iterations %v, want 3-5", name, gotS)
					}
					if !md.Equal(want) || res.Iterations != wantR.Iterations || !same(res.LogLik, wantR.Objective) || !same(md.LogLik, want.LogLik) {
						t.Fatalf("%s: resumed fit (%+v) differs from the uninterrupted one (%+v)", name, res, wantR)
					}
					for k, s := range gotS {
						if w := wantS[k+2]; !same(s.LogLik, w.LogLik) || !same(s.RelChange, w.RelChange) {
							t.Fatalf("%s: resumed progress %+v, want %+v", name, s, w)
						}
					}
				}
			}
		})
	}
}
