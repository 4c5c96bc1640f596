package factor

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
)

// extrapPoints returns three points x0, x1, x2 of an n×m model with u
// actions, the entries of every kind extrapolate meets and some it
// should not: rows equal in all three (no data), zeros of x2 (zero or
// not in x0 and x1), entries equal in all three inside rows that differ,
// ties of the maximum, −0, a NaN (in a D row and a K column), and
// values whose proposal under- or overflows exp's range at large t.
func extrapPoints(n, m, u int, seed uint64) (x0, x1, x2 *Model) {
	r := rand.New(rand.NewPCG(seed, 3))
	x0 = NewRandom(n, m, u, TieNone, seed)
	x1, x2 = NewRandom(n, m, u, TieNone, seed+1), NewRandom(n, m, u, TieNone, seed+2)
	parts := func(md *Model) [][]float64 { return append(append([][]float64(nil), md.D...), md.KT...) }
	p0, p1, p2 := parts(x0), parts(x1), parts(x2)
	for b := range p0 {
		a0, a1, a2 := p0[b], p1[b], p2[b]
		for q := range a0 {
			switch r.IntN(40) {
			case 0:
				a2[q] = 0
			case 1:
				a0[q], a1[q], a2[q] = 0, 0, 0
			case 2:
				a0[q], a1[q] = a2[q], a2[q]
			case 3:
				a2[q] = 1e-300 // log far below the rest: exp underflows at large t
			case 4:
				a0[q] = 1e-300
			case 5:
				a2[q] = math.Copysign(0, -1)
			case 6:
				a2[q] = a2[q^1] // ties
			}
		}
		for i := range n {
			if r.IntN(10) == 0 { // a row equal in all three
				copy(a0[i*m:i*m+m], a2[i*m:i*m+m])
				copy(a1[i*m:i*m+m], a2[i*m:i*m+m])
			}
		}
	}
	// NaNs of x2 (masked out) and of x0 and x1 (a NaN proposal entry),
	// +Inf in x0 (an infinite maximum: NaN after its subtraction), a
	// negative x2 (a NaN logarithm, masked out).
	x2.D[0][5*m+3] = math.NaN()
	x1.KT[0][7*m+2] = math.NaN()
	x0.D[0][9*m+1] = math.NaN()
	x0.KT[0][11*m+4] = math.NaN()
	x0.D[0][13*m+6] = math.Inf(1)
	x0.KT[0][15*m+5] = math.Inf(1)
	x2.D[0][17*m+2], x2.KT[0][19*m+1] = -0.5, -0.5
	x2.KT[0][21*m+7] = math.NaN()
	// Masked-out NaN logarithms last in their row and in their column.
	x2.D[0][23*m+m-1], x2.KT[0][(n-1)*m+1] = -0.5, -0.5
	return x0, x1, x2
}

// sameModelBits reports the first entry where a and b differ in bits
// (NaNs of any payload alike), or "".
func sameModelBits(a, b *Model) (string, bool) {
	for bl := range a.D {
		for q := range a.D[bl] {
			if !sameFloat(a.D[bl][q], b.D[bl][q]) {
				return "D", false
			}
		}
	}
	for bl := range a.KT {
		for q := range a.KT[bl] {
			if !sameFloat(a.KT[bl][q], b.KT[bl][q]) {
				return "KT", false
			}
		}
	}
	return "", true
}

