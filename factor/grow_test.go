package factor

import (
	"errors"
	"math"
	"testing"
)

func TestGrow(t *testing.T) {
	for _, tie := range []Tie{TieNone, TieSharedK, TieSharedD} {
		md := NewRandom(5, 3, 2, tie, 7)
		md.KT[0][2*3+1] = 0 // a masked entry: K[1][2] = 0
		normalizeCols(md.KT[0], 5, 3)
		g, err := md.Grow(8, 3)
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Validate(); err != nil {
			t.Fatalf("tie %s: grown model: %v", tie, err)
		}
		if g.N != 8 || g.U != 3 || g.M != 3 || g.Tie != tie {
			t.Fatalf("tie %s: shape %dx%dx%d", tie, g.N, g.M, g.U)
		}
		if g.KT[0][2*3+1] != 0 {
			t.Errorf("tie %s: masked K entry became %v", tie, g.KT[0][2*3+1])
		}
		fresh := NewRandom(8, 3, 3, tie, 7)
		for b := range g.D {
			for i := 0; i < 8; i++ {
				for l := 0; l < 3; l++ {
					got := g.D[b][i*3+l]
					var want float64
					switch {
					case b >= len(md.D):
						want = fresh.D[b][i*3+l]
					case i < 5:
						want = md.D[b][i*3+l]
					default:
						want = 1.0 / 3
					}
					if got != want {
						t.Fatalf("tie %s: D block %d [%d,%d] = %v, want %v", tie, b, i, l, got, want)
					}
				}
			}
		}
		for b := range g.KT {
			for j := 0; j < 8; j++ {
				for l := 0; l < 3; l++ {
					got := g.KT[b][j*3+l]
					var want float64
					switch {
					case b >= len(md.KT):
						want = fresh.KT[b][j*3+l]
					case j < 5:
						want = md.KT[b][j*3+l] * 5 / 8
					default:
						want = 1.0 / 8
					}
					if math.Abs(got-want) > 1e-15 {
						t.Fatalf("tie %s: K^T block %d [%d,%d] = %v, want %v", tie, b, j, l, got, want)
					}
				}
			}
		}
		same, err := md.Grow(5, 2)
		if err != nil || !same.Equal(md) {
			t.Errorf("tie %s: Grow to the same size changed the model (err %v)", tie, err)
		}
	}
	// A model with a rule: Grow (same size or larger) and CloneFactors
	// carry none, Clone does, and the model itself keeps its own.
	md := NewRandom(5, 3, 2, TieNone, 1)
	blk, err := NewBlock(0, []int32{0, 1}, []int32{1, 2}, []float64{3, 1})
	if err != nil {
		t.Fatal(err)
	}
	if md.Smoothing, err = NewSmoothing(5, 2, []*Block{blk}, []RuleParams{KNRule(0.5, QHalf), KNRule(0.5, QHalf)}); err != nil {
		t.Fatal(err)
	}
	for what, c := range map[string]func() (*Model, error){
		"Grow(5, 2)":   func() (*Model, error) { return md.Grow(5, 2) },
		"Grow(7, 3)":   func() (*Model, error) { return md.Grow(7, 3) },
		"CloneFactors": func() (*Model, error) { return md.CloneFactors(), nil },
	} {
		if g, err := c(); err != nil || g.Smoothing != nil {
			t.Errorf("%s of a model with a rule: rule %v (err %v), want none", what, g != nil && g.Smoothing != nil, err)
		}
	}
	if md.Smoothing == nil || md.Clone().Smoothing == nil {
		t.Error("the model lost its rule, or Clone did not copy it")
	}
	if _, err := NewRandom(5, 3, 2, TieNone, 1).Grow(4, 2); err == nil {
		t.Error("Grow to fewer states: no error")
	}
	if _, err := NewRandom(5, 3, 2, TieNone, 1).Grow(5, 1); err == nil {
		t.Error("Grow to fewer actions: no error")
	}
}

// A grown model can be fitted: the new states' transitions have g > 0.
func TestGrowThenFit(t *testing.T) {
	md := NewRandom(4, 2, 1, TieNone, 3)
	g, err := md.Grow(6, 2)
	if err != nil {
		t.Fatal(err)
	}
	b0 := &Block{Action: 0, Rows: []int32{0, 5}, Ptr: []int64{0, 2, 3}, Cols: []int32{4, 5, 1}, Vals: []float64{1, 2, 1}}
	b1 := &Block{Action: 1, Rows: []int32{3}, Ptr: []int64{0, 1}, Cols: []int32{5}, Vals: []float64{3}}
	if _, err := Fit(t.Context(), g, []*Block{b0, b1}, FitOptions{Converger: Converger{MaxIter: 3}}); err != nil {
		t.Fatalf("fit of the grown model: %v", err)
	}
	if err := g.Validate(); err != nil {
		t.Fatal(err)
	}
}

