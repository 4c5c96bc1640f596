package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/factor"
)

// TestEvalUnseenStates: a test file with states and an action beyond
// the model's range is scored (unseen rows), with the baselines trained
// on --train and the rule named in the output.
func TestEvalUnseenStates(t *testing.T) {
	dir := t.TempDir()
	train := filepath.Join(dir, "train.csv")
	mustEmsf(t, "gen", "--states", "40", "--true-order", "4", "--transitions", "3000", "--seed", "2", "--out", train, "--truth", "")
	model := filepath.Join(dir, "m.arrow")
	mustEmsf(t, "fit", "--input", train, "--order", "3", "--quiet", "--out", model, "--stop", "auto")
	mf, err := arrowio.ReadModel(model)
	if err != nil {
		t.Fatal(err)
	}
	if mf.Model.Smoothing == nil || mf.Params["smooth"] != "auto" || mf.Params["accel"] != "squarem" {
		t.Fatalf("default fit: smoothing %v, params %v", mf.Model.Smoothing != nil, mf.Params)
	}
	test := writeFile(t, dir, "test.csv", "state,action,next_state\n0,0,1\n45,0,2\n3,0,47\n2,1,3\n")
	out := mustEmsf(t, "eval", "--model", model, "--input", test, "--train", train, "--mix", "0.01")
	for _, w := range []string{"scoring rule (--mix): every estimate mixed with the uniform distribution over the scored states, weight 0.01, N = 48",
		"from states or actions beyond it (scored as unseen rows)", "add-β counting", "Jelinek–Mercer counting", "Kneser–Ney counting", "CNT (counting)", "β = ", "λ = ", "d = "} {
		if !strings.Contains(out, w) {
			t.Errorf("eval output lacks %q:\n%s", w, out)
		}
	}
	// The model's score is that of the rule, computed by hand for the
	// first transition's part: every line has a finite per-transition.
	if strings.Contains(out, "Inf") || strings.Contains(out, "NaN") {
		t.Errorf("eval scored something infinite:\n%s", out)
	}
	// Bad flags name themselves.
	for _, args := range [][]string{{"--mix", "1"}, {"--validation", "0"}, {"--baselines", "kn,wb"}} {
		code, _, errs := emsf(t, append([]string{"eval", "--model", model, "--input", test, "--train", train}, args...)...)
		if code == 0 || !strings.Contains(errs, args[0]) {
			t.Errorf("eval %v: exit %d, stderr %q", args, code, errs)
		}
	}
}

