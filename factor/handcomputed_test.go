package factor

import (
	"context"
	"math"
	"testing"
)

// handModel is the model of the hand-computed example: n = 3, m = 2, u = 1,
//
//	D = | 1/2  1/2 |      K = | 1/2  1/4  1/4 |
//	    |  1    0  |          | 1/4  1/4  1/2 |
//	    | 1/4  3/4 |
//
// so P = DK has rows (3/8, 1/4, 3/8), (1/2, 1/4, 1/4), (5/16, 1/4, 7/16).
// D[1,1] = 0 is a mask: it must stay zero. All entries are dyadic, so the
// model is exact in float64.
func handModel() *Model {
	md := NewModel(3, 2, 1, TieNone)
	copy(md.D[0], []float64{
		1. / 2, 1. / 2,
		1, 0,
		1. / 4, 3. / 4,
	})
	// KT[j] = (K[0][j], K[1][j]).
	copy(md.KT[0], []float64{
		1. / 2, 1. / 4,
		1. / 4, 1. / 4,
		1. / 4, 1. / 2,
	})
	return md
}

// handBlocks holds the counts C_00 = 2, C_02 = 1, C_11 = 3, C_20 = 1,
// C_22 = 2 (N = 9, every row total x_i = 3), split in two blocks.
func handBlocks(t *testing.T) []*Block {
	t.Helper()
	b0, err := NewBlock(0, []int32{0, 0, 1}, []int32{0, 2, 1}, []float64{2, 1, 3})
	if err != nil {
		t.Fatal(err)
	}
	b1, err := NewBlock(0, []int32{2, 2}, []int32{0, 2}, []float64{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	return []*Block{b0, b1}
}

// handLogLik is Σ c·log g over the nonzeros with g = (DK)_ij of handModel:
// 2·log(3/8) + 1·log(3/8) + 3·log(1/4) + 1·log(5/16) + 2·log(7/16).
var handLogLik = 3*math.Log(3./8) + 3*math.Log(1./4) + math.Log(5./16) + 2*math.Log(7./16)

// The E-step by hand (t_l = D_il·K_lj, g = Σ t_l, w = (c/g)·t):
//
//	(0,0,c=2): t = (1/2·1/2, 1/2·1/4) = (1/4, 1/8),   g = 3/8,  w = (16/3)(1/4, 1/8)  = (4/3, 2/3)
//	(0,2,c=1): t = (1/2·1/4, 1/2·1/2) = (1/8, 1/4),   g = 3/8,  w = (8/3)(1/8, 1/4)   = (1/3, 2/3)
//	(1,1,c=3): t = (1·1/4, 0·1/4)     = (1/4, 0),     g = 1/4,  w = 12(1/4, 0)        = (3, 0)
//	(2,0,c=1): t = (1/4·1/2, 3/4·1/4) = (1/8, 3/16),  g = 5/16, w = (16/5)(1/8, 3/16) = (2/5, 3/5)
//	(2,2,c=2): t = (1/4·1/4, 3/4·1/2) = (1/16, 3/8),  g = 7/16, w = (32/7)(1/16, 3/8) = (2/7, 12/7)
//
// Sums:
//
//	Dh_0 = (4/3+1/3, 2/3+2/3) = (5/3, 4/3)          x_0 = 3
//	Dh_1 = (3, 0)                                    x_1 = 3
//	Dh_2 = (2/5+2/7, 3/5+12/7) = (24/35, 81/35)      x_2 = 3
//	KhT_0 = (4/3+2/5, 2/3+3/5) = (26/15, 19/15)
//	KhT_1 = (3, 0)
//	KhT_2 = (1/3+2/7, 2/3+12/7) = (13/21, 50/21)
//	y = (26/15+3+13/21, 19/15+0+50/21) = (562/105, 383/105)   (Σy = 945/105 = 9 = N)
//
// M-step (α = 1):
//
//	D'_0 = (5/9, 4/9),  D'_1 = (1, 0),  D'_2 = (8/35, 27/35)
//	K'_0 = (26/15, 3, 13/21)/(562/105) = (182, 315, 65)/562 = (91/281, 315/562, 65/562)
//	K'_1 = (19/15, 0, 50/21)/(383/105) = (133, 0, 250)/383
//
// D'[1,1] stays 0 (mask), and K'_1[1] = 0 because the only count into
// state 1 comes from state 1, whose D row gives hidden state 1 no weight.
func TestHandComputedIteration(t *testing.T) {
	md := handModel()
	blocks := handBlocks(t)
	acc := NewAccumulator(md)
	if err := Pass(context.Background(), md, blocks, acc, 1, true); err != nil {
		t.Fatal(err)
	}

	// Sufficient statistics. Entries up to 5.4 take a few roundings each, so
	// the tolerance is a few ulps of 5.4 (ulp = 8.9e-16).
	const statTol = 4e-15
	wantDh := []float64{5. / 3, 4. / 3, 3, 0, 24. / 35, 81. / 35}
	wantKhT := []float64{26. / 15, 19. / 15, 3, 0, 13. / 21, 50. / 21}
	wantY := []float64{562. / 105, 383. / 105}
	hcClose(t, "Dh", acc.Dh[0], wantDh, statTol)
	hcClose(t, "KhT", acc.KhT[0], wantKhT, statTol)
	hcClose(t, "Y", acc.Y[0], wantY, statTol)
	hcClose(t, "X", acc.X[0], []float64{3, 3, 3}, 0)
	if acc.SumX != 9 || acc.NNZ != 5 {
		t.Errorf("SumX = %v, NNZ = %d; want 9, 5", acc.SumX, acc.NNZ)
	}
	// loglik sums 5 logs of magnitude < 4.2: a few ulps of 9.9.
	if math.Abs(acc.LogLik-handLogLik) > 1e-14 {
		t.Errorf("loglik = %.17g, want %.17g", acc.LogLik, handLogLik)
	}

	dataTerm := DataTerm(blocks)
	// Σ c·log(c/x_i): row 0: 2·log(2/3) + log(1/3); row 1: 3·log(3/3) = 0;
	// row 2: log(1/3) + 2·log(2/3).
	wantData := 4*math.Log(2./3) + 2*math.Log(1./3)
	if math.Abs(dataTerm-wantData) > 1e-15 {
		t.Errorf("DataTerm = %.17g, want %.17g", dataTerm, wantData)
	}

	acc.Commit(md, 1, dataTerm)
	const tol = 1e-15 // every committed entry is in [0, 1]: ≤ a few ulps (1.1e-16)
	hcClose(t, "D'", md.D[0], []float64{5. / 9, 4. / 9, 1, 0, 8. / 35, 27. / 35}, tol)
	hcClose(t, "K'ᵀ", md.KT[0], []float64{
		91. / 281, 133. / 383,
		315. / 562, 0,
		65. / 562, 250. / 383,
	}, tol)
	if md.D[0][3] != 0 || md.KT[0][3] != 0 {
		t.Errorf("masked entries D[1,1] = %v, K[1][1] = %v; want exactly 0", md.D[0][3], md.KT[0][3])
	}
	if md.Iteration != 1 || md.LogLik != acc.LogLik {
		t.Errorf("Iteration = %d, LogLik = %v; want 1, %v", md.Iteration, md.LogLik, acc.LogLik)
	}
	// WKL (incremental-emsf eq. 11) = (data term − loglik)/N.
	if want := (wantData - handLogLik) / 9; math.Abs(md.WKL-want) > 1e-15 {
		t.Errorf("WKL = %.17g, want %.17g", md.WKL, want)
	}
	if err := md.Validate(); err != nil {
		t.Error(err)
	}
}

// TestHandComputedHalfStep commits the same statistics with α = 1/2
// (incremental-emsf eq. 13): new = (1/2)·old + (1/2)·EM step.
//
//	D'_0 = (1/2)(1/2, 1/2) + (1/2)(5/9, 4/9)       = (19/36, 17/36)
//	D'_1 = (1/2)(1, 0) + (1/2)(1, 0)               = (1, 0)
//	D'_2 = (1/2)(1/4, 3/4) + (1/2)(8/35, 27/35)    = (67/280, 213/280)
//	K'_0 = (1/2)(1/2, 1/4, 1/4) + (1/2)(182, 315, 65)/562
//	     = (281/1124 + 182/1124, 281/2248 + 630/2248, 281/2248 + 130/2248)
//	     = (463/1124, 911/2248, 411/2248)
//	K'_1 = (1/2)(1/4, 1/4, 1/2) + (1/2)(133, 0, 250)/383
//	     = (383/3064 + 532/3064, 383/3064 + 0, 383/1532 + 500/1532)
//	     = (915/3064, 383/3064, 883/1532)
func TestHandComputedHalfStep(t *testing.T) {
	md := handModel()
	blocks := handBlocks(t)
	acc := NewAccumulator(md)
	if err := Pass(context.Background(), md, blocks, acc, 1, false); err != nil {
		t.Fatal(err)
	}
	if !math.IsNaN(acc.LogLik) {
		t.Errorf("loglik = %v without withLogLik, want NaN", acc.LogLik)
	}
	acc.Commit(md, 0.5, DataTerm(blocks))
	const tol = 1e-15
	hcClose(t, "D'", md.D[0], []float64{19. / 36, 17. / 36, 1, 0, 67. / 280, 213. / 280}, tol)
	hcClose(t, "K'ᵀ", md.KT[0], []float64{
		463. / 1124, 915. / 3064,
		911. / 2248, 383. / 3064,
		411. / 2248, 883. / 1532,
	}, tol)
	if md.D[0][3] != 0 {
		t.Errorf("masked D[1,1] = %v, want exactly 0", md.D[0][3])
	}
	if !math.IsNaN(md.WKL) {
		t.Errorf("WKL = %v without loglik, want NaN", md.WKL)
	}
}

// TestHandComputedMetrics checks the metrics of this file's model against
// the same hand arithmetic.
func TestHandComputedMetrics(t *testing.T) {
	md := handModel()
	blocks := handBlocks(t)
	ll, total, err := LogLikelihood(md, blocks)
	if err != nil {
		t.Fatal(err)
	}
	if total != 9 || math.Abs(ll-handLogLik) > 1e-14 {
		t.Errorf("LogLikelihood = %.17g, %v; want %.17g, 9", ll, total, handLogLik)
	}
	h, err := HeldOut(md, blocks)
	if err != nil || math.Abs(h-handLogLik/9) > 1e-15 {
		t.Errorf("HeldOut = %v, %v; want %v", h, err, handLogLik/9)
	}
	w, err := WKL(md, blocks)
	want := (4*math.Log(2./3) + 2*math.Log(1./3) - handLogLik) / 9
	if err != nil || math.Abs(w-want) > 1e-15 {
		t.Errorf("WKL = %v, %v; want %v", w, err, want)
	}
	// P = DK by hand (see handModel).
	hcClose(t, "DK", md.Dense(0), []float64{
		3. / 8, 1. / 4, 3. / 8,
		1. / 2, 1. / 4, 1. / 4,
		5. / 16, 1. / 4, 7. / 16,
	}, 0)
}

func hcClose(t *testing.T, name string, got, want []float64, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s has %d entries, want %d", name, len(got), len(want))
	}
	for k := range got {
		if math.Abs(got[k]-want[k]) > tol {
			t.Errorf("%s[%d] = %.17g, want %.17g (|Δ| = %.3g > %g)", name, k, got[k], want[k], math.Abs(got[k]-want[k]), tol)
		}
	}
}
