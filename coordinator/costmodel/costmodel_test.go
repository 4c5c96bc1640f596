package costmodel

import (
	"math"
	"strconv"
	"testing"
)

// target is the spec's workload (specs/scale-out.md §5.5): n = 10^7,
// m = 32, u = 10, η = 10^10, float64.
var target = Workload{N: 10_000_000, M: 32, U: 10, NNZ: 1e10}

// lineRate is the §5.5 table's calibration: times are bytes/B at line
// rate, c = 32 cores, t = 10 ns per nonzero.
func lineRate(gbit float64) Calibration {
	return Calibration{NsPerNNZ: 10, Cores: 32, LinkBytesPerSec: GbitPerSec(gbit)}
}

// near says whether got rounds to want at the spec's printed precision
// (want's last digit ± half a unit, or 1% when the spec rounds harder).
func near(got, want, unit float64) bool {
	return math.Abs(got-want) <= math.Max(unit/2, 0.01*math.Abs(want))
}

// TestSpecTable pins every line of the §5.5 table: per node bytes, the
// coordinator's bytes and T_comm at 10 and 100 Gbit/s (GB = 1e9 bytes).
func TestSpecTable(t *testing.T) {
	const gb = 1e9
	for _, c := range []struct {
		p        int
		d        Design
		w        Workload
		in, out  float64 // per node, GB
		cIn, cOn float64 // coordinator, GB (0: not checked beyond < 0.01)
		t10      float64 // T_comm at 10 Gbit/s, s
		unit     float64 // printed precision of the bytes
	}{
		{8, StarA, target, 25.6, 28.8, 230, 205, 184, 0.1},
		{8, OwnersSpread, target, 44.8, 44.8, 0, 0, 36, 0.1},
		{8, OwnersGrouped, target, 0, 0, 0, 0, 0, 0.1},
		{8, GridSpread, target, 25.6, 25.6, 0, 0, 20, 0.1},
		{16, StarA, target, 25.6, 27.2, 434, 410, 348, 0.1},
		{16, OwnersSpread, target, 47.9, 47.9, 0, 0, 38, 0.1},
		{16, OwnersGrouped, target, 1.9, 1.9, 0, 0, 1.5, 0.1},
		{16, GridSpread, target, 19.2, 19.2, 0, 0, 15, 0.1},
		{64, StarA, target, 25.6, 20.6, 1321, 1638, 1311, 1},
		{64, OwnersSpread, target, 39.8, 39.8, 0, 0, 32, 0.1},
		{64, OwnersGrouped, target, 4.3, 4.3, 0, 0, 3.5, 0.1},
		{64, OwnersSpread, Workload{N: target.N, M: 32, U: 10, NNZ: 1e10, SharedK: true}, 5.0, 5.0, 0, 0, 4.0, 0.1},
		{64, OwnersSpread, Workload{N: target.N, M: 32, U: 10, NNZ: 1e10, TouchedFraction: 2.0 / 64}, 1.6, 1.6, 0, 0, 1.3, 0.1},
		{64, GridSpread, target, 11.2, 11.2, 0, 0, 9.0, 0.1},
		{64, GridGrouped, target, 2.6, 2.6, 0, 0, 2.0, 0.1},
		{256, StarA, target, 25.6, 8.4, 2145, 6554, 5243, 1},
		{256, OwnersSpread, target, 16.5, 16.5, 0, 0, 13, 0.1},
		{256, OwnersGrouped, target, 4.8, 4.8, 0, 0, 3.9, 0.1},
		{256, GridSpread, target, 6.0, 6.0, 0, 0, 4.8, 0.1},
		{256, GridGrouped, target, 1.6, 1.6, 0, 0, 1.3, 0.1},
	} {
		// The spec's T_comm for A is max(in, out)/B: the bound with the
		// two directions overlapped. Evaluate it here as the spec does.
		e, err := Evaluate(c.w, c.d, c.p, lineRate(10))
		if err != nil {
			t.Fatalf("P=%d %v: %v", c.p, c.d, err)
		}
		name := func() string { return c.d.String() + " P=" + strconv.Itoa(c.p) }
		if !near(e.NodeIn/gb, c.in, c.unit) || !near(e.NodeOut/gb, c.out, c.unit) {
			t.Errorf("%s: per node in/out %.2f/%.2f GB, spec %.1f/%.1f", name(), e.NodeIn/gb, e.NodeOut/gb, c.in, c.out)
		}
		if c.cIn > 0 {
			if !near(e.CoordIn/gb, c.cIn, 1) || !near(e.CoordOut/gb, c.cOn, 1) {
				t.Errorf("%s: coordinator in/out %.1f/%.1f GB, spec %.0f/%.0f", name(), e.CoordIn/gb, e.CoordOut/gb, c.cIn, c.cOn)
			}
		} else if e.CoordIn > 0.004*gb || e.CoordOut > 0.004*gb {
			t.Errorf("%s: coordinator in/out %.4f/%.4f GB, spec ~0.001-0.003", name(), e.CoordIn/gb, e.CoordOut/gb)
		}
		wire := math.Max(e.NodeIn, e.NodeOut)
		if c.d == StarA {
			wire = math.Max(e.CoordIn, e.CoordOut)
		}
		t10 := wire / GbitPerSec(10)
		if !near(t10, c.t10, 1) && !near(t10, c.t10, 0.1) {
			t.Errorf("%s: T_comm@10G %.2f s, spec %.1f", name(), t10, c.t10)
		}
		if c.d != StarA && !near(e.TComm, t10, 0.01) {
			t.Errorf("%s: TComm %.3f s at line rate, want bytes/B = %.3f", name(), e.TComm, t10)
		}
	}
}