// TestExtrapolateKernelsBitwise: extrapolate with the AVX-512 kernels is
// bitwise its scalar loops, on points with every kind of entry (see
// extrapPoints), for several step lengths, with and without the
// prior's logarithms, on 1 and 3 goroutines, for m a multiple of 8 and
// not (the scalar loops both sides).
func TestExtrapolateKernelsBitwise(t *testing.T) {
	if !useExtrapAVX512() {
		t.Log("no AVX-512 on this machine (or -tags purego): the scalar loops on both sides")
	}
	for _, c := range []struct{ n, m, u int }{{700, 32, 2}, {1100, 8, 1}, {300, 24, 3}, {200, 12, 1}} {
		x0, x1, x2 := extrapPoints(c.n, c.m, c.u, uint64(c.n))
		p := &Prior{D: 0.5, K: 20}
		lg0, lg1 := p.newExtrapLogs(x0), p.newExtrapLogs(x1)
		for b := range x0.D {
			logAll(lg0.D[b], x0.D[b])
			logAll(lg1.D[b], x1.D[b])
		}
		for b := range x0.KT {
			logAll(lg0.KT[b], x0.KT[b])
			logAll(lg1.KT[b], x1.KT[b])
		}
		for _, step := range []float64{1.5, 4, 300, 3e5} {
			for _, workers := range []int{1, 3} {
				for _, lg := range [][2]*extrapLogs{{nil, nil}, {lg0, lg1}} {
					want, got := x0.Clone(), x0.Clone()
					extrap(want, x0, x1, x2, step, workers, lg[0], lg[1], false)
					extrap(got, x0, x1, x2, step, workers, lg[0], lg[1], useExtrapAVX512())
					if part, ok := sameModelBits(got, want); !ok {
						t.Fatalf("n=%d m=%d u=%d t=%v workers=%d logs=%v: %s differs from the scalar loops'",
							c.n, c.m, c.u, step, workers, lg[0] != nil, part)
					}
				}
			}
		}
	}
}

// TestMapCommitKernelsBitwise: mapCommit with the AVX-512 kernels is
// bitwise its scalar loops, in place and into another model, on data
// with rows without data and columns whose denominator y + K is 0 or
// negative (kept), on 1 and 3 goroutines, for m a multiple of 8 and not.
func TestMapCommitKernelsBitwise(t *testing.T) {
	if !useAVX512() {
		t.Log("no AVX-512 on this machine (or -tags purego): the scalar loops on both sides")
	}
	for _, m := range []int{8, 32, 12} {
		for _, p := range []*Prior{{D: 0.5, K: 20}, {D: 0.5}, {K: 20}} {
			for _, w := range []int{1, 3} {
				src, blocks := holeyData(chunkRows+700, 2, m, uint64(m))
				acc := NewAccumulator(src)
				if err := Pass(context.Background(), src, blocks, acc, 1, true); err != nil {
					t.Fatal(err)
				}
				for b := range acc.Y {
					acc.Y[b][1], acc.Y[b][2] = -p.K, -p.K-1
				}
				q := priorQ(src, blocks)
				for _, carry := range []bool{false, true} {
					want, got := src.Clone(), src.Clone()
					from := [2]*Model{want, got}
					if carry {
						want, _ = holeyData(chunkRows+700, 2, m, 9)
						got = want.Clone()
						from = [2]*Model{src, src}
					}
					mapCommitWith(want, from[0], acc, p, q, 0, w, false)
					mapCommitWith(got, from[1], acc, p, q, 0, w, useAVX512())
					if part, ok := sameModelBits(got, want); !ok {
						t.Fatalf("m=%d prior %+v workers %d carry %v: %s differs from the scalar loops'", m, p, w, carry, part)
					}
				}
			}
		}
	}
}

