package coordinator_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/emsf/emsf/coordinator"
	"github.com/emsf/emsf/coordinator/coordtest"
	"github.com/emsf/emsf/coordinator/natsexec"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
	"github.com/emsf/emsf/worker"
	"github.com/emsf/emsf/worker/wire"
)

// handedOut records the shards each iteration handed out (every
// attempt).
type handedOut struct {
	coordinator.Executor
	mu     sync.Mutex
	shards map[int][]int
}

func (h *handedOut) Submit(ctx context.Context, t wire.Task, deliver func(wire.Result)) {
	h.mu.Lock()
	h.shards[t.Iteration] = append(h.shards[t.Iteration], t.Shard)
	h.mu.Unlock()
	h.Executor.Submit(ctx, t, deliver)
}

// componentsCase is the data and the local fit of TestFitComponents:
// three actions unlike each other (their data, their spread), so that
// they stop apart; validation counts drawn alike.
type componentsCase struct {
	shards []*shard.Shard
	man    *shard.Manifest
	init   *factor.Model
	conv   factor.Converger
	prior  *factor.Prior
	rule   func() *factor.EarlyStop
	want   *factor.Model
	wres   factor.FitResult
	wantS  []factor.IterStats
	log    hclog.Logger
}

func newComponentsCase(t *testing.T) *componentsCase {
	t.Helper()
	const n, u = 200, 3
	draw := func(seed uint64, scale int) *shard.Counter {
		rng := rand.New(rand.NewPCG(seed, 5))
		var ct shard.Counter
		for a, nnz := range []int{3000, 800, 200} {
			for range nnz * scale / 10 {
				i := rng.IntN(n)
				if err := ct.Add(i, a, (i+rng.IntN(8*(a+1)))%n, 1); err != nil {
					t.Fatal(err)
				}
			}
		}
		return &ct
	}
	cc := &componentsCase{conv: factor.Converger{MaxIter: 300}, prior: &factor.Prior{D: factor.DefaultPriorD, K: factor.DefaultPriorK},
		log: hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: testWriter{t}})}
	cc.shards, cc.man = shard.Split(draw(7, 10).Matrices(u), n, 300)
	blocks := shard.Blocks(cc.shards)
	vs, _ := shard.Split(draw(8, 3).Matrices(u), n, 1<<20)
	val := shard.Blocks(vs)
	cc.init = factor.NewRandom(cc.man.N, 4, cc.man.U, factor.TieNone, 3)
	cc.rule = func() *factor.EarlyStop {
		v, err := factor.NewValidation(cc.man.N, cc.man.U, factor.TieNone, blocks, val)
		if err != nil {
			t.Fatal(err)
		}
		return v.EarlyStop(3, 1e-4, 1)
	}
	cc.want = cc.init.Clone()
	var err error
	cc.wres, err = factor.Fit(context.Background(), cc.want, blocks, factor.FitOptions{Accel: factor.AccelSquarem, Prior: cc.prior, EarlyStop: cc.rule(),
		Converger: cc.conv, GroupNNZ: testGroupNNZ, Workers: 2, Progress: func(s factor.IterStats) { cc.wantS = append(cc.wantS, s) }})
	if err != nil {
		t.Fatal(err)
	}
	cc.wres.Elapsed = 0
	return cc
}

