package main

import (
	"path/filepath"
	"strings"
	"testing"

	"gonum.org/v1/plot"

	"github.com/emsf/emsf/factor/experiment"
)

func labels(ticks []plot.Tick) []string {
	var out []string
	for _, t := range ticks {
		if t.Label != "" {
			out = append(out, t.Label)
		}
	}
	return out
}

// A log axis is labelled as densely as its range needs: issue 27's
// online-em.png had one labelled tick (1) on 0.3 … 5.
func TestLogTicks(t *testing.T) {
	for _, tc := range []struct {
		lo, hi float64
		want   string
	}{
		{0.3, 5, "0.5,1,2,5"},
		{0.3, 2, "0.3,0.4,0.5,0.6,0.7,0.8,0.9,1,2"},
		{0.02, 0.5, "0.02,0.05,0.1,0.2,0.5"},
		{7e-6, 2e-3, "1e-05,2e-05,5e-05,0.0001,0.0002,0.0005,0.001,0.002"},
		{1e-9, 10, "1e-09,1e-08,1e-07,1e-06,1e-05,0.0001,0.001,0.01,0.1,1,10"},
		{0.36, 0.39, "0.36,0.39"},
	} {
		if got := strings.Join(labels(logTicks{}.Ticks(tc.lo, tc.hi)), ","); got != tc.want {
			t.Errorf("[%g, %g]: labels %s, want %s", tc.lo, tc.hi, got, tc.want)
		}
	}
}

// Few x values are labelled where the points are (epca-kl.png's bases 1,
// 2, 4, 8, 16 had labels at 1 and 10 only); large ones read short.
func TestReadableTicks(t *testing.T) {
	got := strings.Join(labels(readableTicks([]float64{16, 1, 2, 4, 8}).Ticks(1, 16)), ",")
	if got != "1,2,4,8,16" {
		t.Errorf("bases: labels %s", got)
	}
	got = strings.Join(labels(readableTicks([]float64{1000, 3000, 10000, 300000, 1e6, 2.5e6}).Ticks(1000, 2.5e6)), ",")
	if got != "1000,3000,10k,300k,1M,2.5M" {
		t.Errorf("transitions: labels %s", got)
	}
	many := make([]float64, maxValueTicks+1)
	for k := range many {
		many[k] = float64(100 * (k + 1))
	}
	if _, ok := readableTicks(many).(logTicks); !ok {
		t.Errorf("%d x values: want log ticks", len(many))
	}
}

// A curve on the same points as an earlier one is found (mu-hmm-gen.png:
// mu-norm lay exactly on EMSF and nothing said so); a setting every curve
// shares is left out of the names; TeX subscripts are refused.
func TestPlotCurvesCoincide(t *testing.T) {
	var sums []experiment.Summary
	for _, c := range []struct {
		method string
		y      []float64
	}{
		{"EMSF", []float64{-4.62, -4.55, -4.47}},
		{"mu-norm", []float64{-4.62, -4.55 + 1e-9, -4.47}},
		{"mu-repa", []float64{-4.62, -4.58, -4.50}},
	} {
		for k, y := range c.y {
			sums = append(sums, experiment.Summary{Setting: "gen", Method: c.method, M: 10, X: []int{1, 10, 100}[k], Mean: y, Runs: 3})
		}
	}
	curves, names := curvesOf(sums)
	if strings.Join(names, "|") != "EMSF m=10|mu-norm m=10|mu-repa m=10" {
		t.Errorf("names %q: the shared setting should be left out", names)
	}
	tol := (-4.47 + 4.62) / 1000
	if !samePoints(curves[0], curves[1], false, tol) || samePoints(curves[0], curves[2], false, tol) || samePoints(curves[1], curves[2], false, tol) {
		t.Error("samePoints: mu-norm lies on EMSF, mu-repa on neither")
	}
	if err := plainText("ρ-weighted KL(P ‖ DK)", "‖X − PSPᵀ‖²"); err != nil {
		t.Error(err)
	}
	for _, bad := range []string{"KL_ρ", "‖P − P̃‖_F", "t_c = 1000"} {
		if plainText("ok", bad) == nil {
			t.Errorf("plainText(%q) = nil", bad)
		}
	}
	dir := t.TempDir()
	if err := plotCurves(filepath.Join(dir, "ok.png"), "title", "iterations", "log-likelihood", false, sums); err != nil {
		t.Fatal(err)
	}
	checkPNG(t, filepath.Join(dir, "ok.png"))
	if err := plotCurves(filepath.Join(dir, "bad.png"), "KL_ρ", "x", "y", false, sums); err == nil {
		t.Error("plotCurves drew a literal subscript")
	}
}
