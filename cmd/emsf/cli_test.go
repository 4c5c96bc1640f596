package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/factor"
)

// emsf runs the command in-process and returns its exit code and output.
func emsf(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	args = plainByDefault(args)
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

// plainByDefault adds --plain to a fit that names none of the flags of
// issue 28 (--plain, --accel, --smooth, --stop, --start, --prior-d,
// --prior-k, --validation, --patience, --min-gain): the tests written before it pin the bits of
// plain EM (fit's defaults now extrapolate, smooth and stop on a
// validation split); a test of the new defaults names one of the flags
// (e.g. --stop auto).
func plainByDefault(args []string) []string {
	if len(args) == 0 || args[0] != "fit" {
		return args
	}
	for _, a := range args {
		for _, f := range []string{"--plain", "--accel", "--smooth", "--stop", "--start", "--prior-d", "--prior-k", "--validation", "--patience", "--min-gain"} {
			if a == f || strings.HasPrefix(a, f+"=") {
				return args
			}
		}
	}
	return append(slices.Clone(args), "--plain")
}

// mustEmsf runs the command and fails the test unless it exits 0.
func mustEmsf(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errs := emsf(t, args...)
	if code != 0 {
		t.Fatalf("emsf %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out, errs)
	}
	return out
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// assertOnlyFiles fails unless dir holds exactly the named files (no model,
// no temporary file left behind).
func assertOnlyFiles(t *testing.T, dir string, names ...string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	if strings.Join(got, ",") != strings.Join(names, ",") {
		t.Fatalf("files in %s = %v; want %v", dir, got, names)
	}
}

func TestHelpListsEverySubcommand(t *testing.T) {
	out := mustEmsf(t, "help")
	for _, c := range commands() {
		if !strings.Contains(out, c.name) {
			t.Errorf("emsf help does not list %q", c.name)
		}
		// Help goes to stdout (| less shows it), nothing to stderr.
		if code, out, errs := emsf(t, c.name, "-h"); code != 0 || !strings.Contains(out, "Usage: emsf "+c.name) || errs != "" {
			t.Errorf("emsf %s -h: exit %d, stdout %q, stderr %q", c.name, code, out, errs)
		}
	}
	if code, out, errs := emsf(t, "help", "fit"); code != 0 || errs != "" ||
		!strings.Contains(out, "\nInput:\n  --actions") || !strings.Contains(out, "\nCluster and NATS:\n") ||
		strings.Index(out, "\n  --order ") > strings.Index(out, "\n  --nats ") || strings.Index(out, "\n  --out ") < strings.Index(out, "\n  --tol ") {
		t.Errorf("emsf help fit: exit %d, stderr %q; want its flags grouped on stdout:\n%s", code, errs, out)
	}
	if code, out, _ := emsf(t, "--version"); code != 0 || !strings.HasPrefix(out, "emsf ") || !strings.Contains(out, "go1.") {
		t.Errorf("emsf --version: exit %d, %q", code, out)
	}
	if code, _, errs := emsf(t, "fit", "--nope"); code != 2 || !strings.Contains(errs, "--nope") && !strings.Contains(errs, "-nope") || strings.Contains(errs, "Usage") {
		t.Errorf("emsf fit --nope: exit %d, stderr %q; want one line naming the flag", code, errs)
	}
	if code, _, errs := emsf(t, "nope"); code != 2 || !strings.Contains(errs, `unknown command "nope"`) {
		t.Errorf("unknown command: exit %d, %q", code, errs)
	}
}

const goodCSV = "state,action,next_state,count\n0,0,1,1\n1,0,2,2\n2,0,0,1\n0,0,2,1\n1,0,0,1\n"

// TestFitBadInput runs emsf fit on each kind of bad input and checks for one
// clear error naming the file, row, column or flag and the bad value, a
// non-zero exit, and no model file left behind.
func TestFitBadInput(t *testing.T) {
	good := goodCSV
	for _, tc := range []struct {
		name  string
		data  string // CSV content; "" means no file
		args  []string
		wants []string
	}{
		{"missing file", "", nil, []string{"data.csv", "no such file"}},
		{"unknown column flag", good, []string{"--col-state", "from"}, []string{"data.csv", `"from"`, `"next_state"`}},
		{"missing column", "state,action\n0,0\n", nil, []string{"data.csv", `"next_state"`}},
		{"non-integer state", "state,action,next_state\n0,0,1\n1.5,0,1\n", nil, []string{"data.csv", "row 2", `"state"`, "1.5"}},
		{"text state", "state,action,next_state\n0,0,1\nabc,0,1\n", []string{"--ids", "int"}, []string{"data.csv", "row 2", `"state"`, "abc", "--ids int"}},
		{"negative state", "state,action,next_state\n0,0,1\n0,0,-3\n", nil, []string{"data.csv", "row 2", `"next_state"`, "-3"}},
		{"negative action", "state,action,next_state\n0,-1,1\n", nil, []string{"data.csv", "row 1", `"action"`, "-1"}},
		{"state out of range", "state,action,next_state\n0,0,1\n7,0,1\n", []string{"--states", "3"}, []string{"data.csv", "row 2", `"state"`, "7"}},
		{"action out of range", "state,action,next_state\n0,2,1\n", []string{"--actions", "2"}, []string{"data.csv", "row 1", `"action"`, "2"}},
		{"NaN count", "state,action,next_state,count\n0,0,1,1\n1,0,1,NaN\n", nil, []string{"data.csv", "row 2", `"count"`, "NaN"}},
		{"infinite count", "state,action,next_state,count\n0,0,1,+Inf\n", nil, []string{"data.csv", "row 1", `"count"`, "Inf"}},
		{"negative count", "state,action,next_state,count\n0,0,1,-2\n", nil, []string{"data.csv", "row 1", `"count"`, "-2"}},
		{"zero count", "state,action,next_state,count\n0,0,1,0\n", nil, []string{"data.csv", "row 1", `"count"`, "0"}},
		{"empty data", "state,action,next_state\n", nil, []string{"data.csv", "no"}},
		{"huge state index", "state,action,next_state\n0,0,1\n2000000000,0,1\n", nil, []string{"data.csv", "2000000000", "--states"}},
		{"ragged CSV", "state,action,next_state\n0,0,1\n1,0\n", nil, []string{"data.csv"}},
		{"order zero", good, []string{"--order", "0"}, []string{"--order", "0"}},
		{"order above n", good, []string{"--order", "4"}, []string{"--order 4", "n = 3"}},
		{"order not a number", good, []string{"--order", "five"}, []string{"--order", "five"}},
		{"bad tie", good, []string{"--tie", "both"}, []string{"--tie", "both"}},
		{"bad alpha", good, []string{"--alpha", "1.5"}, []string{"--alpha", "1.5"}},
		{"bad init-smooth", good, []string{"--init-smooth", "1"}, []string{"--init-smooth", "1"}},
		{"init-smooth without init", good, []string{"--init-smooth", "0.01"}, []string{"--init-smooth", "--init"}},
		{"bad holdout", good, []string{"--holdout", "1"}, []string{"--holdout", "1"}},
		{"several orders without holdout", good, []string{"--order", "1,2"}, []string{"--order", "--holdout"}},
		{"bad format", good, []string{"--format", "xlsx"}, []string{"--format", "xlsx"}},
		{"bad verify", good, []string{"--embedded", "--verify", "1.5"}, []string{"--verify", "1.5"}},
		{"dataset out not empty", good, []string{"--out", "."}, []string{"--out", "not empty"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			input := filepath.Join(dir, "data.csv")
			files := []string{}
			if tc.data != "" {
				writeFile(t, dir, "data.csv", tc.data)
				files = append(files, "data.csv")
			}
			args := append([]string{"fit", "--input", input, "--order", "2", "--quiet", "--out", filepath.Join(dir, "model.arrow")}, tc.args...)
			code, _, errs := emsf(t, args...)
			if code == 0 {
				t.Fatalf("exit 0; want an error")
			}
			for _, w := range tc.wants {
				if !strings.Contains(errs, w) {
					t.Errorf("error %q does not mention %q", errs, w)
				}
			}
			if n := strings.Count(strings.TrimSpace(errs), "\n"); n > 0 {
				t.Errorf("want one error line, got %d lines:\n%s", n+1, errs)
			}
			assertOnlyFiles(t, dir, files...)
		})
	}
}

// TestFitWarmStartMismatch checks each way a warm-start model can disagree
// with the fit: n, m, u and tie mode.
func TestFitWarmStartMismatch(t *testing.T) {
	dir := t.TempDir()
	input := writeFile(t, dir, "data.csv", goodCSV)
	for _, tc := range []struct {
		name    string
		model   *factor.Model
		args    []string
		wantMsg string
	}{
		{"states", factor.NewRandom(4, 2, 1, factor.TieNone, 1), nil, "n=4"},
		{"order", factor.NewRandom(3, 1, 1, factor.TieNone, 1), nil, "m=1"},
		{"actions", factor.NewRandom(3, 2, 2, factor.TieNone, 1), nil, "u=2"},
		{"tie", factor.NewRandom(3, 2, 1, factor.TieSharedK, 1), nil, "shared-k"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			initPath := filepath.Join(dir, tc.name+".arrow")
			if err := arrowio.WriteModel(initPath, &arrowio.ModelFile{Model: tc.model}, "arrow"); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(dir, "out-"+tc.name+".arrow")
			code, _, errs := emsf(t, "fit", "--input", input, "--order", "2", "--init", initPath, "--quiet", "--out", out)
			if code == 0 || !strings.Contains(errs, "--init") || !strings.Contains(errs, tc.wantMsg) {
				t.Fatalf("exit %d, error %q; want a --init error mentioning %q", code, errs, tc.wantMsg)
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Fatalf("a model was written despite the error")
			}
		})
	}
}

// TestFitBadModelFile checks truncated and corrupt model files given to --init.
func TestFitCorruptInputs(t *testing.T) {
	dir := t.TempDir()
	mustEmsf(t, "gen", "--states", "20", "--true-order", "4", "--transitions", "300", "--out", filepath.Join(dir, "t.arrow"), "--truth", "")
	mustEmsf(t, "gen", "--states", "20", "--true-order", "4", "--transitions", "300", "--out", filepath.Join(dir, "t.parquet"), "--truth", "")
	for _, name := range []string{"t.arrow", "t.parquet"} {
		for _, cut := range []string{"truncated", "corrupt"} {
			t.Run(name+" "+cut, func(t *testing.T) {
				data, err := os.ReadFile(filepath.Join(dir, name))
				if err != nil {
					t.Fatal(err)
				}
				if cut == "truncated" {
					data = data[:len(data)*2/3]
				} else {
					// Neither format checksums its data pages, so flipped
					// value bytes can read as other valid values; flip the
					// metadata at the end of the file (the footer of both).
					data = append([]byte(nil), data...)
					for i := len(data) - 72; i < len(data)-8; i++ {
						data[i] ^= 0x5a
					}
				}
				sub := t.TempDir()
				bad := writeFile(t, sub, "bad-"+name, string(data))
				code, _, errs := emsf(t, "fit", "--input", bad, "--order", "2", "--quiet", "--out", filepath.Join(sub, "m.arrow"))
				if code == 0 {
					t.Fatalf("fit on a %s %s file succeeded", cut, name)
				}
				if !strings.Contains(errs, "bad-"+name) {
					t.Errorf("error %q does not name the file", errs)
				}
				assertOnlyFiles(t, sub, "bad-"+name)
			})
		}
	}
}

// TestFitSameModelFromEveryFormat is the foundation issue's acceptance
// check: the same transitions as CSV, Arrow IPC and Parquet give bitwise
// identical models.
func TestFitSameModelFromEveryFormat(t *testing.T) {
	dir := t.TempDir()
	var models []*factor.Model
	for _, ext := range []string{"csv", "arrow", "parquet"} {
		in := filepath.Join(dir, "t."+ext)
		mustEmsf(t, "gen", "--states", "40", "--true-order", "6", "--actions", "2", "--transitions", "3000", "--seed", "9",
			"--out", in, "--truth", "")
		out := filepath.Join(dir, ext+".model.arrow")
		mustEmsf(t, "fit", "--input", in, "--order", "3", "--iters", "15", "--quiet", "--out", out)
		mf, err := arrowio.ReadModel(out)
		if err != nil {
			t.Fatal(err)
		}
		models = append(models, mf.Model)
	}
	for k := 1; k < len(models); k++ {
		if !models[0].Equal(models[k]) {
			t.Errorf("model from format %d differs from the CSV one", k)
		}
	}
}

// TestFitWorkersBitwise: --workers does not change the model.
func TestFitWorkersBitwise(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "t.csv")
	mustEmsf(t, "gen", "--states", "60", "--true-order", "5", "--transitions", "4000", "--out", in, "--truth", "")
	var ref *factor.Model
	for _, w := range []string{"1", "2", "7"} {
		out := filepath.Join(dir, "m"+w+".arrow")
		mustEmsf(t, "fit", "--input", in, "--order", "4", "--iters", "10", "--shard-nnz", "50", "--workers", w, "--quiet", "--out", out)
		mf, err := arrowio.ReadModel(out)
		if err != nil {
			t.Fatal(err)
		}
		if ref == nil {
			ref = mf.Model
		} else if !ref.Equal(mf.Model) {
			t.Errorf("--workers %s gives a different model than --workers 1", w)
		}
	}
}

// TestGenFitEvalBeatsCNT reproduces the point of emsf-ijcai2015 Fig. 2 at
// one sample size: with n = 100, true order 20 and 2 000 transitions, EMSF
// of order 5 is closer to the true P than counting.
func TestGenFitEvalBeatsCNT(t *testing.T) {
	dir := t.TempDir()
	in, truth, model := filepath.Join(dir, "t.csv"), filepath.Join(dir, "truth.arrow"), filepath.Join(dir, "m.arrow")
	mustEmsf(t, "gen", "--states", "100", "--true-order", "20", "--transitions", "2000", "--seed", "3", "--out", in, "--truth", truth)
	mustEmsf(t, "fit", "--input", in, "--order", "5", "--quiet", "--out", model)
	out := mustEmsf(t, "eval", "--model", model, "--input", in, "--truth", truth, "--cnt")
	mdTruth, err := arrowio.ReadModel(truth)
	if err != nil {
		t.Fatal(err)
	}
	mf, err := arrowio.ReadModel(model)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := loadData(t.Context(), &inputFlags{input: in, states: 100, actions: 1}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	cnt, err := factor.NewCNT(100, 1, ds.train, 0)
	if err != nil {
		t.Fatal(err)
	}
	fe, fc := factor.FrobeniusError(mdTruth.Model, mf.Model), factor.FrobeniusError(mdTruth.Model, cnt)
	if !(fe < fc) {
		t.Errorf("EMSF error %v is not below CNT's %v", fe, fc)
	}
	if !strings.Contains(out, "CNT") || !strings.Contains(out, "‖P − P̃‖_F") {
		t.Errorf("eval output lacks the comparison:\n%s", out)
	}
	// ρ is stated: empirical by default (the start states of --input), and
	// CNT's infinite KL_ρ explained.
	if !strings.Contains(out, "ρ, the weight of each row") || !strings.Contains(out, "empirical, the start-state frequencies of "+in) ||
		!strings.Contains(out, "KL_ρ is +Inf: in ") {
		t.Errorf("eval does not say which ρ weighs KL_ρ, or why CNT's is +Inf:\n%s", out)
	}
	// A --rho file of all weight on state 0 gives the KL of row 0 alone.
	rhoFile := writeFile(t, dir, "rho.csv", "state,weight\n0,2\n")
	out = mustEmsf(t, "eval", "--model", model, "--truth", truth, "--rho", rhoFile)
	p, q := make([]float64, 100), make([]float64, 100)
	mdTruth.Model.Row(0, 0, p)
	mf.Model.Row(0, 0, q)
	if want := fmt.Sprintf("%.6f", factor.KL(p, q)); !strings.Contains(out, want) || !strings.Contains(out, "from "+rhoFile) {
		t.Errorf("--rho %s: output lacks KL of row 0 %s:\n%s", rhoFile, want, out)
	}
	for _, bad := range []string{"state,weight\n100,1\n", "state,weight\n0,-1\n", "state,weight\n0,0\n", "s,w\n0,1\n"} {
		bf := writeFile(t, dir, "bad.csv", bad)
		if code, _, errs := emsf(t, "eval", "--model", model, "--truth", truth, "--rho", bf); code == 0 || !strings.Contains(errs, "--rho") {
			t.Errorf("--rho file %q: exit %d, stderr %q", bad, code, errs)
		}
	}
}

func TestDemo(t *testing.T) {
	dir := t.TempDir()
	out := mustEmsf(t, "demo", "--dir", dir, "--quiet")
	for _, w := range []string{"EMSF", "CNT", filepath.Join(dir, "model.arrow")} {
		if !strings.Contains(out, w) {
			t.Errorf("demo output lacks %q:\n%s", w, out)
		}
	}
	if !strings.Contains(out, "closer to the truth") {
		t.Errorf("demo: EMSF did not beat counting:\n%s", out)
	}
	mustEmsf(t, "inspect", "--model", filepath.Join(dir, "model.arrow"))
	mustEmsf(t, "trick", "--model", filepath.Join(dir, "model.arrow"))
}

func TestFitHoldoutPicksAnOrder(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "t.csv")
	mustEmsf(t, "gen", "--states", "50", "--true-order", "3", "--rows", "dirichlet", "--conc", "0.2", "--transitions", "5000", "--out", in, "--truth", "")
	out := mustEmsf(t, "fit", "--input", in, "--order", "1,3,8", "--holdout", "0.2", "--iters", "100", "--quiet", "--out", filepath.Join(dir, "m.arrow"))
	for _, w := range []string{"order 1:", "order 3:", "order 8:", "best order:"} {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
	mf, err := arrowio.ReadModel(filepath.Join(dir, "m.arrow"))
	if err != nil {
		t.Fatal(err)
	}
	// Rows Dirichlet(0.2) make the true order 3 stand out: order 1 cannot
	// explain it and order 8 overfits 4 000 training transitions.
	if mf.Params["order"] != "3" || mf.Model.M != 3 {
		t.Errorf("held-out selection kept order %s; want the true order 3\n%s", mf.Params["order"], out)
	}
}

// TestFitChecksBeforeWork: a bad --out, an unreachable --nats and a
// --format that contradicts --out stop fit before it reads the data, with
// a message that names the flag (and no temporary file name).
func TestFitChecksBeforeWork(t *testing.T) {
	dir := t.TempDir()
	in := writeFile(t, dir, "t.csv", goodCSV)
	for _, tc := range []struct {
		args  []string
		wants []string
	}{
		{[]string{"--out", filepath.Join(dir, "missing", "m.arrow")}, []string{"--out", "missing", "no such file"}},
		{[]string{"--out", dir}, []string{"--out", "is not empty", "new directory"}}, // a directory is a model dataset, which must be new
		{[]string{"--out", filepath.Join(dir, "m.arrow"), "--format", "parquet"}, []string{"--format parquet", "m.arrow"}},
		{[]string{"--out", filepath.Join(dir, "m.arrow"), "--nats", "nats://127.0.0.1:1"}, []string{"--nats nats://127.0.0.1:1"}},
	} {
		code, _, errs := emsf(t, append([]string{"fit", "--input", in, "--order", "2"}, tc.args...)...)
		if code == 0 {
			t.Errorf("%v: exit 0", tc.args)
		}
		for _, w := range tc.wants {
			if !strings.Contains(errs, w) {
				t.Errorf("%v: stderr %q does not mention %q", tc.args, errs, w)
			}
		}
		if strings.Contains(errs, ".tmp") || strings.Contains(errs, ".check") || strings.Contains(errs, "data:") {
			t.Errorf("%v: stderr %q shows a temporary file or came after reading the data", tc.args, errs)
		}
	}
	assertOnlyFiles(t, dir, "t.csv")
}

// TestFitFormats: the model format follows --out's extension, and a CSV
// named .parquet is read as CSV with a warning.
func TestFitFormats(t *testing.T) {
	dir := t.TempDir()
	in := writeFile(t, dir, "t.parquet", goodCSV)
	out := filepath.Join(dir, "m.parquet")
	code, _, errs := emsf(t, "fit", "--input", in, "--order", "2", "--out", out)
	if code != 0 || !strings.Contains(errs, "looks like CSV") {
		t.Fatalf("exit %d, stderr %q; want a warning that the .parquet input is CSV", code, errs)
	}
	data, err := os.ReadFile(out)
	if err != nil || !bytes.HasPrefix(data, []byte("PAR1")) {
		t.Fatalf("model %s is not Parquet (%v)", out, err)
	}
	fi, err := os.Stat(out)
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("model mode %v (%v); want 0644", fi.Mode().Perm(), err)
	}
}

// TestModelGetNameAnywhere: NAME may follow the flags of model get; the
// command then gets as far as connecting.
func TestModelGetNameAnywhere(t *testing.T) {
	out := filepath.Join(t.TempDir(), "m.arrow")
	for _, args := range [][]string{
		{"model", "get", "demo", "--out", out, "--nats", "nats://127.0.0.1:1"},
		{"model", "get", "--out", out, "demo", "--nats", "nats://127.0.0.1:1"},
		{"model", "get", "--out", out, "--nats", "nats://127.0.0.1:1", "demo"},
	} {
		code, _, errs := emsf(t, args...)
		if code != 1 || !strings.Contains(errs, "127.0.0.1:1") || strings.Contains(errs, "unexpected argument") {
			t.Errorf("%v: exit %d, stderr %q; want a connection error", args, code, errs)
		}
	}
	if code, _, errs := emsf(t, "model", "get", "a", "--out", out, "b"); code != 2 || !strings.Contains(errs, `"b"`) {
		t.Errorf("two names: exit %d, stderr %q", code, errs)
	}
}