// TestSpecCompute pins T_comp (0.39/0.20/0.049/0.012 s at 10 ns, 7.8/3.9/
// 0.98/0.24 s at 200 ns), f_a spread (1.00/1.00/0.79/0.32) and the
// grouped P = 8 imbalance (two actions on some nodes: 0.63 s).
func TestSpecCompute(t *testing.T) {
	for k, p := range []int{8, 16, 64, 256} {
		for _, c := range []struct {
			ns   float64
			want []float64
		}{{10, []float64{0.39, 0.20, 0.049, 0.012}}, {200, []float64{7.8, 3.9, 0.98, 0.24}}} {
			cal := lineRate(10)
			cal.NsPerNNZ = c.ns
			e, err := Evaluate(target, OwnersSpread, p, cal)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(e.TComp-c.want[k])/c.want[k] > 0.03 {
				t.Errorf("P=%d t=%v ns: T_comp %.4f s, spec %v", p, c.ns, e.TComp, c.want[k])
			}
			if e.TIter != math.Max(e.TComp, e.TComm) {
				t.Errorf("P=%d: B's T_iter %v, want max(T_comp, T_comm) = %v (no RTT set)", p, e.TIter, math.Max(e.TComp, e.TComm))
			}
		}
		e, _ := Evaluate(target, StarA, p, lineRate(10))
		if f := []float64{1.00, 1.00, 0.79, 0.32}[k]; math.Abs(e.F-f) > 0.005 {
			t.Errorf("P=%d: f_a %.3f, spec %.2f", p, e.F, f)
		}
	}
	e, _ := Evaluate(target, OwnersGrouped, 8, lineRate(10))
	if math.Abs(e.TComp-0.625) > 0.001 || e.NodeIn != e.CoordOut/8 {
		t.Errorf("grouped P=8: T_comp %v s and %v bytes in, want 0.625 s (2 actions on a node) and only the coordinator's messages", e.TComp, e.NodeIn)
	}
}

