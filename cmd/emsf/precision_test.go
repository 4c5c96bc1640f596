package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/emsf/emsf/arrowio"
)

// emsf fit --precision: a bad value and the fits that do not run float32
// are refused with one usage line naming the flag, before any file is
// written.
func TestFitPrecisionRefused(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "t.csv")
	writeTransitions(t, in, 40, 2, 500)
	out := filepath.Join(dir, "model.arrow")
	base := []string{"fit", "--input", in, "--order", "4", "--iters", "2", "--out", out}
	for _, tc := range []struct {
		extra []string
		want  string
	}{
		{[]string{"--precision", "float16"}, `--precision "float16": want float64 or float32`},
		{[]string{"--precision", "float32", "--incremental"}, "--precision float32 does not run with --incremental"},
		{[]string{"--precision", "float32", "--algorithm", "mu-norm"}, "--precision float32 runs --algorithm emsf only"},
		{[]string{"--precision", "float32", "--alpha", "0.05"}, "--precision float32 needs --alpha >= 0.1"},
	} {
		code, _, stderr := emsf(t, append(base, tc.extra...)...)
		if code != 2 || !strings.Contains(stderr, tc.want) || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and one line saying %q", tc.extra, code, stderr, tc.want)
		}
	}
	assertOnlyFiles(t, dir, "t.csv")
	if code, _, stderr := emsf(t, "bench", "--precision", "double"); code != 2 || !strings.Contains(stderr, `--precision "double"`) {
		t.Errorf("bench --precision double: exit %d, stderr %q", code, stderr)
	}
}

// readFit reads a model file that emsf fit wrote.
func readFit(t *testing.T, path string) *arrowio.ModelFile {
	t.Helper()
	mf, err := arrowio.ReadModel(path)
	if err != nil {
		t.Fatal(err)
	}
	return mf
}

// emsf fit --precision float32 writes the same model, bitwise, for
// --workers 1, 2 and 3, locally and on an embedded cluster with 1 and 3
// workers (the owners exchange, and the coordinator exchange); every factor entry is a
// float32 value, the file says precision float32 and reads back valid;
// a float64 fit's file names no precision, and the two fits' loglik per
// transition agree to 1e-6.
func TestFitFloat32LocalEqualsCluster(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "t.csv")
	const count = 3000
	writeTransitions(t, in, 80, 2, count)
	fit := func(name string, extra ...string) *arrowio.ModelFile {
		out := filepath.Join(dir, name+".arrow")
		mustEmsf(t, append([]string{"fit", "--input", in, "--order", "4", "--iters", "6", "--tol", "0", "--seed", "3",
			"--shard-nnz", "150", "--out", out}, extra...)...)
		return readFit(t, out)
	}
	want := fit("local1", "--precision", "float32", "--workers", "1")
	if got := want.Params["precision"]; got != "float32" {
		t.Fatalf("model file records precision %q, want float32", got)
	}
	md := want.Model
	for _, x := range append(md.D, md.KT...) {
		for _, v := range x {
			if float64(float32(v)) != v {
				t.Fatalf("entry %v is not a float32 value", v)
			}
		}
	}
	runs := map[string][]string{
		"local2":    {"--workers", "2"},
		"local3":    {"--workers", "3"},
		"embedded1": {"--workers", "1", "--embedded"},
		"embedded3": {"--workers", "3", "--embedded"},
		// The default exchange is owners; the coordinator exchange too.
		"coordinator3": {"--workers", "3", "--embedded", "--exchange", "coordinator"},
	}
	for name, extra := range runs {
		got := fit(name, append(extra, "--precision", "float32")...)
		if !got.Model.Equal(md) || got.Model.LogLik != md.LogLik {
			t.Errorf("%s: float32 model differs from --workers 1's (loglik %.17g vs %.17g)", name, got.Model.LogLik, md.LogLik)
		}
	}
	f64 := fit("f64", "--workers", "2")
	if p, ok := f64.Params["precision"]; ok {
		t.Errorf("float64 model file records precision %q; want none (files as before)", p)
	}
	if d := (f64.Model.LogLik - md.LogLik) / count; d > 1e-6 || d < -1e-6 {
		t.Errorf("loglik per transition: float64 %.10g, float32 %.10g", f64.Model.LogLik/count, md.LogLik/count)
	}
	// A float32 model warm-starts a float64 fit (its file validates).
	mustEmsf(t, "fit", "--input", in, "--order", "4", "--iters", "1", "--init", filepath.Join(dir, "local1.arrow"),
		"--out", filepath.Join(dir, "warm.arrow"))
}

// emsf fit --resume refuses to continue a job in another precision,
// naming --precision's parameter, both ways, and resumes a float32 job.
func TestResumePrecision(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "t.csv")
	writeTransitions(t, in, 60, 2, 2000)
	store := filepath.Join(dir, "store")
	out := filepath.Join(dir, "model.arrow")
	fit := func(job string, extra ...string) []string {
		return append([]string{"fit", "--input", in, "--order", "4", "--iters", "3", "--tol", "0", "--seed", "1",
			"--embedded", "--store", store, "--workers", "2", "--out", out, "--log-level", "info", "--job", job}, extra...)
	}
	mustEmsf(t, fit("j64")...)
	mustEmsf(t, fit("j32", "--precision", "float32")...)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{fit("j64", "--resume", "--precision", "float32"), `precision ("float64" in the checkpoint, "float32" now)`},
		{fit("j32", "--resume"), `precision ("float32" in the checkpoint, "float64" now)`},
	} {
		code, _, stderr := emsf(t, tc.args...)
		if code == 0 || !strings.Contains(stderr, tc.want) {
			t.Errorf("emsf %s: exit %d; want a refusal saying %q:\n%s", strings.Join(tc.args, " "), code, tc.want, stderr)
		}
	}
	// The same run resumes (from iteration 3, its limit).
	code, stdout, stderr := emsf(t, fit("j32", "--resume", "--precision", "float32")...)
	if code != 0 || !strings.Contains(stderr, "resuming") {
		t.Fatalf("resume float32: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	mf := readFit(t, out)
	if mf.Model.Iteration != 3 || mf.Params["precision"] != "float32" {
		t.Fatalf("resumed float32 job: iteration %d, precision %q", mf.Model.Iteration, mf.Params["precision"])
	}
	if err := mf.Model.Validate(); err != nil {
		t.Fatal(err)
	}
}
