package main

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/coordinator/service"
)

// gzipFile writes path's content gzip-compressed to dst.
func gzipFile(t *testing.T, path, dst string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(data)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// runStdin runs the emsf binary with stdin read from the file in, and
// fails the test if it leaves anything in its temporary folder (TMPDIR).
func runStdin(t *testing.T, bin, in string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	f, err := os.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tmp := t.TempDir()
	cmd := exec.Command(bin, args...)
	cmd.Stdin = f
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	if left, _ := os.ReadDir(tmp); len(left) > 0 {
		t.Errorf("emsf %s left %v in its temporary folder", strings.Join(args, " "), left)
	}
	return o.String(), e.String(), err
}

// Every format fits to the same model, bitwise and with the same data
// fingerprint, from the file, the file gzip-compressed (named .gz or
// not), and standard input, plain or compressed (issue 27: "zcat-free
// gzip input" and --input -).
func TestFitGzipAndStdin(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	for _, ext := range []string{"csv", "arrow", "parquet"} {
		in := filepath.Join(dir, "t."+ext)
		mustEmsf(t, "gen", "--states", "30", "--true-order", "5", "--actions", "2", "--transitions", "2000", "--seed", "4",
			"--out", in, "--truth", "")
		gz, bare := in+".gz", filepath.Join(dir, ext+"-compressed")
		gzipFile(t, in, gz)
		gzipFile(t, in, bare)
		fit := []string{"fit", "--order", "3", "--iters", "10", "--quiet", "--plain"} // --plain: the in-process runs add it (plainByDefault), the binary's must say it
		ref := filepath.Join(dir, ext+".ref.arrow")
		mustEmsf(t, append(fit, "--input", in, "--out", ref)...)
		want, err := arrowio.ReadModel(ref)
		if err != nil {
			t.Fatal(err)
		}
		check := func(what, out string) {
			t.Helper()
			got, err := arrowio.ReadModel(out)
			if err != nil {
				t.Fatalf("%s %s: %v", ext, what, err)
			}
			if !got.Model.Equal(want.Model) || got.Fingerprint != want.Fingerprint {
				t.Errorf("%s %s: the model (or fingerprint %s, want %s) differs from the plain file's", ext, what, got.Fingerprint, want.Fingerprint)
			}
		}
		for _, p := range []string{gz, bare} {
			out := p + ".model.arrow"
			mustEmsf(t, append(fit, "--input", p, "--out", out)...)
			check(p, out)
		}
		for _, p := range []string{in, gz} {
			out := p + ".stdin.arrow"
			if _, stderr, err := runStdin(t, bin, p, append(fit, "--input", "-", "--out", out)...); err != nil {
				t.Fatalf("fit --input - < %s: %v\n%s", p, err, stderr)
			}
			check("stdin < "+filepath.Base(p), out)
		}
	}
	// eval reads standard input too, and names it.
	stdout, stderr, err := runStdin(t, bin, filepath.Join(dir, "t.csv.gz"), "eval", "--model", filepath.Join(dir, "csv.ref.arrow"), "--input", "-")
	if err != nil || !strings.Contains(stdout, "data stdin: 2000 transitions") {
		t.Errorf("eval --input -: %v\n%s%s", err, stdout, stderr)
	}
	// Bad rows on standard input are named by row, column and value (a
	// number that is not an index: "x" would be an id).
	bad := writeFile(t, dir, "bad.csv", "state,action,next_state\n0,0,1\n0,1.5,1\n")
	gzipFile(t, bad, bad+".gz")
	for _, p := range []string{bad, bad + ".gz"} {
		_, stderr, err = runStdin(t, bin, p, "fit", "--input", "-", "--order", "2", "--out", filepath.Join(dir, "no.arrow"))
		if err == nil || !strings.Contains(stderr, `arrowio: stdin: row 2, column "action": value "1.5" is not a non-negative integer`) {
			t.Errorf("fit --input - < %s: %v, stderr %q", p, err, stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "no.arrow")); err == nil {
		t.Error("a failed fit wrote its model")
	}
}

// TestFitStdinLateIDs: with --ids auto, standard input whose state column
// turns to ids after its first rows is read again from what the first read
// kept (it cannot be reopened), plain and gzip-compressed: the model is
// that of the same file given by path, vocabulary included; emsf bench
// --ingest reads it too.
func TestFitStdinLateIDs(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	var b strings.Builder
	b.WriteString("state,action,next_state\n")
	for k := range 3000 {
		s := fmt.Sprint(k % 7)
		if k > 2500 && k%5 == 0 {
			s = fmt.Sprintf("late%d", k%3)
		}
		fmt.Fprintf(&b, "%s,%d,%d\n", s, k%2, (k*3)%7)
	}
	in := writeFile(t, dir, "late.csv", b.String())
	gzipFile(t, in, in+".gz")
	fit := []string{"fit", "--order", "2", "--iters", "5", "--quiet", "--plain"}
	ref := filepath.Join(dir, "ref.arrow")
	mustEmsf(t, append(fit, "--input", in, "--out", ref)...)
	want, err := arrowio.ReadModel(ref)
	if err != nil {
		t.Fatal(err)
	}
	if want.States == nil || want.States.Len() != 10 || want.Actions != nil {
		t.Fatalf("the reference fit's vocabularies: states %q, actions %v", want.States.Strings(), want.Actions)
	}
	for _, p := range []string{in, in + ".gz"} {
		out := p + ".stdin.arrow"
		if _, stderr, err := runStdin(t, bin, p, append(fit, "--input", "-", "--out", out)...); err != nil {
			t.Fatalf("fit --input - < %s: %v\n%s", p, err, stderr)
		}
		got, err := arrowio.ReadModel(out)
		if err != nil {
			t.Fatal(err)
		}
		if !got.Model.Equal(want.Model) || !got.States.Equal(want.States) || got.Fingerprint != want.Fingerprint {
			t.Errorf("fit --input - < %s: the model, its ids or its fingerprint differ from the file's", p)
		}
	}
	// emsf bench --ingest reads standard input as fit does.
	stdout, stderr, err := runStdin(t, bin, in, "bench", "--ingest", "-")
	if err != nil || !strings.Contains(stdout, "3000 transitions, n=10 u=2") {
		t.Errorf("bench --ingest - < %s: %v\n%s%s", in, err, stdout, stderr)
	}
}

// An incremental fit streams standard input when it reads it once, and
// says why not otherwise.
func TestFitIncrementalStdin(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "t.csv")
	mustEmsf(t, "gen", "--states", "30", "--true-order", "5", "--transitions", "2000", "--seed", "4", "--out", in, "--truth", "")
	gzipFile(t, in, in+".gz")
	inc := []string{"fit", "--incremental", "--order", "3", "--quiet", "--states", "30", "--actions", "1"}
	ref := filepath.Join(dir, "ref.arrow")
	mustEmsf(t, append(inc, "--input", in, "--out", ref)...)
	want, err := arrowio.ReadModel(ref)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "stdin.arrow")
	if _, stderr, err := runStdin(t, bin, in+".gz", append(inc, "--input", "-", "--out", out)...); err != nil {
		t.Fatalf("fit --incremental --input -: %v\n%s", err, stderr)
	}
	if got, err := arrowio.ReadModel(out); err != nil || !got.Model.Equal(want.Model) {
		t.Errorf("the incremental fit of standard input differs from the file's (%v)", err)
	}
	for _, extra := range [][]string{{"--passes", "2"}, {"--states", "0"}} {
		code, _, stderr := emsf(t, append(append(inc, extra...), "--input", "-", "--out", out)...)
		if code != 2 || !strings.Contains(stderr, "--input -: standard input can be read once, and this incremental fit reads its input 2 times") {
			t.Errorf("%v: exit %d, stderr %q", extra, code, stderr)
		}
	}
}

