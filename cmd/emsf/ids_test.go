package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/shard"
)

func mustReadModel(t *testing.T, path string) *arrowio.ModelFile {
	t.Helper()
	mf, err := arrowio.ReadModel(path)
	if err != nil {
		t.Fatal(err)
	}
	return mf
}

// TestFitStringIDsIsTheIntegerFit: gen --string-ids names states and
// actions with zero-padded ids, whose sorted order is the index order, so
// every kind of fit of them (CSV, Arrow, Parquet; holdout; incremental;
// a cluster fit, whose coordinator reads the data) is bitwise the fit of the same transitions named by integers,
// plus the vocabularies.
func TestFitStringIDsIsTheIntegerFit(t *testing.T) {
	dir := t.TempDir()
	gen := []string{"gen", "--states", "40", "--true-order", "6", "--actions", "2", "--transitions", "3000", "--seed", "9", "--truth", ""}
	ints := filepath.Join(dir, "ints.csv")
	mustEmsf(t, append(gen, "--out", ints)...)
	fits := map[string][]string{
		"plain":       {"--order", "3", "--iters", "15"},
		"holdout":     {"--order", "2,3", "--holdout", "0.25", "--iters", "10"},
		"incremental": {"--order", "3", "--incremental", "--passes", "3", "--eta-max", "100"},
		// The coordinator reads the data and plans the shards, workers on
		// an embedded NATS server compute.
		"cluster": {"--order", "3", "--iters", "8", "--embedded", "--workers", "2", "--shard-nnz", "400"},
	}
	for name, fl := range fits {
		flags := func() []string {
			if name == "cluster" {
				return append(fl, "--store", t.TempDir())
			}
			return fl
		}
		want := filepath.Join(dir, name+"-ints.arrow")
		mustEmsf(t, append([]string{"fit", "--input", ints, "--quiet", "--out", want}, flags()...)...)
		ref := mustReadModel(t, want)
		if ref.States != nil || ref.Actions != nil {
			t.Fatalf("%s: a fit of integers wrote a vocabulary", name)
		}
		for _, ext := range []string{"csv", "arrow", "parquet"} {
			in := filepath.Join(dir, "ids."+ext)
			if _, err := os.Stat(in); err != nil {
				mustEmsf(t, append(gen, "--string-ids", "--out", in)...)
			}
			out := filepath.Join(dir, name+"-ids-"+ext+".arrow")
			mustEmsf(t, append([]string{"fit", "--input", in, "--quiet", "--out", out}, flags()...)...)
			got := mustReadModel(t, out)
			if !got.Model.Equal(ref.Model) {
				t.Errorf("%s from %s ids: the model differs from the fit of integers", name, ext)
			}
			if got.States.Len() != 40 || got.States.String(7) != "s07" || got.Actions.Len() != 2 || got.Actions.String(1) != "a1" {
				t.Errorf("%s from %s: vocabularies %q %q", name, ext, got.States.Strings(), got.Actions.Strings())
			}
		}
	}
}

