package coordinator_test

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/emsf/emsf/coordinator"
	"github.com/emsf/emsf/coordinator/coordtest"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
	"github.com/emsf/emsf/worker"
	"github.com/emsf/emsf/worker/wire"
)

// testData returns a small random data set: n states, u actions, about
// nnz nonzeros with integer and fractional counts, split into shards of
// about target nonzeros.
func testData(t testing.TB, n, u, nnz, target int) ([]*shard.Shard, *shard.Manifest) {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, 11))
	var ct shard.Counter
	for range nnz {
		i, a := rng.IntN(n), rng.IntN(u)
		// Locality: most next states near i, so shards touch few columns.
		j := (i + rng.IntN(20)) % n
		c := 1.0
		if rng.IntN(4) == 0 {
			c = 0.25 + rng.Float64()
		}
		if err := ct.Add(i, a, j, c); err != nil {
			t.Fatal(err)
		}
	}
	shards, man := shard.Split(ct.Matrices(u), n, target)
	if len(shards) < 6 {
		t.Fatalf("test data has %d shards, want several", len(shards))
	}
	return shards, man
}

// testGroupNNZ is the reduction group size of the tests' fits: about 1500
// nonzeros per action make trees of 8 groups (some empty) over 5 shards,
// so that the canonical order is a real tree.
const testGroupNNZ = 200

// fitCase is one fit configuration and its local reference.
type fitCase struct {
	shards []*shard.Shard
	man    *shard.Manifest
	init   *factor.Model
	conv   factor.Converger
	want   *factor.Model
	wantR  factor.FitResult
	wantS  []factor.IterStats
}

func newFitCase(t testing.TB) *fitCase { return newFitCaseTie(t, factor.TieNone) }

func newFitCaseTie(t testing.TB, tie factor.Tie) *fitCase {
	shards, man := testData(t, 200, 2, 3000, 300)
	fc := &fitCase{shards: shards, man: man, init: factor.NewRandom(man.N, 4, man.U, tie, 3),
		conv: factor.Converger{Tol: 1e-12, MaxIter: 5}}
	fc.want = fc.init.Clone()
	opts := factor.FitOptions{Workers: 3, GroupNNZ: testGroupNNZ, Converger: fc.conv, Progress: func(s factor.IterStats) { fc.wantS = append(fc.wantS, s) }}
	var err error
	if fc.wantR, err = factor.Fit(context.Background(), fc.want, shard.Blocks(shards), opts); err != nil {
		t.Fatal(err)
	}
	return fc
}

// run fits with exec and checks that model, progress and result are
// bitwise those of factor.Fit.
func (fc *fitCase) run(t *testing.T, exec coordinator.Executor, ck coordinator.Checkpointer) []coordinator.IterReport {
	t.Helper()
	return fc.runWith(t, exec, ck, nil)
}

