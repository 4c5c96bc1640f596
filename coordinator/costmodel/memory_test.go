package costmodel

import (
	"math"
	"testing"

	"github.com/emsf/emsf/factor"
)

// TestMemoryParts: the memory model's parts on a small workload, by hand
// (n = 1000, m = 4, u = 2, η = 20 000, shards of 1000 nonzeros, one
// column cell, GOGC 25, 35 MB base, 16 MB buffers, 5 tasks' slices, one
// column block).
func TestMemoryParts(t *testing.T) {
	w := Workload{N: 1000, M: 4, U: 2, NNZ: 20000}
	c := MemCalibration{ShardNNZ: 1000}
	for _, p := range []int{1, 4} {
		e, err := Memory(w, p, c)
		if err != nil {
			t.Fatal(err)
		}
		P := float64(p)
		// A row range of 1000 nonzeros: 100 rows (10 per row and action);
		// its columns: n·f(1000, n).
		cs := 1000 * (1 - math.Exp(-1))
		rs := 100.0
		shards := 20000 / P / 1000
		want := map[string][2]float64{
			"shards": {e.Shards, 12*20000/P + 12*shards*cs + 8*shards*rs},
			"owned":  {e.Owned, (2*4*1000*4*8 + 2*1000*8) / P},
			"task":   {e.Task, 2*4*8*(cs+rs) + 8*1000},
			"slices": {e.Slices, (5*((4*8+4)*cs+(4*8+12)*rs) + 4*(4*8+4)*cs) * (1 - 1/P)},
		}
		heap := e.Shards + e.Owned + e.Task + e.Slices + 16e6
		want["headroom"] = [2]float64{e.Headroom, 0.25 * heap}
		want["worker"] = [2]float64{e.Worker, 1.25*heap + 35e6}
		for name, v := range want {
			if math.Abs(v[0]-v[1]) > 1e-6*math.Abs(v[1]) {
				t.Errorf("P = %d: %s = %g, want %g", p, name, v[0], v[1])
			}
		}
		if p == 1 && e.Slices != 0 {
			t.Errorf("one worker holds %g bytes of slices, want none (it folds them at its tasks)", e.Slices)
		}
	}
}

// TestMemoryFallsWithP: the data- and model-sized parts divide by P; the
// running task's and the base do not.
func TestMemoryFallsWithP(t *testing.T) {
	w := Workload{N: 10_000_000, M: 32, U: 10, NNZ: 1e10}
	prev := math.Inf(1)
	for _, p := range []int{1, 2, 8, 64, 256} {
		e, err := Memory(w, p, MemCalibration{})
		if err != nil {
			t.Fatal(err)
		}
		if !(e.Worker < prev) {
			t.Errorf("P = %d: %g bytes per worker, not below P/2's %g", p, e.Worker, prev)
		}
		prev = e.Worker
		e1, _ := Memory(w, 1, MemCalibration{})
		if r := e1.Owned / e.Owned; math.Abs(r-float64(p)) > 1e-9*float64(p) {
			t.Errorf("P = %d: owned parts %g, 1/%g of one worker's", p, e.Owned, r)
		}
		if e.Coordinator > 100e6 {
			t.Errorf("P = %d: the target coordinator holds %g bytes", p, e.Coordinator)
		}
	}
	if _, err := Memory(w, 0, MemCalibration{}); err == nil {
		t.Error("P = 0 accepted")
	}
	if _, err := Memory(w, 2, MemCalibration{GOGC: -1}); err == nil {
		t.Error("GOGC -1 accepted")
	}
}

// TestMemoryReductionTree: a K block of more than GroupNNZ nonzeros adds
// ⌊log2 G⌋ of its owned share for the reduction tree's pending sums (G
// groups): none at G = 1, one at G = 2 and 3, two at G = 4.
func TestMemoryReductionTree(t *testing.T) {
	w := Workload{N: 1000, M: 4, U: 2, NNZ: 20000}
	base, err := Memory(w, 4, MemCalibration{ShardNNZ: 1000, GroupNNZ: 10000})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		groupNNZ float64
		trees    float64
	}{{10000, 0}, {5000, 1}, {4000, 1}, {2500, 2}} {
		e, err := Memory(w, 4, MemCalibration{ShardNNZ: 1000, GroupNNZ: c.groupNNZ})
		if err != nil {
			t.Fatal(err)
		}
		// Two K blocks of 1000·4 values, 8 bytes each, a quarter owned.
		if got, want := e.Owned-base.Owned, c.trees*2*1000*4*8/4; math.Abs(got-want) > 1e-9 {
			t.Errorf("group nonzeros %g (G = %g per K block): the tree adds %g bytes, want %g", c.groupNNZ, math.Ceil(10000/c.groupNNZ), got, want)
		}
	}
	if got := (MemCalibration{}).withDefaults().GroupNNZ; got != factor.DefaultGroupNNZ {
		t.Errorf("default GroupNNZ %g, want emsf fit's %d", got, factor.DefaultGroupNNZ)
	}
	if _, err := Memory(w, 4, MemCalibration{GroupNNZ: -1}); err == nil {
		t.Error("a negative GroupNNZ was accepted")
	}
}