// TestFitIDsOrderFree: the vocabulary is the sorted set of ids, so the
// same rows in another order (counts of 1: their sums do not depend on
// the order) give bitwise the same model; new ids of a warm start come
// after the model's, sorted among themselves.
func TestFitIDsOrderFree(t *testing.T) {
	dir := t.TempDir()
	rows := []string{"/cart,left,user42", "user42,right,/home", "/home,left,/cart", "zeta,left,/cart", "user42,left,zeta", "/cart,right,/home"}
	var lines []string
	for k := range 20 {
		lines = append(lines, rows[k%len(rows)])
	}
	a := writeFile(t, dir, "a.csv", "state,action,next_state\n"+strings.Join(lines, "\n")+"\n")
	slices.Reverse(lines)
	b := writeFile(t, dir, "b.csv", "state,action,next_state\n"+strings.Join(lines, "\n")+"\n")
	mustEmsf(t, "fit", "--input", a, "--order", "2", "--iters", "20", "--quiet", "--out", filepath.Join(dir, "a.arrow"))
	mustEmsf(t, "fit", "--input", b, "--order", "2", "--iters", "20", "--quiet", "--out", filepath.Join(dir, "b.arrow"))
	ma, mb := mustReadModel(t, filepath.Join(dir, "a.arrow")), mustReadModel(t, filepath.Join(dir, "b.arrow"))
	if !ma.Model.Equal(mb.Model) {
		t.Error("the same rows in another order give another model")
	}
	if want := []string{"/cart", "/home", "user42", "zeta"}; !slices.Equal(ma.States.Strings(), want) || !slices.Equal(mb.States.Strings(), want) {
		t.Errorf("state vocabularies %q, %q; want the sorted set %q", ma.States.Strings(), mb.States.Strings(), want)
	}

	// Warm start on data with new ids: appended after the model's, sorted.
	c := writeFile(t, dir, "c.csv", "state,action,next_state\nuser9,up,/cart\nalpha,left,user42\n/cart,left,/home\n")
	out := mustEmsf(t, "fit", "--input", c, "--order", "2", "--iters", "3", "--init", filepath.Join(dir, "a.arrow"), "--init-smooth", "0.01",
		"--out", filepath.Join(dir, "c.arrow"), "--log-level", "warn")
	mc := mustReadModel(t, filepath.Join(dir, "c.arrow"))
	if want := []string{"/cart", "/home", "user42", "zeta", "alpha", "user9"}; !slices.Equal(mc.States.Strings(), want) {
		t.Errorf("warm-start states %q, want %q", mc.States.Strings(), want)
	}
	if want := []string{"left", "right", "up"}; !slices.Equal(mc.Actions.Strings(), want) {
		t.Errorf("warm-start actions %q, want %q", mc.Actions.Strings(), want)
	}
	if mc.Model.N != 6 || mc.Model.U != 3 || !strings.Contains(out, "n=6") {
		t.Errorf("warm-start model n=%d u=%d; output %q", mc.Model.N, mc.Model.U, out)
	}
}

// TestEvalUnseenIDs: eval maps the data's ids through the model's; rows
// with an id the model lacks are unseen rows, set aside and counted, and
// the rest score as the same file without them.
func TestEvalUnseenIDs(t *testing.T) {
	dir := t.TempDir()
	train := filepath.Join(dir, "train.csv")
	mustEmsf(t, "gen", "--states", "30", "--true-order", "4", "--transitions", "1500", "--string-ids", "--out", train, "--truth", "")
	model := filepath.Join(dir, "m.arrow")
	mustEmsf(t, "fit", "--input", train, "--order", "3", "--iters", "30", "--quiet", "--out", model)
	known := "s01,a0,s02\ns03,a0,s01\ns01,a0,s02\n"
	with := writeFile(t, dir, "with.csv", "state,action,next_state\n"+known+"new1,a0,s02\ns03,a9,s01\ns04,a0,new2\n")
	without := writeFile(t, dir, "without.csv", "state,action,next_state\n"+known)
	got := mustEmsf(t, "eval", "--model", model, "--input", with)
	want := mustEmsf(t, "eval", "--model", model, "--input", without)
	if !strings.Contains(got, "3 rows name states or actions the model does not have (unseen ids): not scored") {
		t.Errorf("eval with unseen ids:\n%s", got)
	}
	score := func(out string) string { return out[strings.Index(out, "transitions, total count"):] }
	if score(got) != score(want) {
		t.Errorf("scores with unseen rows set aside:\n%s\nwant those of the file without them:\n%s", got, want)
	}
	if code, _, errs := emsf(t, "eval", "--model", model, "--input", writeFile(t, dir, "none.csv", "state,action,next_state\nx,a0,s01\n")); code != 1 ||
		!strings.Contains(errs, "all 1 rows name states or actions the model does not have") {
		t.Errorf("eval of unseen rows only: exit %d, %q", code, errs)
	}
}