// TestPenaltyKernelsBitwise: the prior's penalty with its logarithms
// taken by logRowSumAVX512 is bitwise the scalar loops' (and Penalty's),
// the logarithms too, on models with rows holding zeros, subnormals,
// and the other values math.Log takes apart, for m a multiple of 8 and
// not, with each part of the prior alone.
func TestPenaltyKernelsBitwise(t *testing.T) {
	if !useLogAVX512() {
		t.Log("no AVX-512 on this machine (or -tags purego): the scalar loops on both sides")
	}
	if useLogAVX512() {
		// The kernel itself takes ordinary rows (else every row would
		// pass to the scalar loop and the test would prove nothing).
		x := make([]float64, 3*8)
		for k := range x {
			x[k] = 0.25 + float64(k)
		}
		x[2*8+5] = 0
		tot := 0.0
		if got := logRowSumAVX512(&make([]float64, len(x))[0], &x[0], nil, 3, 8, &tot); got != 2 {
			t.Fatalf("logRowSumAVX512 did %d rows of 3 (the third holds a 0), want 2", got)
		}
	}
	r := rand.New(rand.NewPCG(5, 6))
	for _, c := range []struct {
		n, m, u int
		apart   bool // entries math.Log takes apart (the penalty not finite)
	}{{900, 32, 3, false}, {900, 32, 3, true}, {700, 8, 1, false}, {700, 8, 1, true}, {300, 12, 2, false}} {
		md := NewRandom(c.n, c.m, c.u, TieNone, 3)
		for _, part := range append(append([][]float64(nil), md.D...), md.KT...) {
			for q := range part {
				k := r.IntN(60)
				if !c.apart && k < 5 {
					k = 1 + 4*(k%2) // a subnormal or 1
				}
				switch k {
				case 0:
					part[q] = 0
				case 1:
					part[q] = 1e-310
				case 2:
					part[q] = math.Inf(1)
				case 3:
					part[q] = math.NaN()
				case 4:
					part[q] = -part[q]
				case 5:
					part[q] = 1
				}
			}
		}
		q := make([][]float64, len(md.KT))
		for b := range q {
			q[b] = make([]float64, c.n)
			for j := range q[b] {
				q[b][j] = r.Float64()
			}
		}
		for _, p := range []*Prior{{D: 0.5, K: 20}, {D: 0.5}, {K: 20}} {
			for _, w := range []int{1, 2, 5} {
				lw, lg := p.newExtrapLogs(md), p.newExtrapLogs(md)
				want := p.penaltyLogsWith(md, q, lw, w, false)
				got := p.penaltyLogsWith(md, q, lg, w, useLogAVX512())
				if finite := !math.IsInf(want, 0) && !math.IsNaN(want); finite == c.apart {
					t.Fatalf("n=%d m=%d: penalty %v: the test's entries are not what it means", c.n, c.m, want)
				}
				if !sameFloat(got, want) || !sameFloat(p.Penalty(md, q), want) {
					t.Fatalf("n=%d m=%d prior %+v workers %d: penalty %v, the scalar loops give %v", c.n, c.m, p, w, got, want)
				}
				for b := range lw.D {
					for k := range lw.D[b] {
						if !sameFloat(lg.D[b][k], lw.D[b][k]) {
							t.Fatalf("n=%d m=%d prior %+v: log D differs", c.n, c.m, p)
						}
					}
				}
				for b := range lw.KT {
					for k := range lw.KT[b] {
						if !sameFloat(lg.KT[b][k], lw.KT[b][k]) {
							t.Fatalf("n=%d m=%d prior %+v: log KT differs", c.n, c.m, p)
						}
					}
				}
			}
		}
	}
}

// TestSquaremLengthKernelsBitwise: squaremLength with lengthSumsAVX512
// is bitwise its scalar loop, for pieces whose entries are and are not a
// multiple of 8, on 1 and 3 goroutines, over more than one piece.
func TestSquaremLengthKernelsBitwise(t *testing.T) {
	if !useAVX512() {
		t.Log("no AVX-512 on this machine (or -tags purego): the scalar loop on both sides")
	}
	for _, c := range []struct{ n, m, u int }{{700, 32, 3}, {chunkRows + 301, 8, 1}, {301, 3, 2}} {
		x0, x1, x2 := extrapPoints(c.n, c.m, c.u, 7)
		for _, md := range []*Model{x0, x1, x2} {
			for _, part := range append(append([][]float64(nil), md.D...), md.KT...) {
				for q, v := range part {
					if math.IsNaN(v) || math.IsInf(v, 0) {
						part[q] = 0.5 // no NaN: a sum that can differ
					}
				}
			}
		}
		for _, w := range []int{1, 3} {
			want := squaremLengthWith(x0, x1, x2, w, false)
			got := squaremLengthWith(x0, x1, x2, w, useAVX512())
			if math.IsNaN(want) || math.IsInf(want, 0) {
				t.Fatalf("n=%d m=%d: length %v: the test's points are not what it means", c.n, c.m, want)
			}
			if got != want {
				t.Fatalf("n=%d m=%d workers %d: length %v, the scalar loop gives %v", c.n, c.m, w, got, want)
			}
		}
	}
}
