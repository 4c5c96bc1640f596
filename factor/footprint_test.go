package factor

import (
	"math"
	"runtime"
	"testing"
)

// TestFootprintArithmetic: hand-computed footprints, and shapes whose
// products overflow int64 saturate instead of wrapping to small numbers.
func TestFootprintArithmetic(t *testing.T) {
	// n = 1000, m = 10, u = 3: a D and a K block per action.
	if got := ModelBytes(1000, 10, 3, TieNone); got != 8*1000*10*6 {
		t.Errorf("ModelBytes none: %d", got)
	}
	if got := ModelBytes(1000, 10, 3, TieSharedK); got != 8*1000*10*4 {
		t.Errorf("ModelBytes shared-k: %d", got)
	}
	fp := Footprint{N: 1000, M: 10, U: 3, Tie: TieNone}
	model := int64(8 * 1000 * 10 * 6)
	if got, want := fp.EMSF(1), 2*model+8*1000*3; got != want {
		t.Errorf("EMSF: %d, want %d", got, want)
	}
	if got, want := fp.EMSF(2), 3*model+8*1000*3; got != want {
		t.Errorf("EMSF with restarts: %d, want %d", got, want)
	}
	// 2^26 nonzeros in groups of 2^24: G = 4, two pending K̂ buffers per K block.
	fp.NNZ, fp.GroupNNZ = 1<<26, 1<<24
	if got, want := fp.EMSF(1), 2*model+8*1000*3+2*8*1000*10*3; got != want {
		t.Errorf("EMSF with 4 groups: %d, want %d", got, want)
	}
	// The default local fit: SQUAREM's three iterates, the logs of two
	// under a prior on D and K, the prior's next-state frequencies (n per
	// K block), the early stop's kept model.
	fp.NNZ, fp.GroupNNZ = 0, 0
	dk := int64(8 * 1000 * 10 * 3) // D or K
	fp.Squarem, fp.PriorD, fp.PriorK, fp.EarlyStop = true, true, true, true
	if got, want := fp.EMSF(1), 2*model+8*1000*3+3*model+2*dk+2*dk+8*1000*3+model; got != want {
		t.Errorf("EMSF with SQUAREM, priors and early stop: %d, want %d", got, want)
	}
	fp.PriorD, fp.PriorK, fp.EarlyStop = false, true, false
	if got, want := fp.EMSF(1), 2*model+8*1000*3+3*model+2*dk+8*1000*3; got != want {
		t.Errorf("EMSF with SQUAREM and a prior on K: %d, want %d", got, want)
	}
	fp.Squarem, fp.PriorK, fp.EarlyStop, fp.Float32 = false, false, true, true
	if got, want := fp.EMSF(1), 2*model+8*1000*3+dk/2+model+dk/2; got != want {
		t.Errorf("EMSF float32 with early stop: %d, want %d", got, want)
	}
	// KLM: rows without data are dense, 12 bytes an entry.
	k := Footprint{N: 100, M: 2, U: 2, Seen: []int{100, 40}}
	if got, want := k.KLM(), ModelBytes(100, 2, 2, TieNone)+8*100*2+2*8*100*2+12*60*100; got != want {
		t.Errorf("KLM: %d, want %d", got, want)
	}
	for _, f := range []Footprint{
		{N: math.MaxInt32, M: 1 << 30, U: 1 << 30},
		{N: 7405600, M: 1 << 40, U: 2049},
	} {
		for name, b := range map[string]int64{"model": f.Model(), "emsf": f.EMSF(3), "klm": f.KLM(), "cnt": f.CNT(),
			"mu": f.MU(LossFrob), "incremental": f.Incremental(1 << 20), "online EM": f.OnlineEM()} {
			if b != math.MaxInt64 && name != "cnt" {
				t.Errorf("%s of %+v: %d, want saturated", name, f, b)
			}
		}
	}
}

// TestFootprintCoversEMSF: the estimate of a batch EMSF fit is within 1 %
// of what its model and accumulator allocate (the arrays; the rest is
// headers and seeds).
func TestFootprintCoversEMSF(t *testing.T) {
	const n, m, u = 20_000, 16, 2
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	md := NewRandom(n, m, u, TieNone, 1)
	acc := NewAccumulator(md)
	runtime.ReadMemStats(&after)
	got := int64(after.TotalAlloc - before.TotalAlloc)
	est := Footprint{N: n, M: m, U: u}.EMSF(1)
	if est < got-got/100 || est > got+got/100 {
		t.Errorf("EMSF estimate %d bytes, the model and accumulator allocated %d", est, got)
	}
	runtime.KeepAlive(md)
	runtime.KeepAlive(acc)
}