// TestEvalKNChosenOnValidation: the Kneser–Ney baseline's d and δ are,
// per action, those that score best on the action's part of the
// validation split of --train under the held-out rule (recomputed here
// from the split), the estimate is the rule counted on all of --train
// with them, and the test file plays no part: two very different test
// files get the same choice.
func TestEvalKNChosenOnValidation(t *testing.T) {
	n, u := 30, 2
	tr := factor.RandomCounts(n, u, 4, 3, 11)
	// Action 0 validates on other transitions, action 1 on its own
	// training counts (which favour no discount): two choices.
	var val []*factor.Block
	for _, b := range factor.RandomCounts(n, u, 2, 2, 12) {
		if b.Action == 0 {
			val = append(val, b)
		}
	}
	for _, b := range tr {
		if b.Action == 1 {
			val = append(val, b)
		}
	}
	ds := &dataset{n: n, u: u, train: tr, val: val}
	rule := factor.HeldOutRule{Mix: 0.001}
	ests, err := trainBaselines(n, u, ds, []string{baseKN}, rule)
	if err != nil {
		t.Fatal(err)
	}
	// Per action: the best on that action's validation transitions.
	best := []float64{math.Inf(-1), math.Inf(-1)}
	bestP := make([]factor.RuleParams, u)
	for _, d := range factor.DiscountGrid {
		for _, delta := range factor.DeltaGrid {
			p := factor.KNRule(d, delta)
			e, err := factor.NewRuleCounting(n, u, tr, nil, []factor.RuleParams{p, p})
			if err != nil {
				t.Fatal(err)
			}
			for _, vb := range val {
				if s, _, err := rule.LogLik(e, []*factor.Block{vb}, n); err == nil && s > best[vb.Action] {
					best[vb.Action], bestP[vb.Action] = s, p
				}
			}
		}
	}
	if bestP[0] == bestP[1] {
		t.Fatalf("the case chooses one rule for both actions (%+v): it tests nothing per action", bestP[0])
	}
	if want := knString(bestP); len(ests) != 1 || ests[0].chosen != want || !strings.Contains(want, "a1: d = ") {
		t.Fatalf("chosen %+v, want %q", ests, want)
	}
	all, err := factor.NewRuleCounting(n, u, mergeBlocks(u, tr, val), nil, bestP)
	if err != nil {
		t.Fatal(err)
	}
	for a := range u {
		for i := range n {
			for j := range n {
				if p, w := ests[0].est.Prob(a, i, j), all.Prob(a, i, j); p != w {
					t.Fatalf("P̂^%d[%d,%d] = %v, counted on all of --train %v", a, i, j, p, w)
				}
			}
		}
	}

	dir := t.TempDir()
	train := filepath.Join(dir, "train.csv")
	mustEmsf(t, "gen", "--states", "40", "--true-order", "4", "--transitions", "3000", "--seed", "2", "--out", train, "--truth", "")
	testA := filepath.Join(dir, "a.csv")
	mustEmsf(t, "gen", "--states", "40", "--true-order", "4", "--transitions", "1000", "--seed", "3", "--out", testA, "--truth", "")
	var b strings.Builder
	b.WriteString("state,action,next_state\n")
	for i := range 200 {
		fmt.Fprintf(&b, "%d,0,%d\n", i%40, 7) // one next state: favours d = 0 and a peaked q
	}
	testB := writeFile(t, dir, "b.csv", b.String())
	chosen := func(test string) string {
		out := mustEmsf(t, "eval", "--train", train, "--input", test, "--baselines", "kn")
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, "Kneser–Ney counting") {
				return line[strings.Index(line, "d = "):]
			}
		}
		t.Fatalf("no Kneser–Ney line:\n%s", out)
		return ""
	}
	if a, b := chosen(testA), chosen(testB); a != b {
		t.Errorf("the choice depends on the test file: %q against %q", a, b)
	}
}

// TestFitPlainIsAccelNone: --plain is --accel none --smooth none --stop
// tol --prior-d 0 --prior-k 0 --start random, bitwise; the default fit differs from it
// and stops on the validation split.
func TestFitPlainIsAccelNone(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "t.csv")
	mustEmsf(t, "gen", "--states", "30", "--transitions", "800", "--seed", "5", "--out", in, "--truth", "")
	a, b, c := filepath.Join(dir, "a.arrow"), filepath.Join(dir, "b.arrow"), filepath.Join(dir, "c.arrow")
	mustEmsf(t, "fit", "--input", in, "--order", "3", "--iters", "50", "--quiet", "--out", a, "--plain")
	mustEmsf(t, "fit", "--input", in, "--order", "3", "--iters", "50", "--quiet", "--out", b,
		"--accel", "none", "--smooth", "none", "--stop", "tol", "--prior-d", "0", "--prior-k", "0", "--start", "random")
	out := mustEmsf(t, "fit", "--input", in, "--order", "3", "--iters", "50", "--quiet", "--out", c, "--stop", "auto")
	ma, _ := arrowio.ReadModel(a)
	mb, _ := arrowio.ReadModel(b)
	mc, _ := arrowio.ReadModel(c)
	if !ma.Model.Equal(mb.Model) || ma.Model.Smoothing != nil {
		t.Fatal("--plain differs from --accel none --smooth none --stop tol --prior-d 0 --prior-k 0 --start random")
	}
	if ma.Model.Equal(mc.Model) || mc.Model.Smoothing == nil {
		t.Fatal("the default fit is plain EM")
	}
	if !strings.Contains(out, "iterations (") {
		t.Fatalf("fit output: %s", out)
	}
	for _, bad := range [][]string{{"--accel", "fast"}, {"--smooth", "yes"}, {"--stop", "never"}, {"--validation", "1"},
		{"--patience", "0"}, {"--min-gain", "-1"}, {"--min-gain", "NaN"}, {"--min-gain", "+Inf"}, {"--min-gain", "0.01", "--stop", "tol"}, {"--patience", "3", "--plain"}, {"--prior-d", "-1"}, {"--plain", "--accel", "none"}, {"--accel", "squarem", "--alpha", "0.5"}} {
		code, _, errs := emsf(t, append([]string{"fit", "--input", in, "--order", "3", "--out", c}, bad...)...)
		if code == 0 || !strings.Contains(errs, bad[0]) {
			t.Errorf("fit %v: exit %d, stderr %q", bad, code, errs)
		}
	}
}

