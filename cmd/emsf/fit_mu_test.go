package main

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/coordinator"
)

// TestAlgorithmMU: fit --algorithm mu-norm (--loss wkl) gives the model
// EMSF gives from the same seed and iterations (to rounding); mu-rela
// --loss frob writes a stochastic model recorded with its loss; bad
// combinations are usage errors naming the flag.
func TestAlgorithmMU(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "t.csv")
	mustEmsf(t, "gen", "--states", "20", "--true-order", "3", "--transitions", "3000", "--actions", "2",
		"--out", data, "--truth", "")
	common := []string{"fit", "--input", data, "--order", "3", "--iters", "15", "--tol", "0", "--seed", "4", "--quiet", "--shard-nnz", "40"}
	emOut, muOut := filepath.Join(dir, "em.arrow"), filepath.Join(dir, "mu.arrow")
	mustEmsf(t, append(common, "--out", emOut)...)
	stdout := mustEmsf(t, append(common, "--algorithm", "mu-norm", "--out", muOut, "--workers", "3")...)
	if !strings.Contains(stdout, "mu-norm (--loss wkl) model n=20 m=3 u=2") {
		t.Errorf("output: %s", stdout)
	}
	em, err := arrowio.ReadModel(emOut)
	if err != nil {
		t.Fatal(err)
	}
	mu, err := arrowio.ReadModel(muOut)
	if err != nil {
		t.Fatal(err)
	}
	for b := range em.Model.D {
		for k, v := range em.Model.D[b] {
			if d := math.Abs(v - mu.Model.D[b][k]); d > 1e-10 {
				t.Fatalf("D[%d][%d]: EMSF %v, mu-norm %v", b, k, v, mu.Model.D[b][k])
			}
		}
	}
	if mu.Params["algorithm"] != "mu-norm" || mu.Params["loss"] != "wkl" {
		t.Errorf("params %v", mu.Params)
	}
	// --iters 15 --tol 0: both stop at the limit (no warning: --tol 0
	// asks for no convergence), and say so as EMSF does.
	if mu.Status != "iteration limit" || em.Status != mu.Status {
		t.Errorf("status mu-norm %q, EMSF %q; want iteration limit", mu.Status, em.Status)
	}
	code, _, errs := emsf(t, "fit", "--input", data, "--order", "3", "--algorithm", "mu-repa", "--tol", "0.5", "--out", muOut)
	if code != 0 {
		t.Fatalf("mu-repa --tol 0.5: exit %d\n%s", code, errs)
	}
	if mu, err = arrowio.ReadModel(muOut); err != nil {
		t.Fatal(err)
	}
	if mu.Status != "converged" {
		t.Errorf("mu-repa --tol 0.5: status %q; want converged", mu.Status)
	}

	frob := filepath.Join(dir, "frob.arrow")
	mustEmsf(t, append(common, "--algorithm", "mu-rela", "--loss", "frob", "--out", frob)...)
	mf, err := arrowio.ReadModel(frob)
	if err != nil {
		t.Fatal(err)
	}
	if err := mf.Model.Validate(); err != nil {
		t.Error(err)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--order", "3", "--algorithm", "mu-norm", "--loss", "l2"}, `--loss "l2"`},
		{[]string{"--order", "3", "--algorithm", "mu-repa", "--loss", "frob", "--tie", "shared-k"}, "--tie must be none"},
		{[]string{"--order", "3", "--algorithm", "mu-rela", "--alpha", "0.5"}, "--alpha"},
		{[]string{"--order", "3", "--algorithm", "mu-rela", "--incremental"}, "--incremental"},
		{[]string{"--order", "3", "--loss", "frob"}, "--loss frob is for --algorithm mu-"},
		{[]string{"--algorithm", "cnt", "--loss", "kl"}, "--loss kl is for --algorithm mu-"},
	} {
		code, _, errs := emsf(t, append([]string{"fit", "--input", data, "--quiet", "--out", filepath.Join(dir, "x.arrow")}, tc.args...)...)
		if code != 2 || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, errs, tc.want)
		}
	}
	assertOnlyFiles(t, dir, "em.arrow", "frob.arrow", "mu.arrow", "t.csv")
}

