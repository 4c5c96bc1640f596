package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/emsf/emsf/factor"
)

// twoRowFile is the file of issue 26: two rows whose largest indices ask
// for a model of 7 405 600 states and 2049 actions (about a terabyte).
const twoRowFile = "state,action,next_state\n7405599,2048,0\n0,0,1\n"

// TestFitRefusesTooLargeModels: every algorithm of emsf fit, local, on a
// cluster and incremental, estimates the memory of its model and
// statistics from n, u and m before allocating them and refuses, with
// one error naming n, u, m and the bytes, what is above --max-model-bytes
// (default: 3/4 of this machine's memory). Nothing is written.
func TestFitRefusesTooLargeModels(t *testing.T) {
	dir := t.TempDir()
	two := writeFile(t, dir, "two.csv", twoRowFile)
	for _, c := range [][]string{
		{"--algorithm", "emsf"},
		{"--algorithm", "emsf", "--restarts", "2", "--precision", "float32"},
		{"--algorithm", "emsf", "--embedded", "--workers", "1"},
		{"--algorithm", "emsf", "--exchange", "coordinator", "--nats", ""},
		{"--algorithm", "klm"},
		{"--algorithm", "cnt"},
		{"--algorithm", "mu-norm"},
		{"--algorithm", "mu-repa", "--loss", "kl"},
		{"--algorithm", "mu-rela", "--loss", "frob"},
		{"--incremental"},
		{"--incremental", "--online-em"},
	} {
		t.Run(strings.Join(c, " "), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "m.arrow")
			args := append([]string{"fit", "--input", two, "--order", "2", "--quiet", "--out", out}, c...)
			if strings.Contains(strings.Join(c, " "), "cnt") {
				args = append([]string{"fit", "--input", two, "--quiet", "--out", out}, c...)
			}
			if args[len(args)-1] == "" {
				// A real server (the preflight dials it); no worker is
				// needed: the coordinator, which reads the data on this
				// path, refuses before it waits for one. (On the path
				// from metadata the workers read the data: --embedded
				// above refuses after their ingest, before any model.)
				args[len(args)-1], _ = embeddedNATS(t, true)
			}
			code, _, errs := emsf(t, args...)
			if code == 0 {
				t.Fatal("fit of the two-row file succeeded")
			}
			for _, want := range []string{"n = 7405600 states", "u = 2049 actions", "bytes", "--max-model-bytes", "7405599", "2048"} {
				if !strings.Contains(errs, want) {
					t.Errorf("error %q does not say %q", errs, want)
				}
			}
			if strings.Count(strings.TrimSpace(errs), "\n") > 0 {
				t.Errorf("more than one line: %q", errs)
			}
			assertOnlyFiles(t, filepath.Dir(out))
		})
	}
}

// TestFitMaxModelBytes: --max-model-bytes bounds the estimate exactly:
// one byte below the model and statistics of a small fit refuses it,
// the estimate itself passes, and a bad value is a usage error.
func TestFitMaxModelBytes(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "t.csv")
	mustEmsf(t, "gen", "--states", "30", "--actions", "2", "--true-order", "3", "--transitions", "400", "--out", data, "--truth", "")
	// n = 30, u = 2, m = 3: D and K 2·2·30·3·8 = 2880 bytes, the
	// accumulator as much, x 2·30·8 = 480: 6240 (--plain, which the
	// tests' emsf adds). The default fit (--smooth auto names it) adds
	// SQUAREM's iterates 3·2880, the logs of two iterates of D and K
	// under the prior 2·1440 + 2·1440, the prior's next-state frequencies
	// 2·30·8 = 480 and the early stop's kept model 2880: 24000.
	fit := func(extra ...string) (int, string) {
		code, _, errs := emsf(t, append([]string{"fit", "--input", data, "--order", "3", "--iters", "2", "--quiet", "--out", filepath.Join(dir, "m.arrow")}, extra...)...)
		return code, errs
	}
	for _, c := range []struct {
		need  int
		flags []string
	}{{6240, nil}, {24000, []string{"--smooth", "auto"}}} {
		need := c.need
		if code, errs := fit(append(c.flags, "--max-model-bytes", fmt.Sprint(need-1))...); code != 1 || !strings.Contains(errs, fmt.Sprintf("needs about %d bytes", need)) ||
			!strings.Contains(errs, fmt.Sprintf("limit of %d bytes", need-1)) {
			t.Errorf("%v --max-model-bytes %d: exit %d, %q", c.flags, need-1, code, errs)
		}
		if code, errs := fit(append(c.flags, "--max-model-bytes", fmt.Sprint(need))...); code != 0 {
			t.Errorf("%v --max-model-bytes %d: exit %d, %q", c.flags, need, code, errs)
		}
	}
	if code, errs := fit("--max-model-bytes", "-5"); code != 2 || !strings.Contains(errs, "--max-model-bytes -5") {
		t.Errorf("--max-model-bytes -5: exit %d, %q", code, errs)
	}
}