// runWith is run with the options changed by with (nil: none).
func (fc *fitCase) runWith(t *testing.T, exec coordinator.Executor, ck coordinator.Checkpointer, with func(*coordinator.Options)) []coordinator.IterReport {
	t.Helper()
	md := fc.init.Clone()
	var stats []factor.IterStats
	var reps []coordinator.IterReport
	// Deadlines no loaded machine reaches: a lease that ended early would
	// hand a task out again, which the NATS tests count as a fault.
	ctx, cancel := context.WithTimeout(context.Background(), coordtest.Patience)
	defer cancel()
	opts := coordinator.Options{GroupNNZ: testGroupNNZ,
		Job: "test-job", Converger: fc.conv, TaskTimeout: time.Minute, Checkpoint: ck,
		Progress: func(s factor.IterStats) { stats = append(stats, s) },
		Report:   func(r coordinator.IterReport) { reps = append(reps, r) },
		Logger:   hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: testWriter{t}}),
	}
	if with != nil {
		with(&opts)
	}
	res, err := coordinator.Fit(ctx, exec, fc.shards, fc.man, md, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !md.Equal(fc.want) {
		t.Fatal("model differs from factor.Fit's")
	}
	same := func(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) }
	if res.Status != fc.wantR.Status || res.Iterations != fc.wantR.Iterations || !same(res.LogLik, fc.wantR.LogLik) ||
		md.Iteration != fc.want.Iteration || !same(md.LogLik, fc.want.LogLik) || !same(md.WKL, fc.want.WKL) {
		t.Fatalf("result %+v (model iter %d loglik %v WKL %v), want %+v (%d, %v, %v)", res, md.Iteration, md.LogLik, md.WKL,
			fc.wantR, fc.want.Iteration, fc.want.LogLik, fc.want.WKL)
	}
	if len(stats) != len(fc.wantS) {
		t.Fatalf("%d progress calls, want %d", len(stats), len(fc.wantS))
	}
	for k, s := range stats {
		w := fc.wantS[k]
		if s.Iteration != w.Iteration || !same(s.LogLik, w.LogLik) || !same(s.RelChange, w.RelChange) || s.NNZ != w.NNZ || !same(s.SumX, w.SumX) {
			t.Fatalf("progress %d = %+v, want %+v", k, s, w)
		}
		if err := factor.CheckSumX(s.SumX, fc.man.Total); err != nil {
			t.Fatalf("iteration %d: %v", s.Iteration, err)
		}
	}
	return reps
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// faulty wraps an executor: it delivers the result of (dupIter, dupShard)
// a second time just before the result of shard dupShard+1 (which the
// coordinator needs, so it must read the duplicate), and corrupts the
// first result of (badIter, badShard) so that its Σx no longer matches
// the manifest.
type faulty struct {
	coordinator.Executor
	dupIter, dupShard int
	badIter, badShard int

	mu       sync.Mutex
	badDone  bool
	dupDone  bool
	dupSent  bool
	saved    chan wire.Result
	injected int
}

func (f *faulty) Submit(ctx context.Context, t wire.Task, deliver func(wire.Result)) {
	f.mu.Lock()
	if f.saved == nil {
		f.saved = make(chan wire.Result, 1)
	}
	f.mu.Unlock()
	f.Executor.Submit(ctx, t, func(r wire.Result) {
		f.mu.Lock()
		bad := t.Iteration == f.badIter && t.Shard == f.badShard && r.Err == nil && !f.badDone
		if bad {
			f.badDone = true
			f.injected++
		}
		keep := t.Iteration == f.dupIter && t.Shard == f.dupShard && r.Err == nil && !f.dupDone
		if keep {
			f.dupDone = true
		}
		dupBefore := t.Iteration == f.dupIter && t.Shard == f.dupShard+1 && r.Err == nil && !f.dupSent
		if dupBefore {
			f.dupSent = true
		}
		f.mu.Unlock()
		if bad {
			p := *r.Partial
			p.X = slices.Clone(p.X)
			p.X[0] += 1
			p.SumX += 1
			r.Partial = &p
		}
		if dupBefore {
			select {
			case d := <-f.saved:
				deliver(d)
				f.mu.Lock()
				f.injected++
				f.mu.Unlock()
			case <-ctx.Done():
			}
		}
		deliver(r)
		if keep {
			f.saved <- r
		}
	})
}

func checkFaults(t *testing.T, f *faulty, reps []coordinator.IterReport) {
	t.Helper()
	var dropped, rejected, retried int
	for _, r := range reps {
		dropped += r.Dropped
		rejected += r.Rejected
		retried += r.Retried
	}
	if f.injected < 2 || dropped < 1 || rejected != 1 || retried < 1 {
		t.Fatalf("injected %d faults; coordinator dropped %d, rejected %d, retried %d partials", f.injected, dropped, rejected, retried)
	}
}

func TestFitLocal(t *testing.T) {
	fc := newFitCase(t)
	for _, n := range []int{1, 3, 8} {
		exec := worker.NewLocal(n)
		fc.run(t, exec, nil)
		exec.Close()
	}
}

func TestFitLocalFaults(t *testing.T) {
	fc := newFitCase(t)
	exec := worker.NewLocal(2)
	defer exec.Close()
	f := &faulty{Executor: exec, dupIter: 1, dupShard: 2, badIter: 2, badShard: 3}
	checkFaults(t, f, fc.run(t, f, nil))
}
