package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/emsf/emsf/arrowio"
)

func sameFile(t *testing.T, a, b string) {
	t.Helper()
	x, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	y, err := os.ReadFile(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(x, y) {
		t.Errorf("%s and %s differ", a, b)
	}
}

// TestModelDatasetEveryReader: a fitted model split into a dataset (a
// directory, and a prefix of the Object Store) assembles into the bytes
// fit wrote, Arrow and Parquet, and eval, inspect, trick and fit --init
// read the dataset as they read the file.
func TestModelDatasetEveryReader(t *testing.T) {
	dir := t.TempDir()
	p := func(name string) string { return filepath.Join(dir, name) }
	mustEmsf(t, "gen", "--states", "60", "--true-order", "6", "--transitions", "1500", "--out", p("t.csv"), "--truth", p("truth.arrow"))
	for _, out := range []string{"m.arrow", "m.parquet"} {
		mustEmsf(t, "fit", "--input", p("t.csv"), "--order", "4", "--iters", "5", "--quiet", "--out", p(out))
	}
	got := mustEmsf(t, "model", "split", p("m.arrow"), "--out", p("ds"), "--part-rows", "17")
	if !strings.Contains(got, "wrote "+p("ds")+": 8 parts (arrow, ") {
		t.Errorf("split said %q", got)
	}
	mustEmsf(t, "model", "assemble", p("ds"), "--out", p("a.arrow"))
	mustEmsf(t, "model", "assemble", filepath.Join(p("ds"), arrowio.ManifestName), "--out", p("a.parquet"))
	sameFile(t, p("a.arrow"), p("m.arrow"))
	sameFile(t, p("a.parquet"), p("m.parquet"))

	// fit --out DIR/ (and a Parquet dataset) writes the dataset itself.
	mustEmsf(t, "fit", "--input", p("t.csv"), "--order", "4", "--iters", "5", "--quiet", "--out", p("fitds")+"/")
	mustEmsf(t, "fit", "--input", p("t.csv"), "--order", "4", "--iters", "5", "--quiet", "--out", p("fitpq")+"/", "--format", "parquet")
	mustEmsf(t, "model", "assemble", p("fitds"), "--out", p("c.arrow"))
	mustEmsf(t, "model", "assemble", p("fitpq"), "--out", p("c.parquet"))
	sameFile(t, p("c.arrow"), p("m.arrow"))
	sameFile(t, p("c.parquet"), p("m.parquet"))
	if left, _ := filepath.Glob(p(".emsf-model-*")); len(left) > 0 {
		t.Errorf("fit --out DIR/ left %v", left)
	}
	if code, _, errs := emsf(t, "fit", "--input", p("t.csv"), "--order", "4", "--iters", "5", "--quiet", "--out", p("fitds")); code != 1 ||
		!strings.Contains(errs, "is not empty") {
		t.Errorf("fit --out over a dataset directory: exit %d, %q", code, errs)
	}

	url, _ := embeddedNATS(t, true)
	const obj = "nats-obj://emsf-models/fits/m"
	mustEmsf(t, "model", "split", p("m.parquet"), "--out", obj, "--format", "parquet", "--nats", url)
	mustEmsf(t, "model", "assemble", obj, "--out", p("b.arrow"), "--nats", url)
	sameFile(t, p("b.arrow"), p("m.arrow"))
	if code, _, errs := emsf(t, "model", "split", p("m.arrow"), "--out", obj, "--nats", url); code != 1 ||
		!strings.Contains(errs, "--out "+obj+" holds a model dataset already") {
		t.Errorf("split over a dataset: exit %d, %q", code, errs)
	}

	for _, form := range []string{p("ds"), filepath.Join(p("ds"), arrowio.ManifestName), obj} {
		for _, args := range [][]string{
			{"inspect", "--model", "M"},
			{"trick", "--model", "M", "--top", "3"},
			{"eval", "--model", "M", "--input", p("t.csv"), "--truth", p("truth.arrow")},
			{"eval", "--truth", "M", "--input", p("t.csv"), "--cnt"},
		} {
			run := func(model string) string {
				a := append([]string(nil), args...)
				for i := range a {
					if a[i] == "M" {
						a[i] = model
					}
				}
				if strings.HasPrefix(model, "nats-obj://") {
					a = append(a, "--nats", url)
				}
				// Fields: eval's table pads to the path's length.
				return strings.Join(strings.Fields(strings.ReplaceAll(mustEmsf(t, a...), model, "MODEL")), " ")
			}
			if want, got := run(p("m.arrow")), run(form); got != want {
				t.Errorf("%s on %s:\n%s\nwant (as on the file):\n%s", args[0], form, got, want)
			}
		}
		if strings.HasPrefix(form, "nats-obj://") {
			// fit's --nats makes a cluster fit; its --init goes through the
			// same readModel as the commands above.
			continue
		}
		out := p("warm.arrow")
		code, stdout, errs := emsf(t, "fit", "--input", p("t.csv"), "--order", "4", "--iters", "2", "--quiet", "--init", form, "--out", out)
		if code != 0 {
			t.Fatalf("fit --init %s: exit %d\n%s%s", form, code, stdout, errs)
		}
		mustEmsf(t, "fit", "--input", p("t.csv"), "--order", "4", "--iters", "2", "--quiet", "--init", p("m.arrow"), "--out", p("warm-file.arrow"))
		a, err := arrowio.ReadModel(out)
		if err != nil {
			t.Fatal(err)
		}
		b, err := arrowio.ReadModel(p("warm-file.arrow"))
		if err != nil {
			t.Fatal(err)
		}
		if !a.Model.Equal(b.Model) {
			t.Errorf("fit --init %s: not the model of fit --init m.arrow", form)
		}
	}
}

// TestModelDatasetSmoothing: a model fitted with a smoothing rule (the
// default --smooth auto) splits into a dataset, in a directory and in the
// Object Store, with parts for the rule's streams, assembles into the
// bytes fit wrote, and reads as the file does (its rule included).
func TestModelDatasetSmoothing(t *testing.T) {
	dir := t.TempDir()
	p := func(name string) string { return filepath.Join(dir, name) }
	// Data of a higher rank than the fit's, and four passes from the
	// random start, so that the rule chosen keeps the counts (on data of
	// order 4, or from the seeded start, an order-3 fit's factors alone
	// win the validation split: κ = +Inf, no counts).
	mustEmsf(t, "gen", "--states", "40", "--true-order", "20", "--transitions", "1200", "--out", p("t.csv"), "--truth", "")
	mustEmsf(t, "fit", "--input", p("t.csv"), "--order", "3", "--iters", "4", "--smooth", "auto", "--start", "random", "--quiet", "--out", p("m.arrow"))
	file, err := arrowio.ReadModel(p("m.arrow"))
	if err != nil {
		t.Fatal(err)
	}
	if file.Model.Smoothing == nil || file.Model.Smoothing.Counts == nil {
		t.Fatal("fit --smooth auto wrote no rule with counts")
	}
	mustEmsf(t, "model", "split", p("m.arrow"), "--out", p("ds"), "--part-rows", "15", "--format", "parquet")
	man, err := arrowio.ReadModelManifest(context.Background(), arrowio.DirParts{Dir: p("ds")})
	if err != nil {
		t.Fatal(err)
	}
	factors := map[string]int{}
	for _, part := range man.Parts {
		factors[part.Factor]++
	}
	if factors["Q"] == 0 || factors["C"] == 0 {
		t.Errorf("parts per factor %v: no part of the rule's streams", factors)
	}
	mustEmsf(t, "model", "assemble", p("ds"), "--out", p("a.arrow"))
	sameFile(t, p("a.arrow"), p("m.arrow"))
	url, _ := embeddedNATS(t, true)
	const obj = "nats-obj://emsf-models/fits/rule"
	mustEmsf(t, "model", "split", p("m.arrow"), "--out", obj, "--nats", url)
	mustEmsf(t, "model", "assemble", obj, "--out", p("b.arrow"), "--nats", url)
	sameFile(t, p("b.arrow"), p("m.arrow"))
	got, err := arrowio.ReadModelAny(context.Background(), p("ds"))
	if err != nil {
		t.Fatal(err)
	}
	if !got.Model.Equal(file.Model) || !reflect.DeepEqual(got.Model.Smoothing, file.Model.Smoothing) {
		t.Error("the dataset reads as another model or rule than the file")
	}
	for _, form := range []string{p("ds"), obj} {
		run := func(model string) string {
			args := []string{"eval", "--model", model, "--input", p("t.csv")}
			if strings.HasPrefix(model, "nats-obj://") {
				args = append(args, "--nats", url)
			}
			return strings.Join(strings.Fields(strings.ReplaceAll(mustEmsf(t, args...), model, "MODEL")), " ")
		}
		if want, got := run(p("m.arrow")), run(form); got != want {
			t.Errorf("eval on %s:\n%s\nwant (as on the file):\n%s", form, got, want)
		}
	}
}

// TestModelDatasetCLIErrors: a broken dataset fails every reader with the
// file and what is wrong; the subcommands refuse bad arguments.
func TestModelDatasetCLIErrors(t *testing.T) {
	dir := t.TempDir()
	p := func(name string) string { return filepath.Join(dir, name) }
	mustEmsf(t, "gen", "--states", "30", "--true-order", "4", "--transitions", "500", "--out", p("t.csv"), "--truth", p("truth.arrow"))
	mustEmsf(t, "model", "split", p("truth.arrow"), "--out", p("ds"), "--part-rows", "10")
	part := filepath.Join(p("ds"), "K-0-10-20.arrow")
	data, err := os.ReadFile(part)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)-100] ^= 0xff
	if err := os.WriteFile(part, data, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"inspect", "--model", p("ds")},
		{"trick", "--model", p("ds")},
		{"eval", "--model", p("ds"), "--input", p("t.csv")},
		{"fit", "--input", p("t.csv"), "--order", "4", "--init", p("ds"), "--out", p("x.arrow")},
		{"model", "assemble", p("ds"), "--out", p("x.arrow")},
	} {
		code, _, errs := emsf(t, args...)
		if code != 1 || !strings.Contains(errs, p("ds")) || !strings.Contains(errs, "part K-0-10-20.arrow: SHA-256 ") {
			t.Errorf("%s: exit %d, %q; want the part's digest mismatch", args[0], code, errs)
		}
	}
	assertOnlyFiles(t, dir, "ds", "t.csv", "truth.arrow")
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"model", "assemble", "--out", p("x.arrow")}, "name the DATASET"},
		{[]string{"model", "assemble", p("ds"), p("ds"), "--out", p("x.arrow")}, "unexpected argument"},
		{[]string{"model", "assemble", p("ds")}, "--out is required"},
		{[]string{"model", "assemble", p("t.csv"), "--out", p("x.arrow")}, "is not a model dataset"},
		{[]string{"model", "assemble", p("ds"), "--out", p("x.arrow"), "--format", "csv"}, `--format "csv"`},
		{[]string{"model", "split", p("truth.arrow"), "--out", p("ds2"), "--part-rows", "-1"}, "--part-rows -1"},
		{[]string{"model", "split", p("truth.arrow"), "--out", p("ds2"), "--format", "csv"}, `--format "csv"`},
		{[]string{"model", "split", p("truth.arrow"), "--out", p("ds")}, "is not empty"},
		{[]string{"model", "split", p("t.csv"), "--out", p("ds3")}, "neither an Arrow IPC file nor Parquet"},
	} {
		code, _, errs := emsf(t, tc.args...)
		if code == 0 || !strings.Contains(errs, tc.msg) {
			t.Errorf("%v: exit %d, %q; want %q", tc.args, code, errs, tc.msg)
		}
	}
	if _, err := os.Stat(p("ds3")); err == nil {
		if ents, _ := os.ReadDir(p("ds3")); len(ents) > 0 {
			t.Errorf("a failed split left %v", ents)
		}
	}
}