// TestIDsErrors: every way ids can be wrong says so in one line.
func TestIDsErrors(t *testing.T) {
	dir := t.TempDir()
	ids := writeFile(t, dir, "ids.csv", "state,action,next_state\nuser1,left,user2\nuser2,left,user1\n")
	ints := writeFile(t, dir, "ints.csv", "state,action,next_state\n0,0,1\n1,0,0\n")
	intModel := filepath.Join(dir, "int.arrow")
	mustEmsf(t, "fit", "--input", ints, "--order", "1", "--iters", "2", "--quiet", "--out", intModel)
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"fit", "--input", ids, "--order", "1", "--ids", "int"}, 1,
			`row 1, column "state": value "user1" is not a non-negative integer (it reads as a string id) (--ids int reads integer indices only`},
		{[]string{"fit", "--input", ids, "--order", "1", "--ids", "words"}, 2, `--ids "words": want auto, int or string`},
		{[]string{"fit", "--input", ids, "--order", "1", "--states", "5"}, 2, "--states 5: the states are named by ids, so n is the number of distinct ids (2)"},
		{[]string{"fit", "--input", writeFile(t, dir, "empty.csv", "state,action,next_state\nuser1,left,\"\"\n"), "--order", "1"}, 1,
			`row 1, column "next_state": is an empty id`},
		{[]string{"fit", "--input", writeFile(t, dir, "long.csv", "state,action,next_state\nuser1,left,"+strings.Repeat("é", 200)+"\n"), "--order", "1"}, 1,
			`is not an id: 400 bytes, the limit is 256`},
		{[]string{"eval", "--model", intModel, "--input", ids}, 1, "(the model names states by integer indices: the data must too)"},
		{[]string{"fit", "--input", ids, "--order", "1", "--init", intModel}, 1, "(the model names states by integer indices: the data must too)"},
		{[]string{"trick", "--model", intModel, "--policy", "left"}, 2, `--policy "left": "left" is not an integer`},
	} {
		code, _, errs := emsf(t, c.args...)
		if code != c.code || !strings.Contains(errs, c.msg) {
			t.Errorf("emsf %s: exit %d, stderr %q; want exit %d and %q", strings.Join(c.args, " "), code, errs, c.code, c.msg)
		}
	}
	// Auto mode reads a column whose later rows turn to ids as ids.
	late := writeFile(t, dir, "late.csv", "state,action,next_state\n3,0,4\n4,0,/cart\n")
	mustEmsf(t, "fit", "--input", late, "--order", "1", "--iters", "2", "--quiet", "--out", filepath.Join(dir, "late.arrow"))
	if got := mustReadModel(t, filepath.Join(dir, "late.arrow")); !slices.Equal(got.States.Strings(), []string{"/cart", "3", "4"}) || got.Actions != nil {
		t.Errorf("late ids: states %q actions %v", got.States.Strings(), got.Actions)
	}
}

// TestTrickInspectIDs: trick takes actions by id and prints states by id;
// inspect shows the vocabularies.
func TestTrickInspectIDs(t *testing.T) {
	dir := t.TempDir()
	in := writeFile(t, dir, "t.csv", "state,action,next_state\nhome,go,cart\ncart,go,pay\npay,stay,pay\ncart,stay,home\nhome,go,pay\n")
	model := filepath.Join(dir, "m.arrow")
	mustEmsf(t, "fit", "--input", in, "--order", "2", "--iters", "50", "--quiet", "--out", model)
	out := mustEmsf(t, "trick", "--model", model, "--policy", "stay", "--top", "1", "--out", filepath.Join(dir, "mu.csv"))
	if !strings.Contains(out, `K^1 (action "stay") D^1 (action "stay")`) || !strings.Contains(out, "state pay ") {
		t.Errorf("trick by ids:\n%s", out)
	}
	mu, err := os.ReadFile(filepath.Join(dir, "mu.csv"))
	if err != nil || !strings.HasPrefix(string(mu), "state,probability\ncart,") {
		t.Errorf("trick --out: %q, %v", mu, err)
	}
	if code, _, errs := emsf(t, "trick", "--model", model, "--policy", "fly"); code != 2 || !strings.Contains(errs, `"fly" is not an action of the model`) {
		t.Errorf("trick --policy fly: exit %d, %q", code, errs)
	}
	if out := mustEmsf(t, "inspect", "--model", model); !strings.Contains(out, `state ids    3 ("cart", "home", "pay"`) || !strings.Contains(out, `action ids   2 ("go", "stay"`) {
		t.Errorf("inspect:\n%s", out)
	}
	v, _ := shard.NewVocab([]string{"cart", "home", "pay"})
	if got := mustReadModel(t, model).States; !got.Equal(v) {
		t.Errorf("states %q", got.Strings())
	}
}