// TestGoal is the goal: under 60 s per iteration at P = 64 on
// 10 Gbit/s for B, ≈ 1300 s for A; A grows with P, B does not.
func TestGoal(t *testing.T) {
	cal := lineRate(10)
	a, _ := Evaluate(target, StarA, 64, cal)
	b, _ := Evaluate(target, OwnersSpread, 64, cal)
	g, _ := Evaluate(target, OwnersGrouped, 64, cal)
	if b.TIter >= 60 || g.TIter >= 60 {
		t.Errorf("B at P=64, 10G: spread %.1f s, grouped %.1f s; the goal is < 60 s", b.TIter, g.TIter)
	}
	if a.TIter < 1300 {
		t.Errorf("A at P=64, 10G: %.0f s; the spec's bound is ≈ 1300 s and today's sequential phases only add", a.TIter)
	}
	a8, _ := Evaluate(target, StarA, 8, cal)
	b8, _ := Evaluate(target, OwnersSpread, 8, cal)
	if a.CoordOut != 8*a8.CoordOut {
		t.Errorf("A's coordinator out: %v at P=64, %v at P=8: want ∝ P", a.CoordOut, a8.CoordOut)
	}
	if b.NodeIn > b8.NodeIn {
		t.Errorf("B spread per node: %v at P=64 > %v at P=8", b.NodeIn, b8.NodeIn)
	}
	// B's coordinator bytes do not depend on n.
	big := target
	big.N *= 4
	b4, _ := Evaluate(big, OwnersSpread, 64, cal)
	if b4.CoordIn != b.CoordIn || b4.CoordOut != b.CoordOut {
		t.Errorf("B coordinator bytes change with n: %v/%v vs %v/%v", b4.CoordIn, b4.CoordOut, b.CoordIn, b.CoordOut)
	}
}

// TestTransfer checks the transfer term: link-bound, CPU-bound, and the
// round trips of a windowed chunked pull.
func TestTransfer(t *testing.T) {
	c := Calibration{NsPerNNZ: 1, Cores: 1, LinkBytesPerSec: 1e6}
	if got := c.transfer(2e6, 1e6); got != 2 {
		t.Errorf("link-bound: %v s, want 2", got)
	}
	c.CPUPerByte = 2e-6 // 0.5 MB/s per connection
	if got := c.transfer(2e6, 1e6); got != 4 {
		t.Errorf("CPU-bound, 1 connection: %v s, want 4", got)
	}
	c.Conns = 4
	if got := c.transfer(2e6, 1e6); got != 2 {
		t.Errorf("CPU spread over 4 connections: %v s, want 2 (link-bound)", got)
	}
	c.RTT, c.ChunkBytes, c.Window = 0.01, 1e5, 4
	if got := c.transfer(2e6, 1e6); math.Abs(got-2.05) > 1e-9 {
		t.Errorf("20 chunks, window 4, RTT 10 ms: %v s, want 2.05", got)
	}
	if got := c.transfer(0, 1e6); got != 0 {
		t.Errorf("nothing to move: %v s", got)
	}
}