// TestFitComponents: a cluster fit of a model without ties with SQUAREM,
// the prior and the held-out rule (each action its own fit, stopping at
// its own optimum) hands out, once an action stopped, only the shards of
// the actions still fitted, every shard of each; and its model, result
// and progress are bitwise factor.Fit's, also with a duplicated and a
// corrupted partial in an iteration that leaves an action out.
func TestFitComponents(t *testing.T) {
	cc := newComponentsCase(t)
	shards, man, conv, prior, rule, init := cc.shards, cc.man, cc.conv, cc.prior, cc.rule, cc.init
	want, wres, wantS := cc.want, cc.wres, cc.wantS
	action := func(k int) int { return shards[k].Block.Action }
	run := func(exec coordinator.Executor) (*handedOut, []coordinator.IterReport) {
		t.Helper()
		h := &handedOut{Executor: exec, shards: map[int][]int{}}
		md := init.Clone()
		var stats []factor.IterStats
		var reps []coordinator.IterReport
		ctx, cancel := context.WithTimeout(context.Background(), coordtest.Patience)
		defer cancel()
		res, err := coordinator.Fit(ctx, h, shards, man, md, coordinator.Options{Job: "components", GroupNNZ: testGroupNNZ,
			Converger: conv, TaskTimeout: time.Minute, Accel: factor.AccelSquarem, Prior: prior, EarlyStop: rule(),
			Progress: func(s factor.IterStats) { stats = append(stats, s) },
			Report:   func(r coordinator.IterReport) { reps = append(reps, r) },
			Logger:   hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: testWriter{t}})})
		if err != nil {
			t.Fatal(err)
		}
		res.Elapsed = 0
		if !md.Equal(want) || res != wres || md.Iteration != want.Iteration || md.LogLik != want.LogLik {
			t.Fatalf("cluster fit %+v differs from factor.Fit's %+v", res, wres)
		}
		if len(stats) != len(wantS) {
			t.Fatalf("%d progress calls, want %d", len(stats), len(wantS))
		}
		for k, s := range stats {
			w := wantS[k]
			s.IterTime, s.Elapsed, w.IterTime, w.Elapsed = 0, 0, 0, 0
			if s.Iteration != w.Iteration || s.LogLik != w.LogLik && !(s.LogLik != s.LogLik && w.LogLik != w.LogLik) || s.NNZ != w.NNZ || s.SumX != w.SumX {
				t.Fatalf("progress %d = %+v, want %+v", k, s, w)
			}
		}
		// Each iteration hands out every shard of the actions it fits, no
		// other; the actions fitted only shrink, and some action stopped
		// before the end.
		prev := []bool{true, true, true}
		fewer := false
		for it := 1; it <= res.Iterations; it++ {
			on := make([]bool, man.U)
			for _, k := range h.shards[it] {
				on[action(k)] = true
			}
			for k := range shards {
				if on[action(k)] && !slices.Contains(h.shards[it], k) {
					t.Fatalf("iteration %d fits action %d without its shard %d", it, action(k), k)
				}
			}
			for a := range on {
				if on[a] && !prev[a] {
					t.Fatalf("iteration %d fits action %d again after it stopped", it, a)
				}
			}
			fewer = fewer || slices.Contains(on, false)
			prev = on
		}
		if !fewer {
			t.Fatalf("every action ran all %d iterations: the test wants one to stop early", res.Iterations)
		}
		return h, reps
	}
	exec := worker.NewLocal(3)
	defer exec.Close()
	h, _ := run(exec)

	// Faults in the first iteration that leaves an action out, on two
	// neighbouring shards it hands out.
	it, dup := 0, -1
	for i := 1; it == 0; i++ {
		if len(h.shards[i]) < len(shards) {
			it = i
		}
	}
	for _, k := range h.shards[it] {
		if slices.Contains(h.shards[it], k+1) && action(k) == action(k+1) {
			dup = k
			break
		}
	}
	if dup < 0 {
		t.Fatalf("iteration %d hands out no two neighbouring shards", it)
	}
	bad := h.shards[it][len(h.shards[it])-1]
	f := &faulty{Executor: exec, dupIter: it, dupShard: dup, badIter: it, badShard: bad}
	_, reps := run(f)
	checkFaults(t, f, reps)
}

// TestResumeComponents: a cluster fit with SQUAREM, the prior and the
// held-out rule (one component per action) whose coordinator stops after
// iteration k, resumed by another coordinator from the checkpoint (the
// committed model and the loop state: the cycles' points, the best
// iterates, the rule's choices), ends bitwise where factor.Fit ends:
// model, result and the progress of every iteration after its last
// resume point (at most k). For k in a cycle's every phase, before and
// after an action stopped.
func TestResumeComponents(t *testing.T) {
	cc := newComponentsCase(t)
	s := startServer(t, 0)
	startWorkers(t, s, 2)
	stopped := 0 // the first iteration after which an action is out
	for k, st := range cc.wantS {
		if st.Running < st.Actions && stopped == 0 {
			stopped = k + 1
		}
	}
	if stopped == 0 || stopped+2 >= len(cc.wantS) {
		t.Fatalf("no action stops early (%d iterations, first stop after %d)", len(cc.wantS), stopped)
	}
	// A resume point at every commit: each k is one; then as the cost
	// allows.
	ks := []int{1, 2, 3, 7, stopped, stopped + 1, stopped + 2, -7, -(stopped + 2)}
	for _, k := range ks {
		every := -1.0
		if k < 0 {
			k, every = -k, 0
		}
		job := fmt.Sprintf("resume-components-%d-%v", k, every)
		a := newNATSExecConfig(t, s, natsexec.Config{ResumeEvery: every})
		if _, _, first, err := cc.fitResumable(a, job, k); err == nil || len(first) != k {
			t.Fatalf("k=%d: the first coordinator ran %d iterations (%v), want %d and an error", k, len(first), err, k)
		}
		a.Close() // its last commit stored
		md, res, second, err := cc.fitResumable(newNATSExecConfig(t, s, natsexec.Config{ResumeEvery: every}), job, -1)
		if err != nil {
			t.Fatalf("k=%d: resumed fit: %v", k, err)
		}
		// It goes on from its last resume point r <= k (natsexec takes
		// them as their cost allows; the first at iteration 1).
		if len(second) == 0 {
			t.Fatalf("k=%d: the resumed fit ran no iteration", k)
		}
		r := second[0].Iteration - 1
		if r < 1 || r > k || every < 0 && r != k || len(second) != len(cc.wantS)-r {
			t.Fatalf("k=%d: resumed after iteration %d and ran %d, want after 1..%d and the rest of %d", k, r, len(second), k, len(cc.wantS))
		}
		if !md.Equal(cc.want) || res != cc.wres || md.Iteration != cc.want.Iteration || md.LogLik != cc.want.LogLik {
			t.Fatalf("k=%d: resumed fit %+v differs from factor.Fit's %+v", k, res, cc.wres)
		}
		for j, s := range second {
			w := cc.wantS[r+j]
			if s.Iteration != w.Iteration || math.Float64bits(s.LogLik) != math.Float64bits(w.LogLik) ||
				math.Float64bits(s.HeldOut) != math.Float64bits(w.HeldOut) || s.Running != w.Running || s.HeldOutBest != w.HeldOutBest {
				t.Fatalf("k=%d: resumed progress %+v, want %+v", k, s, w)
			}
		}
	}
}