// TestQueryCommand: emsf query asks a model file in its ids (the request
// as an argument or on stdin), plans with a reward file, and says what is
// wrong with a bad request in one line; emsf model export writes what
// numpy reads (arrowio's TestExportReadByNumpy reads it).
func TestQueryCommand(t *testing.T) {
	dir := t.TempDir()
	in := writeFile(t, dir, "t.csv", "state,action,next_state\nhome,go,cart\ncart,go,pay\npay,stay,pay\ncart,stay,home\nhome,go,pay\nhome,stay,home\npay,go,home\n")
	model := filepath.Join(dir, "m.arrow")
	mustEmsf(t, "fit", "--input", in, "--order", "2", "--iters", "50", "--tie", "shared-k", "--quiet", "--out", model)
	mf := mustReadModel(t, model)
	out := mustEmsf(t, "query", "--model", model, "topk", `{"state":"home","action":"go","k":2}`)
	var tk struct {
		Next []struct {
			State string
			P     float64
		}
	}
	if err := json.Unmarshal([]byte(out), &tk); err != nil || len(tk.Next) != 2 {
		t.Fatalf("topk: %q, %v", out, err)
	}
	i, _ := mf.States.IndexString("home")
	a, _ := mf.Actions.IndexString("go")
	j, _ := mf.States.IndexString(tk.Next[0].State)
	if tk.Next[0].P != mf.Model.Prob(a, i, j) {
		t.Errorf("topk p %v, model says %v", tk.Next[0].P, mf.Model.Prob(a, i, j))
	}
	for _, r := range []struct{ name, content string }{
		{"r.csv", "state,reward\npay,1\n"},
	} {
		p := writeFile(t, dir, r.name, r.content)
		out := mustEmsf(t, "query", "--model", model, "plan", fmt.Sprintf(`{"reward":{"file":%q},"gamma":0.9,"top":1}`, p))
		// Entering pay pays: the best state is the one whose action leads there.
		if !strings.Contains(out, `"state": "cart"`) || !strings.Contains(out, `"action": "go"`) {
			t.Errorf("plan with %s: %s", r.name, out)
		}
	}
	if code, _, errs := emsf(t, "query", "--model", model, "topk", `{"state":"nowhere","action":"go"}`); code != 1 ||
		strings.TrimSpace(errs) != `emsf query: state "nowhere": no such id in the model (code 404)` {
		t.Errorf("unknown id: exit %d, %q", code, errs)
	}
	if code, _, errs := emsf(t, "query", "--model", model); code != 2 || !strings.Contains(errs, "name an endpoint") {
		t.Errorf("no endpoint: exit %d, %q", code, errs)
	}
	// --load --embedded: the model file's endpoints served in process,
	// asked over loopback TCP; every answer a success.
	out = mustEmsf(t, "query", "--load", "--embedded", "--model", model, "--clients", "2", "--k", "2", "--duration", "200ms", "--warmup", "0s")
	if !strings.Contains(out, "top-2 over NATS (emsf.load.q.topk), 2 clients") || strings.Contains(out, "errors") {
		t.Errorf("query --load --embedded:\n%s", out)
	}
	// --bench: every figure printed, the slowest queries timed again.
	out = mustEmsf(t, "query", "--bench", "--model", model, "--queries", "60", "--k", "2")
	for _, want := range []string{"top-2, 60 queries, one goroutine:", "read depth:", "scan of K (median of 3):", "the slowest 50 queries timed again like the scans"} {
		if !strings.Contains(out, want) {
			t.Errorf("query --bench: no %q in\n%s", want, out)
		}
	}
	if code, _, errs := emsf(t, "query", "--bench", "--embedded", "--model", model); code != 2 || !strings.Contains(errs, "--embedded goes with --load") {
		t.Errorf("--bench --embedded: exit %d, %q", code, errs)
	}
	exp := filepath.Join(dir, "export")
	if out := mustEmsf(t, "model", "export", "--model", model, "--out", exp); !strings.Contains(out, "D_0.npy") || !strings.Contains(out, "states.csv") {
		t.Errorf("export: %s", out)
	}
	if code, _, errs := emsf(t, "model", "export", "--model", model, "--out", exp); code != 1 || !strings.Contains(errs, "exists and is not empty") {
		t.Errorf("export into a full directory: exit %d, %q", code, errs)
	}
}