// After Smooth every transition has positive probability and the model is
// still stochastic; a fit that failed on a zero column then succeeds.
func TestSmooth(t *testing.T) {
	md := NewRandom(4, 2, 1, TieNone, 3)
	b := &Block{Action: 0, Rows: []int32{0, 1}, Ptr: []int64{0, 2, 3}, Cols: []int32{1, 2, 1}, Vals: []float64{1, 2, 1}}
	if _, err := Fit(t.Context(), md, []*Block{b}, FitOptions{Converger: Converger{MaxIter: 5}}); err != nil {
		t.Fatal(err)
	}
	if md.Prob(0, 1, 3) != 0 {
		t.Fatalf("a never-seen next state has probability %v after EM, want 0", md.Prob(0, 1, 3))
	}
	more := &Block{Action: 0, Rows: []int32{1}, Ptr: []int64{0, 1}, Cols: []int32{3}, Vals: []float64{1}}
	var te *TransitionError
	if _, err := Fit(t.Context(), md.Clone(), []*Block{more}, FitOptions{Converger: Converger{MaxIter: 1}}); !errors.As(err, &te) {
		t.Fatalf("fit with a zero-probability transition: %v, want a TransitionError", err)
	}
	if err := md.Smooth(1e-9); err != nil {
		t.Fatal(err)
	}
	if err := md.Validate(); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		for j := range 4 {
			if md.Prob(0, i, j) <= 0 {
				t.Fatalf("P(%d→%d) = %v after Smooth", i, j, md.Prob(0, i, j))
			}
		}
	}
	if _, err := Fit(t.Context(), md, []*Block{more}, FitOptions{Converger: Converger{MaxIter: 3}}); err != nil {
		t.Fatalf("fit after Smooth: %v", err)
	}
	for _, bad := range []float64{-0.1, 1, math.NaN()} {
		if err := md.Smooth(bad); err == nil {
			t.Errorf("Smooth(%v): no error", bad)
		}
	}
}

// With α < 1 a positive entry that sees no data shrinks by (1−α) per
// commit but never underflows to 0 (EntryFloor); zeros stay zero; with
// α = 1 nothing is floored.
func TestCommitEntryFloor(t *testing.T) {
	md := NewRandom(3, 2, 1, TieNone, 1)
	md.KT[0][2*2+0], md.KT[0][1*2+0] = 0, md.KT[0][1*2+0]+md.KT[0][2*2+0] // K[0][2] = 0: a mask
	md.D[0][0*2+1] = 1e-140
	md.D[0][0*2+0] = 1 - 1e-140
	// Data only from state 1 to state 0: D row 0 and K column 2 see none.
	b := &Block{Action: 0, Rows: []int32{1}, Ptr: []int64{0, 1}, Cols: []int32{0}, Vals: []float64{1}}
	for range 3000 {
		if _, err := Fit(t.Context(), md, []*Block{b}, FitOptions{Alpha: 0.5, Converger: Converger{MaxIter: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	if v := md.KT[0][1*2+1]; v != EntryFloor {
		t.Errorf("K[1][1] (no data for 3000 commits at α = 0.5) = %v, want the floor %v", v, EntryFloor)
	}
	if v := md.KT[0][2*2+0]; v != 0 {
		t.Errorf("masked K[0][2] = %v, want 0", v)
	}
	if v := md.D[0][0*2+1]; v != 1e-140 {
		t.Errorf("D row 0 without data changed: %v", v)
	}
	if err := md.Validate(); err != nil {
		t.Fatal(err)
	}
	// A transition through floored entries is possible, not an error.
	late := &Block{Action: 0, Rows: []int32{0}, Ptr: []int64{0, 1}, Cols: []int32{1}, Vals: []float64{1}}
	if _, err := Fit(t.Context(), md, []*Block{late}, FitOptions{Alpha: 0.5, Converger: Converger{MaxIter: 1}}); err != nil {
		t.Fatalf("a transition after the long drought: %v", err)
	}
	// α = 1: an entry without data becomes 0 as plain EM says.
	md2 := NewRandom(3, 2, 1, TieNone, 1)
	if _, err := Fit(t.Context(), md2, []*Block{b}, FitOptions{Converger: Converger{MaxIter: 2}}); err != nil {
		t.Fatal(err)
	}
	if v := md2.KT[0][1*2+1]; v != 0 {
		t.Errorf("α = 1: K entry without data = %v, want 0", v)
	}
}