// emsf publish --input - sends standard input (copied first: every row is
// checked before any is sent), gzip-compressed or not, and names it in
// errors.
func TestPublishStdin(t *testing.T) {
	bin := buildBinary(t)
	url, nc := embeddedNATS(t, true)
	dir := t.TempDir()
	in := filepath.Join(dir, "t.csv")
	mustEmsf(t, "gen", "--states", "30", "--true-order", "5", "--transitions", "700", "--seed", "4", "--out", in, "--truth", "")
	gzipFile(t, in, in+".gz")
	stdout, stderr, err := runStdin(t, bin, in+".gz", "publish", "--nats", url, "--name", "piped", "--input", "-", "--create")
	if err != nil || !strings.Contains(stdout, "published 700 transitions") {
		t.Fatalf("publish --input -: %v\n%s%s", err, stdout, stderr)
	}
	js, _ := jetstream.New(nc)
	s, err := js.Stream(t.Context(), service.StreamName("emsf", "piped"))
	if err != nil {
		t.Fatal(err)
	}
	if info, err := s.Info(t.Context()); err != nil || info.State.Msgs == 0 {
		t.Errorf("stream after publish: %v, %+v", err, info)
	}
	bad := writeFile(t, dir, "bad.csv", "state,action,next_state\n1,0,2\n3,0,-4\n")
	_, stderr, err = runStdin(t, bin, bad, "publish", "--nats", url, "--name", "piped", "--input", "-")
	if err == nil || !strings.Contains(stderr, `/stdin: row 2, column "next_state"`) {
		t.Errorf("publish --input - < bad.csv: %v, stderr %q", err, stderr)
	}
}