// TestFitDatasetOutIDs: a model with user ids is written as a model
// dataset (its vocabularies are parts too), which query, inspect and
// model assemble read in those ids: the assembled file is the one fit
// writes, byte for byte.
func TestFitDatasetOutIDs(t *testing.T) {
	dir := t.TempDir()
	in := writeFile(t, dir, "ids.csv", "state,action,next_state\nu1,left,u2\nu2,left,u3\nu3,right,u1\nu1,right,u3\n")
	ds, file := filepath.Join(dir, "ds")+"/", filepath.Join(dir, "m.arrow")
	for _, out := range []string{ds, file} {
		if code, _, errs := emsf(t, "fit", "--input", in, "--order", "2", "--quiet", "--out", out); code != 0 {
			t.Fatalf("fit --out %s: exit %d, %q", out, code, errs)
		}
	}
	code, out, errs := emsf(t, "query", "--model", ds, "topk", `{"state":"u1","action":"left","k":2}`)
	if code != 0 || !strings.Contains(out, `"state": "u`) {
		t.Fatalf("query of the dataset in ids: exit %d, %q %q", code, out, errs)
	}
	assembled := filepath.Join(dir, "assembled.arrow")
	if code, _, errs := emsf(t, "model", "assemble", ds, "--out", assembled); code != 0 {
		t.Fatalf("assemble: exit %d, %q", code, errs)
	}
	sameFile(t, file, assembled)
}