// TestFitSparseIndices: a stray large index in a small file (the fault
// campaign's corrupted inputs that took 20–40 s and gigabytes for 500
// rows) is refused unless --states or --actions confirms the size; with
// the flag the fit runs.
func TestFitSparseIndices(t *testing.T) {
	dir := t.TempDir()
	var rows strings.Builder
	rows.WriteString("state,action,next_state\n")
	for i := range 500 {
		fmt.Fprintf(&rows, "%d,%d,%d\n", i%50, i%2, (i*7)%50)
	}
	base := rows.String()
	for _, c := range []struct {
		name, row, want, fix string
	}{
		{"state", "1000000,1,9\n", "the largest state index is 1000000, so n would be 1000001 states, but the input has only 501 transitions", "--states"},
		{"next state", "3,1,5000000\n", "the largest state index is 5000000", "--states"},
		{"action", "10,4095,31\n", "the largest action index is 4095, so u would be 4096 actions, but only 3 of them have transitions", "--actions"},
	} {
		t.Run(c.name, func(t *testing.T) {
			sub := t.TempDir()
			in := writeFile(t, sub, "c.csv", base+c.row)
			out := filepath.Join(sub, "m.arrow")
			for _, mode := range [][]string{nil, {"--incremental"}, {"--holdout", "0.2"}} {
				args := append([]string{"fit", "--input", in, "--order", "2", "--iters", "1", "--quiet", "--out", out}, mode...)
				code, _, errs := emsf(t, args...)
				if code != 2 || !strings.Contains(errs, c.want) || !strings.Contains(errs, "pass "+c.fix+" N") || !strings.Contains(errs, "c.csv") {
					t.Errorf("%v: exit %d, %q; want %q", mode, code, errs, c.want)
				}
				assertOnlyFiles(t, sub, "c.csv")
			}
		})
	}
	// Confirmed by the flag, the size is taken.
	in := writeFile(t, dir, "a.csv", base+"10,99,31\n")
	mustEmsf(t, "fit", "--input", in, "--order", "2", "--iters", "1", "--quiet", "--actions", "100", "--out", filepath.Join(dir, "m.arrow"))
	in = writeFile(t, dir, "s.csv", base+"70000,1,9\n")
	mustEmsf(t, "fit", "--input", in, "--order", "2", "--iters", "1", "--quiet", "--states", "70001", "--out", filepath.Join(dir, "m.arrow"))
}

// TestMachineMemory: the default limit comes from this machine (Linux:
// MemTotal or the cgroup's limit).
func TestMachineMemory(t *testing.T) {
	mem, src := machineMemory()
	if mem <= 0 || src == "" {
		t.Skipf("no /proc/meminfo here (%d, %q)", mem, src)
	}
	var l limitFlags
	lim, why := l.limit()
	if lim != int64(modelFraction*float64(mem)) || !strings.Contains(why, src) {
		t.Errorf("default limit %d (%s) for %d bytes of memory from %s", lim, why, mem, src)
	}
	l.maxModelBytes = 12345
	if lim, why := l.limit(); lim != 12345 || why != "--max-model-bytes" {
		t.Errorf("--max-model-bytes 12345: %d, %q", lim, why)
	}
}

// TestCheckCluster: a fit whose workers hold the model checks it against
// 3/4 of the memory they announce together (not this machine's), exactly;
// --max-model-bytes wins; without every worker's memory there is no
// default.
func TestCheckCluster(t *testing.T) {
	fp := factor.Footprint{N: 1000, M: 4, U: 1}
	var l limitFlags
	if err := l.checkCluster("a cluster fit", fp, 750, 1000, 2, true); err != nil {
		t.Errorf("750 bytes of 3/4·1000: %v", err)
	}
	err := l.checkCluster("a cluster fit", fp, 751, 1000, 2, true)
	if err == nil || !strings.Contains(err.Error(), "its 2 workers announce") || !strings.Contains(err.Error(), "needs about 751 bytes") {
		t.Errorf("751 bytes of 3/4·1000: %v", err)
	}
	if err := l.checkCluster("a cluster fit", fp, 1<<40, 1000, 2, false); err != nil {
		t.Errorf("a worker that announced no memory: %v", err)
	}
	l.maxModelBytes = 100
	if err := l.checkCluster("a cluster fit", fp, 101, 1<<40, 2, true); err == nil || !strings.Contains(err.Error(), "(100 B, --max-model-bytes)") {
		t.Errorf("--max-model-bytes 100, 101 bytes: %v", err)
	}
}