func TestValidate(t *testing.T) {
	cal := lineRate(10)
	for _, w := range []Workload{{N: 0, M: 1, U: 1, NNZ: 1}, {N: 1, M: 0, U: 1, NNZ: 1}, {N: 1, M: 1, U: 0, NNZ: 1},
		{N: 1, M: 1, U: 1, NNZ: math.NaN()}, {N: 1, M: 1, U: 1, NNZ: 1, TouchedFraction: 2}} {
		if _, err := Evaluate(w, StarA, 1, cal); err == nil {
			t.Errorf("%+v: no error", w)
		}
	}
	for _, c := range []Calibration{{Cores: 0, LinkBytesPerSec: 1}, {Cores: 1}, {Cores: 1, LinkBytesPerSec: 1, RTT: -1},
		{NsPerNNZ: math.NaN(), Cores: 1, LinkBytesPerSec: 1}} {
		if _, err := Evaluate(target, StarA, 1, c); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
	if _, err := Evaluate(target, StarA, 0, cal); err == nil {
		t.Error("P = 0: no error")
	}
	if _, err := Evaluate(target, Design(99), 4, cal); err == nil {
		t.Error("unknown design: no error")
	}
}

// TestOwnersCoordBytes pins the fitted owners protocol against the
// coordinator_bytes emsf counted (mean of iterations 3-5) in embedded
// fits at n = 2000 (docs/scaling.md §7.3): u, m, workers, shards, column
// blocks per K block, owners, (owner, K block) pairs, bytes.
func TestOwnersCoordBytes(t *testing.T) {
	// docs/scaling/owners-coordfit-v2.txt: u, m, workers, shards, column
	// blocks, owners, (owner, K block) pairs, measured bytes.
	for _, c := range []struct{ u, m, w, s, cb, o, q, bytes int }{
		{2, 32, 1, 2, 8, 1, 2, 7597}, {2, 32, 2, 2, 8, 2, 2, 7928}, {2, 32, 4, 4, 8, 4, 4, 12202},
		{2, 32, 4, 8, 8, 4, 4, 16709}, {2, 32, 2, 8, 8, 2, 2, 14820}, {2, 32, 2, 2, 32, 2, 2, 7934},
		{2, 32, 4, 4, 1, 4, 2, 10967}, {2, 32, 4, 4, 32, 4, 4, 12206}, {2, 32, 8, 8, 8, 8, 8, 20468},
		{2, 32, 8, 16, 8, 8, 8, 29995}, {2, 32, 8, 32, 8, 8, 8, 49072}, {2, 32, 3, 6, 4, 3, 3, 13483},
		{2, 16, 4, 4, 8, 4, 4, 8567}, {2, 64, 4, 4, 8, 4, 4, 19252}, {2, 64, 8, 16, 16, 8, 8, 47055},
		{2, 16, 2, 16, 4, 2, 2, 17658}, {4, 32, 4, 4, 8, 4, 4, 14554}, {4, 32, 8, 16, 8, 8, 8, 32116},
		{4, 32, 2, 8, 2, 2, 4, 18635}, {1, 32, 1, 1, 8, 1, 1, 4631}, {1, 32, 2, 2, 8, 2, 2, 6776},
		{1, 32, 4, 4, 8, 4, 4, 10912}, {1, 32, 8, 8, 8, 8, 8, 19415},
	} {
		got := OwnersCoordBytes(c.m, c.s, c.o, c.q, c.u)
		if math.Abs(got/float64(c.bytes)-1) > 0.015 {
			t.Errorf("u = %d, m = %d, %d workers, %d shards, %d column blocks: model %.0f bytes, measured %d", c.u, c.m, c.w, c.s, c.cb, got, c.bytes)
		}
	}
	// Through Evaluate: n does not enter, shards and column blocks do.
	w := Workload{N: 2000, M: 32, U: 2, NNZ: 160000, Shards: 8, ColBlocks: 8}
	small, err := Evaluate(w, OwnersGrouped, 8, lineRate(10))
	if err != nil {
		t.Fatal(err)
	}
	w.N, w.NNZ = 8000, 640000
	big, err := Evaluate(w, OwnersGrouped, 8, lineRate(10))
	if err != nil {
		t.Fatal(err)
	}
	if small.CoordIn+small.CoordOut != big.CoordIn+big.CoordOut || math.Abs((small.CoordIn+small.CoordOut)/20468-1) > 0.015 {
		t.Errorf("coordinator bytes at n = 2000 / 8000: %.0f / %.0f, want equal and ≈ 20468", small.CoordIn+small.CoordOut, big.CoordIn+big.CoordOut)
	}
	// The column blocks change only the (owner, K block) pairs: every
	// worker with a shard owns row groups. 1 column block per K block at
	// P = 4: 10967 bytes measured, 32: 12206.
	w.Shards, w.ColBlocks = 4, 1
	one, err := Evaluate(w, OwnersGrouped, 4, lineRate(10))
	if err != nil {
		t.Fatal(err)
	}
	w.ColBlocks = 32
	many, err := Evaluate(w, OwnersGrouped, 4, lineRate(10))
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs((one.CoordIn+one.CoordOut)/10967-1) > 0.015 || math.Abs((many.CoordIn+many.CoordOut)/12206-1) > 0.015 {
		t.Errorf("P = 4, 4 shards, 1 / 32 column blocks: model %.0f / %.0f bytes, measured 10967 / 12206", one.CoordIn+one.CoordOut, many.CoordIn+many.CoordOut)
	}
	if DefaultColBlocks(2000, 32) != 1 || DefaultColBlocks(10_000_000, 32) != 611 || DefaultColBlocks(100_000_000, 32) != 1024 {
		t.Errorf("DefaultColBlocks: %d %d %d", DefaultColBlocks(2000, 32), DefaultColBlocks(10_000_000, 32), DefaultColBlocks(100_000_000, 32))
	}
}

// TestOwnersShardsAndSerial: k shards of a K block on one node each
// gather and send their own slice, and Serial adds transfer and compute.
func TestOwnersShardsAndSerial(t *testing.T) {
	w := Workload{N: 1000, M: 32, U: 2, NNZ: 1e6, ColExtra: 4}
	one, err := Evaluate(w, OwnersGrouped, 8, lineRate(1))
	if err != nil {
		t.Fatal(err)
	}
	// P_a = 4, f = 1: 2·(3/4)·n·(m·s + 4) per node, and 1/P of the
	// coordinator's messages.
	if want := 2*0.75*1000*(256+4.0) + one.CoordOut/8; math.Abs(one.NodeIn-want) > 1e-6*want {
		t.Errorf("one shard per node: %.0f bytes in, want %.0f", one.NodeIn, want)
	}
	w.Shards = 16
	two, err := Evaluate(w, OwnersGrouped, 8, lineRate(1))
	if err != nil {
		t.Fatal(err)
	}
	if ctl := one.CoordOut / 8; math.Abs((two.NodeIn-ctl)/(one.NodeIn-ctl)-2) > 1e-9 {
		t.Errorf("two shards per node: %.0f bytes in, want 2 × %.0f", two.NodeIn, one.NodeIn)
	}
	c := lineRate(1)
	c.Serial = true
	ser, err := Evaluate(w, OwnersGrouped, 8, c)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(ser.TIter-(ser.TComm+ser.TComp+ser.TSync)) > 1e-12 || !(ser.TIter > two.TIter) {
		t.Errorf("serial: T_iter %g, want T_comm %g + T_comp %g (> overlapped %g)", ser.TIter, ser.TComm, ser.TComp, two.TIter)
	}
}

// TestGridAsBuilt pins design C as built by hand: n = 2000, m = 32, f = 1,
// one action on 4 nodes with 2 column cells is a 2 × 2 grid, and a node
// moves (1 − 1/2)·(2000/2)·(2·256 + 16) + (1 − 1/2)·(2000/2)·(2·256 + 8)
// = 524 000 bytes each way between nodes, plus its share of the
// coordinator's; 8 nodes form 4 × 2: (1 − 1/2)·500·528 + (1 − 1/4)·1000·520
// = 522 000; 16 nodes with 4 cells, 4 × 4, less.
func TestGridAsBuilt(t *testing.T) {
	w := Workload{N: 2000, M: 32, U: 1, NNZ: 80000, TouchedFraction: 1, ColExtra: 4, ColCells: 2, ColBlocks: 8}
	between := func(p int) float64 {
		e, err := Evaluate(w, GridGrouped, p, lineRate(10))
		if err != nil {
			t.Fatal(err)
		}
		return e.NodeIn - e.CoordOut/float64(p)
	}
	if got := between(4); math.Abs(got-524000) > 1e-6 {
		t.Errorf("2 × 2: %.1f bytes between nodes, want 524000", got)
	}
	if got := between(8); math.Abs(got-522000) > 1e-6 {
		t.Errorf("4 × 2: %.1f bytes between nodes, want 522000", got)
	}
	w.ColCells = 4
	if got, want := between(16), 0.75*500*528+0.75*500*520; math.Abs(got-want) > 1e-6 {
		t.Errorf("4 × 4: %.1f bytes between nodes, want %.1f", got, want)
	}
	for _, c := range []struct{ p, q, want int }{{4, 2, 2}, {8, 2, 2}, {16, 4, 4}, {6, 3, 2}, {2, 4, 1}} {
		if got := GridCols(c.p, c.q); got != c.want {
			t.Errorf("GridCols(%d, %d) = %d, want %d", c.p, c.q, got, c.want)
		}
	}
}