// TestResumeLostPoint: a resume point whose object is corrupt or gone
// (the cycle point overwritten, the best iterate deleted, the model
// overwritten), or whose loop state in the job record does not decode, is
// logged and the job starts afresh, ending bitwise at
// factor.Fit's model and result: no person needed.
func TestResumeLostPoint(t *testing.T) {
	cc := newComponentsCase(t)
	s := startServer(t, 0)
	startWorkers(t, s, 2)
	js, err := jetstream.New(connect(t, s, "vandal"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var obs jetstream.ObjectStore // the executors make the bucket
	const k = 7
	for _, c := range []struct {
		name string
		harm func(job string) error
	}{
		{"cycle overwritten", func(job string) error {
			_, err := obs.PutBytes(ctx, wire.ModelObject(job, k)+".cycle", []byte("not a model"))
			return err
		}},
		{"best deleted", func(job string) error { return obs.Delete(ctx, wire.ModelObject(job, k)+".best") }},
		{"model overwritten", func(job string) error {
			_, err := obs.PutBytes(ctx, wire.ModelObject(job, k), []byte("not a model either"))
			return err
		}},
		{"state garbled", func(job string) error {
			_, err := obs.PutBytes(ctx, wire.ModelObject(job, k)+".state", []byte("not a loop state"))
			return err
		}},
	} {
		job := "lost-" + strings.ReplaceAll(c.name, " ", "-")
		a := newNATSExecConfig(t, s, natsexec.Config{ResumeEvery: -1})
		if _, _, _, err := cc.fitResumable(a, job, k); err == nil {
			t.Fatalf("%s: the first coordinator did not stop", c.name)
		}
		a.Close()
		if obs == nil {
			if obs, err = js.ObjectStore(ctx, wire.DefaultObjectBucket); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.harm(job); err != nil {
			t.Fatal(err)
		}
		md, res, second, err := cc.fitResumable(newNATSExecConfig(t, s, natsexec.Config{ResumeEvery: -1}), job, -1)
		if err != nil {
			t.Fatalf("%s: resumed fit: %v", c.name, err)
		}
		if len(second) != len(cc.wantS) || second[0].Iteration != 1 {
			t.Fatalf("%s: the job ran %d iterations from %d, want all %d from 1", c.name, len(second), second[0].Iteration, len(cc.wantS))
		}
		if !md.Equal(cc.want) || res != cc.wres {
			t.Fatalf("%s: fit %+v differs from factor.Fit's %+v", c.name, res, cc.wres)
		}
	}
}

// fitResumable runs the case's cluster fit as job on exec, with resume
// points and Resume, stopping it (an error) after iteration stopAt.
func (cc *componentsCase) fitResumable(exec *natsexec.Executor, job string, stopAt int) (*factor.Model, factor.FitResult, []factor.IterStats, error) {
	md := cc.init.Clone()
	var stats []factor.IterStats
	ctx, cancel := context.WithTimeout(context.Background(), coordtest.Patience)
	defer cancel()
	res, err := coordinator.Fit(ctx, exec, cc.shards, cc.man, md, coordinator.Options{Job: job, GroupNNZ: testGroupNNZ,
		Converger: cc.conv, TaskTimeout: time.Minute, Accel: factor.AccelSquarem, Prior: cc.prior, EarlyStop: cc.rule(),
		Checkpoint: exec, SaveLoopState: true, Resume: true,
		Progress: func(s factor.IterStats) {
			stats = append(stats, s)
			if s.Iteration == stopAt {
				cancel() // the coordinator stops after committing stopAt
			}
		},
		Logger: cc.log})
	res.Elapsed = 0
	return md, res, stats, err
}
