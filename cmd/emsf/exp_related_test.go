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
	if got := strings.Join(rows[0], ","); got != "setting,method,m,transitions,seed,measure,error" {
		t.Fatalf("%s header %q", name, got)
	}
	for _, p := range pngs {
		checkPNG(t, filepath.Join(dir, p+".png"))
	}
	return rows[1:]
}

// value returns the error column of the row with these setting, method,
// x, seed and measure.
func value(t *testing.T, rows [][]string, setting, method, x, seed, measure string) float64 {
	t.Helper()
	for _, r := range rows {
		if r[0] == setting && r[1] == method && r[3] == x && r[4] == seed && r[5] == measure {
			v, err := strconv.ParseFloat(r[6], 64)
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
// and two PNGs; on gen data mu-norm's log-likelihood is EMSF's at every
// checkpoint, mu-repa's equals mu-rela's, and at the end both damped rules
// are below EMSF's (slower) but above the start; the HMM fits reach a
// small objective; the CSV is the same for 1 and 2 workers.
func TestExperimentMUHMM(t *testing.T) {
	var csvs []string
	for _, w := range []string{"1", "2"} {
		dir := t.TempDir()
		mustEmsf(t, "experiment", "mu-hmm", "--runs", "2", "--seed", "3", "--observations", "20000", "--hmm-iters", "300",
			"--gen-iters", "20", "--sizes", "3000", "--quiet", "--out", dir, "--workers", w)
		rows := relatedRows(t, dir, "mu-hmm", "mu-hmm", "mu-hmm-gen")
		for _, x := range []string{"1", "2", "5", "10", "20"} {
			em := value(t, rows, "gen", "EMSF", x, "3", "gen_loglik")
			if d := math.Abs(value(t, rows, "gen", "mu-norm", x, "3", "gen_loglik") - em); d > 1e-9*math.Abs(em) {
				t.Errorf("iteration %s: mu-norm differs from EMSF by %g", x, d)
			}
			repa, rela := value(t, rows, "gen", "mu-repa", x, "3", "gen_loglik"), value(t, rows, "gen", "mu-rela", x, "3", "gen_loglik")
			if math.Abs(repa-rela) > 1e-9*math.Abs(repa) {
				t.Errorf("iteration %s: repa %v, rela %v", x, repa, rela)
			}
		}
		start, end := value(t, rows, "gen", "mu-repa", "1", "4", "gen_loglik"), value(t, rows, "gen", "mu-repa", "20", "4", "gen_loglik")
		if em := value(t, rows, "gen", "EMSF", "20", "4", "gen_loglik"); !(start < end && end < em) {
			t.Errorf("mu-repa log-likelihood %v -> %v, EMSF %v: want start < repa < EMSF", start, end, em)
		}
		for _, rule := range []string{"normHMM", "repaHMM", "relaHMM"} {
			if v := value(t, rows, "hmm", rule, "20000", "3", "hmm_final_objective"); !(v > 0 && v < 1e-3) {
				t.Errorf("%s final objective %v", rule, v)
			}
		}
		var b strings.Builder
		for _, r := range rows {
			if r[5] != "hmm_seconds" {
				b.WriteString(strings.Join(r, ",") + "\n")
			}
		}
		csvs = append(csvs, b.String())
	}
	if csvs[0] != csvs[1] {
		t.Error("1 and 2 workers give different CSVs")
	}
}

// TestExperimentOnlineEM: the online-em experiment on a short stream:
// online EM's KL_ρ falls along the stream for a = 0.8, the exact online EM
// of the paper's setting gets closer to the true B, and the flags are
// checked.
func TestExperimentOnlineEM(t *testing.T) {
	dir := t.TempDir()
	mustEmsf(t, "experiment", "online-em", "--runs", "1", "--seed", "2", "--sizes", "1000,20000", "--gamma-exp", "0.8",
		"--commit-every", "1000", "--alpha", "0.1", "--order", "10", "--nmf-steps", "2000", "--quiet", "--out", dir)
	rows := relatedRows(t, dir, "online-em", "online-em", "online-em-nmf")
	early, late := value(t, rows, "emsf", "online EM a=0.8", "1000", "2", "kl_rho"), value(t, rows, "emsf", "online EM a=0.8", "20000", "2", "kl_rho")
	if !(late < early) {
		t.Errorf("online EM KL_ρ %v at 1000, %v at 20000", early, late)
	}
	value(t, rows, "emsf", "incremental EMSF t_c=1000, α=0.1", "20000", "2", "kl_rho")
	first, last := value(t, rows, "nmf", "exact online EM (Fig. 1)", "1", "2", "b_rel_error"), value(t, rows, "nmf", "exact online EM (Fig. 1)", "2000", "2", "b_rel_error")
	if !(last < first/2) {
		t.Errorf("B relative error %v at t = 1, %v at t = 2000", first, last)
	}
	code, _, errs := emsf(t, "experiment", "online-em", "--gamma-exp", "0.4", "--out", dir)
	if code != 2 || !strings.Contains(errs, "--gamma-exp") {
		t.Errorf("exit %d, stderr %q", code, errs)
	}
}

// TestExperimentEPCA: the epca experiment on small data writes its CSV
// and PNGs; E-PCA with one basis (the all-ones one) is uniform, so its
// held-out log-likelihood is log((1−δ)/n + δ/n) = −log n; more bases fit
// the training rows better.
func TestExperimentEPCA(t *testing.T) {
	dir := t.TempDir()
	mustEmsf(t, "experiment", "epca", "--runs", "1", "--seed", "5", "--sizes", "3000", "--hands", "2000", "--bases", "1,4",
		"--epca-iters", "20", "--iters", "50", "--quiet", "--out", dir)
	rows := relatedRows(t, dir, "epca", "epca", "epca-blackjack", "epca-kl")
	if v := value(t, rows, "gen", "E-PCA", "1", "5", "heldout_loglik"); math.Abs(v+math.Log(100)) > 1e-9 {
		t.Errorf("E-PCA with the constant basis only: held-out %v, want −log 100", v)
	}
	for _, s := range []string{"gen", "blackjack"} {
		one, four := value(t, rows, s, "E-PCA", "1", "5", "row_kl"), value(t, rows, s, "E-PCA", "4", "5", "row_kl")
		if !(four < one) {
			t.Errorf("%s: E-PCA training row KL %v with 1 basis, %v with 4", s, one, four)
		}
		value(t, rows, s, "EMSF", "4", "5", "heldout_loglik")
	}
	code, _, errs := emsf(t, "experiment", "epca", "--bases", "0", "--out", dir)
	if code != 2 || !strings.Contains(errs, "--bases") {
		t.Errorf("exit %d, stderr %q", code, errs)
	}
}
