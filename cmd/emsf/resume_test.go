package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// emsf fit --resume on an embedded server's store refuses a run whose data
// or parameters differ from the checkpoint's, naming what differs, and
// resumes the same run.
func TestResumeMismatch(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.csv"), filepath.Join(dir, "b.csv")
	writeTransitions(t, a, 60, 2, 2000)
	writeTransitions(t, b, 60, 2, 2100)
	store := filepath.Join(dir, "store")
	out := filepath.Join(dir, "model.arrow")
	fit := func(data string, extra ...string) []string {
		return append([]string{"fit", "--input", data, "--order", "3", "--iters", "3", "--tol", "0", "--seed", "1",
			"--embedded", "--store", store, "--workers", "2", "--out", out, "--log-level", "info"}, extra...)
	}
	mustEmsf(t, fit(a)...)
	mustEmsf(t, fit(a, "--job", "named")...)
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"order", fit(a, "--resume", "--order", "4"), []string{`order ("3" in the checkpoint, "4" now)`}},
		{"seed", fit(a, "--resume", "--seed", "7"), []string{`seed ("1" in the checkpoint, "7" now)`}},
		{"data", fit(b, "--resume"), []string{"data (", "input " + a + " in the checkpoint, " + b + " now"}},
		{"named job", fit(a, "--resume", "--job", "named", "--order", "4"), []string{"resume job named:", `order ("3" in the checkpoint, "4" now)`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := emsf(t, tc.args...)
			if code == 0 {
				t.Fatalf("emsf %s: exit 0, want a refusal", strings.Join(tc.args, " "))
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr does not say %q:\n%s", w, stderr)
				}
			}
		})
	}
	// The same run resumes (from iteration 3, its limit: nothing to do).
	for _, args := range [][]string{fit(a, "--resume"), fit(a, "--resume", "--job", "named")} {
		code, stdout, stderr := emsf(t, args...)
		if code != 0 || !strings.Contains(stderr, "resuming") {
			t.Fatalf("emsf %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, stdout, stderr)
		}
	}
}

// TestResumeKeepsExchange: --exchange auto (the default) resumes a job
// with the exchange it started with, and a job's recorded exchange is a
// parameter: --resume with the other one, named, is refused.
func TestResumeKeepsExchange(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "a.csv")
	writeTransitions(t, data, 60, 2, 2000)
	store := filepath.Join(dir, "store")
	out := filepath.Join(dir, "model.arrow")
	fit := func(extra ...string) []string {
		return append([]string{"fit", "--input", data, "--order", "3", "--iters", "3", "--tol", "0", "--seed", "1",
			"--embedded", "--store", store, "--workers", "2", "--out", out, "--log-level", "info"}, extra...)
	}
	mustEmsf(t, fit("--exchange", "coordinator", "--job", "coord")...)
	mustEmsf(t, fit("--job", "auto")...)
	for _, job := range []string{"coord", "auto"} {
		code, stdout, stderr := emsf(t, fit("--resume", "--job", job)...)
		if code != 0 || !strings.Contains(stderr, "resuming") {
			t.Fatalf("--resume --job %s: exit %d\nstdout:\n%s\nstderr:\n%s", job, code, stdout, stderr)
		}
	}
	code, _, stderr := emsf(t, fit("--resume", "--job", "coord", "--exchange", "owners")...)
	if code == 0 || !strings.Contains(stderr, `exchange ("coordinator" in the checkpoint, "owners" now)`) {
		t.Fatalf("--resume of a coordinator job with --exchange owners: exit %d, stderr:\n%s", code, stderr)
	}
}
