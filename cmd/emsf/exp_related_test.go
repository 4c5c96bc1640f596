package main

import (
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// relatedRows reads an experiment's CSV and returns its rows (no header)
// after checking the header and the PNGs.
func relatedRows(t *testing.T, dir, name string, pngs ...string) [][]string {
	t.Helper()
	rows := readCSV(t, filepath.Join(dir, name+".csv"))
	if got := strings.Join(rows[0], ","); got != "setting,method,m,x_name,x,seed,measure,value" {
		t.Fatalf("%s header %q", name, got)
	}
	for _, p := range pngs {
		checkPNG(t, filepath.Join(dir, p+".png"))
	}
	return rows[1:]
}

// value returns the value column of the row with these setting, method,
// x, seed and measure.
func value(t *testing.T, rows [][]string, setting, method, x, seed, measure string) float64 {
	t.Helper()
	for _, r := range rows {
		if r[0] == setting && r[1] == method && r[4] == x && r[5] == seed && r[6] == measure {
			v, err := strconv.ParseFloat(r[7], 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("no row %s/%s/%s/%s/%s", setting, method, x, seed, measure)
	return 0
}

// TestExperimentMUHMM: the reduced mu-hmm on tiny settings writes its CSV
// (the rows of both parts; the numbers are tested in factor/experiment)
// and two PNGs; the CSV is the same for 1 and 2 workers.
func TestExperimentMUHMM(t *testing.T) {
	var csvs []string
	for _, w := range []string{"1", "2"} {
		dir := t.TempDir()
		mustEmsf(t, "experiment", "mu-hmm", "--runs", "2", "--seed", "3", "--observations", "20000", "--hmm-iters", "300",
			"--gen-iters", "20", "--sizes", "3000", "--quiet", "--out", dir, "--workers", w)
		rows := relatedRows(t, dir, "mu-hmm", "mu-hmm", "mu-hmm-gen")
		checkXNames(t, rows, func(_, measure string) string {
			if measure == "hmm_objective" || measure == "gen_loglik" {
				return "iterations"
			}
			return "observations"
		})
		for _, seed := range []string{"3", "4"} {
			value(t, rows, "gen", "mu-repa", "20", seed, "gen_loglik")
			value(t, rows, "hmm", "normHMM", "20000", seed, "hmm_final_objective")
			value(t, rows, "hmm", "relaHMM", "300", seed, "hmm_objective")
		}
		var b strings.Builder
		for _, r := range rows {
			if r[6] != "hmm_seconds" {
				b.WriteString(strings.Join(r, ",") + "\n")
			}
		}
		csvs = append(csvs, b.String())
	}
	if csvs[0] != csvs[1] {
		t.Error("1 and 2 workers give different CSVs")
	}
	code, _, errs := emsf(t, "experiment", "mu-hmm", "--observations", "1", "--out", t.TempDir())
	if code != 2 || !strings.Contains(errs, "--observations") {
		t.Errorf("exit %d, stderr %q", code, errs)
	}
}

// TestExperimentOnlineEM: the online-em experiment on a short stream
// writes the rows of online EM, incremental EMSF and the paper's Fig. 1
// setting and two PNGs, and checks its flags.
func TestExperimentOnlineEM(t *testing.T) {
	dir := t.TempDir()
	mustEmsf(t, "experiment", "online-em", "--runs", "1", "--seed", "2", "--sizes", "1000,20000", "--gamma-exp", "0.8",
		"--commit-every", "1000", "--alpha", "0.1", "--order", "10", "--nmf-steps", "2000", "--quiet", "--out", dir)
	rows := relatedRows(t, dir, "online-em", "online-em", "online-em-nmf")
	checkXNames(t, rows, func(setting, _ string) string {
		if setting == "nmf" {
			return "observations"
		}
		return "transitions"
	})
	if v := value(t, rows, "emsf", "online EM a = 0.8", "20000", "2", "kl_rho"); !(v > 0) || math.IsInf(v, 0) {
		t.Errorf("online EM KL_ρ %v", v)
	}
	value(t, rows, "emsf", "incremental EMSF, commit every 1000, α = 0.1", "20000", "2", "kl_rho")
	value(t, rows, "nmf", "exact online EM (Fig. 1)", "2000", "2", "b_rel_error")
	code, _, errs := emsf(t, "experiment", "online-em", "--gamma-exp", "0.4", "--out", dir)
	if code != 2 || !strings.Contains(errs, "--gamma-exp") {
		t.Errorf("exit %d, stderr %q", code, errs)
	}
}

// TestExperimentEPCA: the epca experiment on small data writes its CSV
// (E-PCA, EMSF and CNT on both settings) and three PNGs, and checks its
// flags.
func TestExperimentEPCA(t *testing.T) {
	dir := t.TempDir()
	mustEmsf(t, "experiment", "epca", "--runs", "1", "--seed", "5", "--sizes", "3000", "--hands", "2000", "--bases", "1,4",
		"--epca-iters", "20", "--iters", "50", "--quiet", "--out", dir)
	rows := relatedRows(t, dir, "epca", "epca", "epca-blackjack", "epca-kl")
	checkXNames(t, rows, func(string, string) string { return "bases" })
	if v := value(t, rows, "gen", "E-PCA", "1", "5", "heldout_loglik"); math.Abs(v+math.Log(100)) > 1e-9 {
		t.Errorf("E-PCA with the constant basis only: held-out %v, want −log 100", v)
	}
	for _, s := range []string{"gen", "blackjack"} {
		for _, m := range []string{"E-PCA", "EMSF", "CNT (add-one)"} {
			value(t, rows, s, m, "4", "5", "row_kl")
		}
	}
	value(t, rows, "gen", "EMSF", "4", "5", "kl_rho")
	code, _, errs := emsf(t, "experiment", "epca", "--bases", "0", "--out", dir)
	if code != 2 || !strings.Contains(errs, "--bases") {
		t.Errorf("exit %d, stderr %q", code, errs)
	}
}

// TestDistinctTicks: on a narrow range far from 0 the labelled ticks read
// differently and say their value.
func TestDistinctTicks(t *testing.T) {
	seen := map[string]bool{}
	labelled := 0
	for _, tk := range (distinctTicks{}).Ticks(-4.651, -4.562) {
		if tk.Label == "" {
			continue
		}
		labelled++
		v, err := strconv.ParseFloat(tk.Label, 64)
		if err != nil || math.Abs(v-tk.Value) > 1e-9 || seen[tk.Label] {
			t.Errorf("tick %v labelled %q (seen before: %v)", tk.Value, tk.Label, seen[tk.Label])
		}
		seen[tk.Label] = true
	}
	if labelled < 2 {
		t.Errorf("%d labelled ticks", labelled)
	}
}

// checkXNames fails unless every row's x_name is want(its setting, its
// measure): the CSV says what each x is.
func checkXNames(t *testing.T, rows [][]string, want func(setting, measure string) string) {
	t.Helper()
	for _, r := range rows {
		if w := want(r[0], r[6]); r[3] != w {
			t.Errorf("row %v: x_name %q, want %q", r, r[3], w)
		}
	}
}