// TestFitTinyInput: an input too small for the validation split (2
// transitions: --validation 0.1 draws none) fits with fit's defaults,
// falling back to --stop tol --smooth none with a WARN that says so; a
// fit that names a flag needing the split (--stop validation, --smooth
// auto, --validation, --patience) is refused, naming --validation.
func TestFitTinyInput(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "t.csv")
	if err := os.WriteFile(in, []byte("state,action,next_state\n0,0,1\n1,0,0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "m.arrow")
	// --accel auto: fit's defaults (emsf() adds --plain to a fit that
	// names no flag of issue 28).
	code, _, errs := emsf(t, "fit", "--input", in, "--order", "1", "--out", out, "--accel", "auto")
	if code != 0 || !strings.Contains(errs, "too few transitions to hold out a validation part") {
		t.Fatalf("default fit of 2 transitions: exit %d, stderr:\n%s", code, errs)
	}
	mf, err := arrowio.ReadModel(out)
	if err != nil {
		t.Fatal(err)
	}
	if mf.Model.Smoothing != nil || mf.Status != "converged" {
		t.Fatalf("model: rule %v, status %q; want none, converged", mf.Model.Smoothing, mf.Status)
	}
	// A split that takes every transition names --validation.
	if code, _, errs := emsf(t, "fit", "--input", in, "--order", "1", "--out", out, "--validation", "0.99", "--accel", "auto"); code == 0 ||
		!strings.Contains(errs, "--validation 0.99 left no training transitions out of 2") {
		t.Errorf("--validation 0.99 of 2 transitions: exit %d, stderr %q", code, errs)
	}
	for _, named := range [][]string{{"--stop", "validation"}, {"--smooth", "auto"}, {"--validation", "0.2"}, {"--patience", "3"}} {
		code, _, errs := emsf(t, append([]string{"fit", "--input", in, "--order", "1", "--out", out}, named...)...)
		if code == 0 || !strings.Contains(errs, "drew no validation transitions out of 2") {
			t.Errorf("fit %v of 2 transitions: exit %d, stderr %q", named, code, errs)
		}
	}
}

// TestFitStart: the default fit starts seeded (--start auto is --start
// seeded there, bitwise), --start random from NewRandom's start (another
// model), and --start is refused where no seeded start can be made or
// --plain sets it.
func TestFitStart(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "t.csv")
	mustEmsf(t, "gen", "--states", "40", "--transitions", "1500", "--seed", "8", "--out", in, "--truth", "")
	fit := func(name string, flags ...string) *factor.Model {
		t.Helper()
		out := filepath.Join(dir, name)
		mustEmsf(t, append([]string{"fit", "--input", in, "--order", "4", "--iters", "40", "--quiet", "--out", out}, flags...)...)
		mf, err := arrowio.ReadModel(out)
		if err != nil {
			t.Fatal(err)
		}
		return mf.Model
	}
	auto, seeded, random := fit("a.arrow", "--start", "auto"), fit("s.arrow", "--start", "seeded"), fit("r.arrow", "--start", "random")
	if !auto.Equal(seeded) {
		t.Fatal("--start auto is not --start seeded for the default fit")
	}
	if auto.Equal(random) {
		t.Fatal("--start random gives the seeded start's model")
	}
	if !fit("w.arrow", "--start", "seeded", "--workers", "3").Equal(seeded) {
		t.Fatal("the seeded fit depends on --workers")
	}
	for _, bad := range [][]string{{"--start", "sometimes"}, {"--plain", "--start", "random"},
		{"--start", "seeded", "--tie", "shared-d"}, {"--start", "seeded", "--init", filepath.Join(dir, "r.arrow")},
		{"--start", "seeded", "--incremental"}} {
		code, _, errs := emsf(t, append([]string{"fit", "--input", in, "--order", "4", "--out", filepath.Join(dir, "x.arrow")}, bad...)...)
		if code == 0 || !strings.Contains(errs, "--start") {
			t.Errorf("fit %v: exit %d, stderr %q", bad, code, errs)
		}
	}
}