// TestAlgorithmMUCluster: fit --algorithm mu-repa --embedded (3
// in-process NATS workers computing EMSF's partials, MU's commit on the
// coordinator) writes bitwise the model of the local fit, with two
// restarts, and its job resumes as MU only; --loss kl on a cluster is refused with one error naming the
// flag, its value and why, before anything is written.
func TestAlgorithmMUCluster(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "t.csv")
	mustEmsf(t, "gen", "--states", "20", "--true-order", "3", "--transitions", "3000", "--actions", "2",
		"--out", data, "--truth", "")
	common := []string{"fit", "--input", data, "--order", "3", "--iters", "8", "--tol", "1e-9", "--seed", "4", "--restarts", "2",
		"--quiet", "--shard-nnz", "40", "--group-nnz", "60", "--algorithm", "mu-repa"}
	localOut, clusterOut := filepath.Join(dir, "local.arrow"), filepath.Join(dir, "cluster.arrow")
	mustEmsf(t, append(common, "--out", localOut, "--workers", "2")...)
	store := filepath.Join(dir, "store")
	clusterArgs := append(common, "--out", clusterOut, "--embedded", "--store", store, "--workers", "3", "--job", "mu")
	stdout := mustEmsf(t, clusterArgs...)
	if !strings.Contains(stdout, "mu-repa (--loss wkl) model n=20 m=3 u=2") {
		t.Errorf("output: %s", stdout)
	}
	local, err := arrowio.ReadModel(localOut)
	if err != nil {
		t.Fatal(err)
	}
	cluster, err := arrowio.ReadModel(clusterOut)
	if err != nil {
		t.Fatal(err)
	}
	same := func(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) }
	if l, c := local.Model, cluster.Model; !c.Equal(l) || c.Iteration != l.Iteration || c.Seed != l.Seed ||
		!same(c.LogLik, l.LogLik) || !same(c.WKL, l.WKL) || cluster.Status != local.Status {
		t.Fatalf("cluster model (seed %d, %d iterations, loglik %v, %s) differs from the local one (seed %d, %d, %v, %s)",
			c.Seed, c.Iteration, c.LogLik, cluster.Status, l.Seed, l.Iteration, l.LogLik, local.Status)
	}
	if cluster.Params["algorithm"] != "mu-repa" || cluster.Params["loss"] != "wkl" {
		t.Errorf("params %v", cluster.Params)
	}

	// The job (the restarts share its name: the last one, seed 5, holds
	// it) resumes as MU only: EMSF refuses its checkpoint, naming the
	// algorithm, as MU refuses an EMSF checkpoint that names none (from
	// before MU ran on a cluster).
	mustEmsf(t, append(clusterArgs, "--seed", "5", "--restarts", "1", "--resume")...)
	emsfArgs := []string{"fit", "--input", data, "--order", "3", "--iters", "8", "--tol", "1e-9", "--seed", "5",
		"--shard-nnz", "40", "--group-nnz", "60", "--out", clusterOut, "--embedded", "--store", store, "--job", "mu", "--resume"}
	code, _, errs := emsf(t, emsfArgs...)
	if want := `algorithm ("mu-repa" in the checkpoint, "emsf" now)`; code == 0 || !strings.Contains(errs, want) {
		t.Errorf("EMSF resuming an MU job: exit %d, stderr %q; want a refusal naming %s", code, errs, want)
	}
	old := &coordinator.JobState{Job: "old", Iteration: 3, Params: map[string]string{"order": "3"}}
	if err := coordinator.CheckResume(emsfByDefault(old), map[string]string{"order": "3", "algorithm": "mu-norm"}, nil); err == nil ||
		!strings.Contains(err.Error(), `algorithm ("emsf" in the checkpoint, "mu-norm" now)`) || old.Params["algorithm"] != "" {
		t.Errorf("MU resuming a checkpoint that names no algorithm: %v (checkpoint params now %v)", err, old.Params)
	}

	bad := filepath.Join(dir, "kl.arrow")
	code, _, errs = emsf(t, "fit", "--input", data, "--order", "3", "--algorithm", "mu-norm", "--loss", "kl", "--embedded", "--out", bad)
	want := "--loss kl: --algorithm mu-norm runs on a cluster (--nats/--embedded) only with --loss wkl"
	if code != 2 || !strings.Contains(errs, want) || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
		t.Errorf("--loss kl --embedded: exit %d, stderr %q; want 2 and one line saying %q", code, errs, want)
	}
	assertOnlyFiles(t, dir, "cluster.arrow", "local.arrow", "store", "t.csv")
}