// TestFitOwnersAccel: on the owners exchange --accel auto runs plain EM
// (bitwise a local --plain-dynamics fit, smoothing aside) and says so
// once; an explicit --accel squarem is refused with one clear error.
func TestFitOwnersAccel(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "t.csv")
	mustEmsf(t, "gen", "--states", "30", "--transitions", "800", "--seed", "6", "--out", in, "--truth", "")
	code, _, errs := emsf(t, "fit", "--input", in, "--order", "3", "--out", filepath.Join(dir, "x.arrow"), "--embedded", "--workers", "2",
		"--exchange", "owners", "--accel", "squarem")
	if code == 0 || !strings.Contains(errs, "--accel squarem: the owners exchange runs plain EM") {
		t.Fatalf("--accel squarem on owners: exit %d, stderr %q", code, errs)
	}
	own, loc := filepath.Join(dir, "o.arrow"), filepath.Join(dir, "l.arrow")
	_, _, errs = emsf(t, "fit", "--input", in, "--order", "3", "--iters", "20", "--out", own, "--embedded", "--workers", "2",
		"--exchange", "owners", "--stop", "auto")
	if strings.Count(errs, "the owners exchange runs plain EM") != 1 {
		t.Fatalf("want one INFO line saying owners run plain EM:\n%s", errs)
	}
	mustEmsf(t, "fit", "--input", in, "--order", "3", "--iters", "20", "--quiet", "--out", loc,
		"--accel", "none", "--stop", "tol", "--prior-d", "0", "--prior-k", "0")
	mo, err := arrowio.ReadModel(own)
	if err != nil {
		t.Fatal(err)
	}
	ml, _ := arrowio.ReadModel(loc)
	if !mo.Model.Equal(ml.Model) {
		t.Fatal("owners exchange (auto: plain EM) differs from a local --accel none fit")
	}
	// Both smoothed by the same rule on the same validation split.
	if mo.Model.Smoothing == nil || math.Abs(mo.Model.Prob(0, 0, 1)-ml.Model.Prob(0, 0, 1)) > 0 {
		t.Fatal("the owners fit's smoothing differs from the local one's")
	}
}

// TestSplitCountsFileByUnits: a file of counts splits its units as the
// file of its unit rows would, not whole rows (a row held out whole is a
// pair the training part never sees, and the rule chosen on such a split
// is chosen for unseen pairs): a row of count 1000 leaves about 100 units
// to the validation part and the rest to training; one of count 2.5
// keeps its fraction on one side; unit rows split as they always did.
func TestSplitCountsFileByUnits(t *testing.T) {
	dir := t.TempDir()
	counts := writeFile(t, dir, "counts.csv", "state,action,next_state,count\n0,0,1,1000\n1,0,0,2.5\n2,0,2,1\n")
	d, err := loadDataVal(t.Context(), &inputFlags{input: counts, ids: idsAuto}, 0.2, 0.1, 1)
	if err != nil {
		t.Fatal(err)
	}
	parts := func(bs []*factor.Block) map[[2]int32]float64 {
		m := map[[2]int32]float64{}
		for _, b := range bs {
			for r, i := range b.Rows {
				for q := b.Ptr[r]; q < b.Ptr[r+1]; q++ {
					m[[2]int32{i, b.Cols[q]}] += b.Vals[q]
				}
			}
		}
		return m
	}
	tr, ho, va := parts(d.train), parts(d.holdout), parts(d.val)
	big := [2]int32{0, 1}
	if tr[big]+ho[big]+va[big] != 1000 || math.Abs(ho[big]-200) > 60 || math.Abs(va[big]-80) > 45 {
		t.Errorf("the row of count 1000: training %v, held out %v, validation %v; want about 720, 200, 80", tr[big], ho[big], va[big])
	}
	frac := [2]int32{1, 0}
	if got := tr[frac] + ho[frac] + va[frac]; got != 2.5 {
		t.Errorf("the row of count 2.5: parts add up to %v", got)
	}
	for _, p := range []float64{tr[frac], ho[frac], va[frac]} {
		if f := p - math.Floor(p); f != 0 && f != 0.5 {
			t.Errorf("the row of count 2.5: a part %v that is neither whole units nor units and the fraction", p)
		}
	}
	if got := tr[[2]int32{2, 2}] + ho[[2]int32{2, 2}] + va[[2]int32{2, 2}]; got != 1 {
		t.Errorf("the unit row: %v in all", got)
	}
}
