package arrowio

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v15/arrow/array"

	"github.com/emsf/emsf/factor"
)

// withBatchBytes makes model files' record batches hold at most b bytes of
// values, so that small models have many batches.
func withBatchBytes(b int) Option { return func(c *config) { c.batchBytes = b } }

// writeParts writes md as a dataset in dir the way owners would: every
// block cut at random into parts, each part's rows appended in random
// pieces; it returns the committed manifest.
func writeParts(t *testing.T, rng *rand.Rand, dir string, mf *ModelFile, format string, opts ...Option) *ModelManifest {
	t.Helper()
	ctx := context.Background()
	md := mf.Model
	sink := DirParts{Dir: dir}
	var lines []ModelPart
	for _, blk := range modelBlocks(md.U, md.Tie) {
		vals := md.KT
		if blk.factor == "D" {
			vals = md.D
		}
		for lo := 0; lo < md.N; {
			hi := min(md.N, lo+1+rng.IntN(md.N/3+1))
			pw, err := NewModelPartWriter(ctx, sink, ShapeOf(md), PartSpec{Factor: blk.factor, Block: blk.block, Lo: lo, Hi: hi,
				Attempt: "a1", Format: format}, opts...)
			if err != nil {
				t.Fatal(err)
			}
			for i := lo; i < hi; {
				j := min(hi, i+1+rng.IntN(hi-lo))
				if err := pw.Append(vals[blk.block][i*md.M : j*md.M]); err != nil {
					t.Fatal(err)
				}
				i = j
			}
			line, err := pw.Close()
			if err != nil {
				t.Fatal(err)
			}
			lines = append(lines, line)
			lo = hi
		}
	}
	// Owners report in any order; the coordinator commits with the model's
	// metadata only.
	rng.Shuffle(len(lines), func(i, j int) { lines[i], lines[j] = lines[j], lines[i] })
	hdr := *mf
	hdr.Model = &factor.Model{N: md.N, M: md.M, U: md.U, Tie: md.Tie, Iteration: md.Iteration, LogLik: md.LogLik, WKL: md.WKL, Seed: md.Seed}
	man, err := CommitModelDataset(ctx, sink, &hdr, lines)
	if err != nil {
		t.Fatal(err)
	}
	return man
}

func readBytes(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestAssembleModelByteIdentical: a model written in parts (random cuts,
// rows appended in random pieces, parts in either format, many record
// batches a block) assembles into the very bytes WriteModel writes, for
// every tie mode and both output formats; reading the dataset gives the
// model back bitwise, and no Arrow buffer is leaked.
func TestAssembleModelByteIdentical(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(25, 4))
	ties := []factor.Tie{factor.TieNone, factor.TieSharedK, factor.TieSharedD}
	for i := range 12 {
		n, m, u := 1+rng.IntN(40), 1+rng.IntN(6), 1+rng.IntN(3)
		tie := ties[i%3]
		batch := 8 * m * (1 + rng.IntN(n+2)) // from one row a batch to one batch a block
		partFormat := []string{ModelArrow, ModelParquet}[rng.IntN(2)]
		out := []string{ModelArrow, ModelParquet}[i/3%2]
		name := fmt.Sprintf("%d-n%d-m%d-u%d-%s-batch%d-parts-%s-out-%s", i, n, m, u, tie, batch/(8*m), partFormat, out)
		t.Run(name, func(t *testing.T) {
			mem := checkedMem(t)
			opts := []Option{WithAllocator(mem), withBatchBytes(batch)}
			mf := testModel(tie)
			md := factor.NewRandom(n, m, u, tie, rng.Uint64())
			md.Iteration, md.LogLik, md.WKL = mf.Model.Iteration, mf.Model.LogLik, mf.Model.WKL
			mf.Model = md
			dir := t.TempDir()
			want := filepath.Join(dir, "model."+out)
			if err := WriteModel(want, mf, out, opts...); err != nil {
				t.Fatal(err)
			}
			ds := filepath.Join(dir, "ds")
			writeParts(t, rng, ds, mf, partFormat, opts...)
			got := filepath.Join(dir, "assembled."+out)
			if err := AssembleModel(ctx, DirParts{Dir: ds}, got, out, opts...); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(readBytes(t, got), readBytes(t, want)) {
				t.Fatalf("assembled %s differs from WriteModel's", out)
			}
			for _, p := range []string{ds, filepath.Join(ds, ManifestName)} {
				back, err := ReadModelAny(ctx, p, WithAllocator(mem))
				if err != nil {
					t.Fatal(err)
				}
				sameModelFile(t, back, mf)
			}
		})
	}
}

// TestSplitModelRoundTrip: emsf model split then assemble gives back the
// file byte for byte, for both input formats, both part formats and parts
// of one row to whole blocks; the parts are listed in file order.
func TestSplitModelRoundTrip(t *testing.T) {
	ctx := context.Background()
	for _, in := range []string{ModelArrow, ModelParquet} {
		for _, parts := range []string{ModelArrow, ModelParquet} {
			for _, partRows := range []int{0, 3, 100} {
				t.Run(fmt.Sprintf("%s-to-%s-rows%d", in, parts, partRows), func(t *testing.T) {
					mem := checkedMem(t)
					opts := []Option{WithAllocator(mem), withBatchBytes(8 * 5 * 4)}
					mf := testModel(factor.TieSharedD)
					dir := t.TempDir()
					file := filepath.Join(dir, "model."+in)
					if err := WriteModel(file, mf, in, opts...); err != nil {
						t.Fatal(err)
					}
					ds := filepath.Join(dir, "ds")
					man, err := SplitModel(ctx, file, DirParts{Dir: ds}, parts, partRows, opts...)
					if err != nil {
						t.Fatal(err)
					}
					per := partRows
					if per == 0 || per > 37 {
						per = 37
					}
					if want := 4 * ((37 + per - 1) / per); len(man.Parts) != want {
						t.Errorf("%d parts, want %d", len(man.Parts), want)
					}
					back := filepath.Join(dir, "back."+in)
					if err := AssembleModel(ctx, DirParts{Dir: ds}, back, in, opts...); err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(readBytes(t, back), readBytes(t, file)) {
						t.Fatal("split then assemble changed the file")
					}
				})
			}
		}
	}
}

// baseDataset writes testModel(none) as a dataset of parts of 10 rows (4
// per block) and returns its directory.
func baseDataset(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "model.arrow")
	if err := WriteModel(file, testModel(factor.TieNone), ModelArrow); err != nil {
		t.Fatal(err)
	}
	ds := filepath.Join(dir, "ds")
	if _, err := SplitModel(context.Background(), file, DirParts{Dir: ds}, ModelArrow, 10); err != nil {
		t.Fatal(err)
	}
	return ds
}

// dataset returns a copy of base in a directory of its own, its manifest
// and its model.
func dataset(t *testing.T, base string) (string, *ModelManifest, *ModelFile) {
	t.Helper()
	ds := filepath.Join(t.TempDir(), "ds")
	if err := os.CopyFS(ds, os.DirFS(base)); err != nil {
		t.Fatal(err)
	}
	man, err := ReadModelManifest(context.Background(), DirParts{Dir: ds})
	if err != nil {
		t.Fatal(err)
	}
	return ds, man, testModel(factor.TieNone)
}

func editManifest(t *testing.T, ds string, edit func(man map[string]any)) {
	t.Helper()
	path := filepath.Join(ds, ManifestName)
	var man map[string]any
	if err := json.Unmarshal(readBytes(t, path), &man); err != nil {
		t.Fatal(err)
	}
	edit(man)
	data, err := json.Marshal(man)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func partLines(man map[string]any) []any { return man["parts"].([]any) }

func line(man map[string]any, i int) map[string]any { return partLines(man)[i].(map[string]any) }

// TestModelDatasetBad: every way a dataset can be wrong fails reading and
// assembling with one error naming the dataset, the file and what is
// wrong, and assembling leaves no output file.
func TestModelDatasetBad(t *testing.T) {
	ctx := context.Background()
	base := baseDataset(t)
	for _, tc := range []struct {
		name  string
		spoil func(t *testing.T, ds string, man *ModelManifest)
		msg   string
	}{
		{"no manifest", func(t *testing.T, ds string, _ *ModelManifest) {
			os.Remove(filepath.Join(ds, ManifestName))
		}, "manifest.json: open "},
		{"missing part", func(t *testing.T, ds string, man *ModelManifest) {
			os.Remove(filepath.Join(ds, man.Parts[5].File))
		}, "part D-1-10-20.arrow: open "},
		{"digest", func(t *testing.T, ds string, man *ModelManifest) {
			p := filepath.Join(ds, man.Parts[6].File)
			b := readBytes(t, p)
			b[len(b)/2] ^= 1
			os.WriteFile(p, b, 0o644)
		}, "part D-1-20-30.arrow: SHA-256 "},
		{"size", func(t *testing.T, ds string, man *ModelManifest) {
			p := filepath.Join(ds, man.Parts[7].File)
			os.WriteFile(p, append(readBytes(t, p), 0), 0o644)
		}, "part D-1-30-37.arrow: "},
		{"version", func(t *testing.T, ds string, _ *ModelManifest) {
			editManifest(t, ds, func(m map[string]any) { m["format_version"] = "2" })
		}, `manifest.json: format_version is "2"; this build reads version 1`},
		{"kind", func(t *testing.T, ds string, _ *ModelManifest) {
			editManifest(t, ds, func(m map[string]any) { m["kind"] = "shard" })
		}, `manifest.json: kind is "shard", want "model_dataset"`},
		{"not json", func(t *testing.T, ds string, _ *ModelManifest) {
			os.WriteFile(filepath.Join(ds, ManifestName), []byte("ARROW1"), 0o644)
		}, "manifest.json: not a manifest"},
		{"metadata", func(t *testing.T, ds string, _ *ModelManifest) {
			editManifest(t, ds, func(m map[string]any) { m["metadata"].(map[string]any)["emsf.m"] = "five" })
		}, `emsf.m = "five" is not an integer`},
		{"gap", func(t *testing.T, ds string, _ *ModelManifest) {
			editManifest(t, ds, func(m map[string]any) { m["parts"] = slices.Delete(partLines(m), 2, 3) })
		}, "D block 0: rows [20, 30) are in no part"},
		{"end", func(t *testing.T, ds string, _ *ModelManifest) {
			editManifest(t, ds, func(m map[string]any) { m["parts"] = partLines(m)[:23] })
		}, "K block 2: rows [30, 37) are in no part"},
		{"overlap", func(t *testing.T, ds string, _ *ModelManifest) {
			editManifest(t, ds, func(m map[string]any) { line(m, 1)["lo"] = 5.0; line(m, 1)["rows"] = 15.0 })
		}, "D block 0: part D-0-10-20.arrow (rows [5, 20)) overlaps"},
		{"order", func(t *testing.T, ds string, _ *ModelManifest) {
			editManifest(t, ds, func(m map[string]any) { ps := partLines(m); ps[0], ps[12] = ps[12], ps[0] })
		}, "are in no part"},
		{"rows", func(t *testing.T, ds string, _ *ModelManifest) {
			editManifest(t, ds, func(m map[string]any) { line(m, 3)["rows"] = 8.0 })
		}, "part D-0-30-37.arrow: rows = 8, but [30, 37) holds 7"},
		{"block", func(t *testing.T, ds string, _ *ModelManifest) {
			editManifest(t, ds, func(m map[string]any) { line(m, 3)["block"] = 3.0 })
		}, "part D-0-30-37.arrow: D block 3: out of range"},
		{"file name", func(t *testing.T, ds string, _ *ModelManifest) {
			editManifest(t, ds, func(m map[string]any) { line(m, 3)["file"] = "../D-0-30-37.arrow" })
		}, `part file "../D-0-30-37.arrow" is not a relative`},
		{"sha", func(t *testing.T, ds string, _ *ModelManifest) {
			editManifest(t, ds, func(m map[string]any) { line(m, 3)["sha256"] = "ABC" })
		}, `part D-0-30-37.arrow: sha256 "ABC" is not 64 lowercase hex digits`},
		{"twice", func(t *testing.T, ds string, _ *ModelManifest) {
			editManifest(t, ds, func(m map[string]any) { line(m, 3)["file"] = line(m, 2)["file"] })
		}, "part D-0-20-30.arrow is listed twice"},
		{"swapped files", func(t *testing.T, ds string, _ *ModelManifest) {
			// Lines whose files exist with the right sizes and digests but hold
			// other rows: the part's own metadata catches it.
			editManifest(t, ds, func(m map[string]any) {
				a, b := line(m, 1), line(m, 5)
				for _, k := range []string{"file", "bytes", "sha256"} {
					a[k], b[k] = b[k], a[k]
				}
			})
		}, "part D-1-10-20.arrow: holds D block 1 rows [10, 20), the manifest says D block 0 rows [10, 20)"},
		{"part of another model", func(t *testing.T, ds string, man *ModelManifest) {
			other := factor.NewRandom(40, 5, 3, factor.TieNone, 9)
			line, err := WriteModelPart(context.Background(), DirParts{Dir: ds}, ShapeOf(other),
				PartSpec{Factor: "D", Block: 0, Lo: 0, Hi: 10, Attempt: "x"}, other.D[0][:50])
			if err != nil {
				t.Fatal(err)
			}
			editManifest(t, ds, func(m map[string]any) {
				l := map[string]any{}
				b, _ := json.Marshal(line)
				json.Unmarshal(b, &l)
				partLines(m)[0] = l
			})
		}, "a part of a model with n=40 m=5 u=3 tie=none, the manifest's has n=37"},
		{"too small", func(t *testing.T, ds string, man *ModelManifest) {
			p := man.Parts[0]
			data := readBytes(t, filepath.Join(ds, p.File))[:100]
			os.WriteFile(filepath.Join(ds, p.File), data, 0o644)
			editManifest(t, ds, func(m map[string]any) {
				line(m, 0)["bytes"] = 100.0
				line(m, 0)["sha256"] = fmt.Sprintf("%x", sha256sum(data))
			})
		}, "part D-0-0-10.arrow: 100 bytes cannot hold its 10 rows of m = 5 values"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds, man, _ := dataset(t, base)
			tc.spoil(t, ds, man)
			_, err := ReadModelAny(ctx, ds)
			if err == nil || !strings.Contains(err.Error(), "arrowio: read model "+ds+": ") || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("read: got %v, want an error naming %s with %q", err, ds, tc.msg)
			}
			out := filepath.Join(t.TempDir(), "out.arrow")
			err = AssembleModel(ctx, DirParts{Dir: ds}, out, ModelArrow)
			// The size check of "too small" is ReadModelDataset's; assembling
			// streams, and the cut file fails as a corrupt part.
			if msg := tc.msg; tc.name == "too small" {
				msg = "part D-0-0-10.arrow: "
				if err == nil || !strings.Contains(err.Error(), msg) {
					t.Errorf("assemble: got %v, want %q", err, msg)
				}
			} else if err == nil || !strings.Contains(err.Error(), "arrowio: assemble model "+ds+" into "+out+": ") || !strings.Contains(err.Error(), msg) {
				t.Errorf("assemble: got %v, want an error naming %s with %q", err, ds, msg)
			}
			if _, err := os.Stat(out); err == nil {
				t.Error("a failed assemble left its output")
			}
		})
	}
}

// TestModelDatasetIgnoresUnlisted: files the manifest does not list (a
// failed attempt's parts, anything else) do not matter.
func TestModelDatasetIgnoresUnlisted(t *testing.T) {
	ds, _, mf := dataset(t, baseDataset(t))
	for _, junk := range []string{"D-0-0-10.e2.arrow", "notes.txt", "D-0-0-37.arrow"} {
		if err := os.WriteFile(filepath.Join(ds, junk), []byte("junk"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := ReadModelAny(context.Background(), ds)
	if err != nil {
		t.Fatal(err)
	}
	sameModelFile(t, got, mf)
}

// TestModelPartWriterBad: a writer refuses what is not its part, and a
// failed or aborted part leaves nothing under its name; a commit whose
// parts do not cover the model writes no manifest.
func TestModelPartWriterBad(t *testing.T) {
	ctx := context.Background()
	mem := checkedMem(t)
	dir := t.TempDir()
	sink := DirParts{Dir: dir}
	md := factor.NewRandom(10, 3, 2, factor.TieSharedK, 1)
	s := ShapeOf(md)
	for _, tc := range []struct {
		spec PartSpec
		msg  string
	}{
		{PartSpec{Factor: "K", Block: 1, Lo: 0, Hi: 5}, "K block 1: out of range (a model with u=2 tie=shared-k has 2 D and 1 K blocks)"},
		{PartSpec{Factor: "X", Block: 0, Lo: 0, Hi: 5}, `factor "X" (want D or K)`},
		{PartSpec{Factor: "D", Block: 0, Lo: 5, Hi: 5}, "rows [5, 5) are not a non-empty range of [0, 10)"},
		{PartSpec{Factor: "D", Block: 0, Lo: 0, Hi: 11}, "rows [0, 11) are not"},
		{PartSpec{Factor: "D", Block: 0, Lo: 0, Hi: 5, Attempt: "a/b"}, `attempt "a/b"`},
		{PartSpec{Factor: "D", Block: 0, Lo: 0, Hi: 5, Format: "csv"}, `unknown model format "csv"`},
	} {
		if _, err := NewModelPartWriter(ctx, sink, s, tc.spec, WithAllocator(mem)); err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%+v: got %v, want %q", tc.spec, err, tc.msg)
		}
	}
	spec := PartSpec{Factor: "D", Block: 1, Lo: 2, Hi: 6}
	pw, err := NewModelPartWriter(ctx, sink, s, spec, WithAllocator(mem))
	if err != nil {
		t.Fatal(err)
	}
	if err := pw.Append(md.D[1][:4]); err == nil || !strings.Contains(err.Error(), "4 values are not whole rows of m = 3") {
		t.Errorf("partial row: got %v", err)
	}
	if _, err := pw.Close(); err == nil {
		t.Error("Close after a failure: no error")
	}
	pw, err = NewModelPartWriter(ctx, sink, s, spec, WithAllocator(mem))
	if err != nil {
		t.Fatal(err)
	}
	if err := pw.Append(md.D[1][6:18]); err != nil {
		t.Fatal(err)
	}
	if err := pw.Append(md.D[1][18:21]); err == nil || !strings.Contains(err.Error(), "rows [6, 7) run past the part's rows [2, 6)") {
		t.Errorf("past hi: got %v", err)
	}
	pw, err = NewModelPartWriter(ctx, sink, s, spec, WithAllocator(mem))
	if err != nil {
		t.Fatal(err)
	}
	if err := pw.Append(md.D[1][6:12]); err != nil {
		t.Fatal(err)
	}
	if _, err := pw.Close(); err == nil || !strings.Contains(err.Error(), "write model part D-1-2-6.arrow in "+dir+": closed with rows [2, 4) of [2, 6)") {
		t.Errorf("short: got %v", err)
	}
	pw, err = NewModelPartWriter(ctx, sink, s, spec, WithAllocator(mem))
	if err != nil {
		t.Fatal(err)
	}
	pw.Abort()
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("failed parts left %v", ents)
	}
	line, err := WriteModelPart(ctx, sink, s, spec, md.D[1][6:18], WithAllocator(mem))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := CommitModelDataset(ctx, sink, &ModelFile{Model: md}, []ModelPart{line}); err == nil ||
		!strings.Contains(err.Error(), "arrowio: commit model dataset "+dir+": D block 0: rows [0, 10) are in no part") {
		t.Errorf("commit: got %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, ManifestName)); err == nil {
		t.Error("a refused commit wrote a manifest")
	}
}

// TestSplitModelBad: a file whose rows are not in a model file's order
// cannot be split; nothing is left in the dataset directory.
func TestSplitModelBad(t *testing.T) {
	mf := &ModelFile{Model: factor.NewRandom(2, 2, 1, factor.TieNone, 1)}
	md := mf.Model
	path := writeRawModel(t, mf, func(rb *array.RecordBuilder) {
		appendModelRow(rb, "D", 0, 0, md.D[0][0:2])
		appendModelRow(rb, "K", 0, 0, md.KT[0][0:2])
		appendModelRow(rb, "D", 0, 1, md.D[0][2:4])
		appendModelRow(rb, "K", 0, 1, md.KT[0][2:4])
	})
	ds := filepath.Join(t.TempDir(), "ds")
	_, err := SplitModel(context.Background(), path, DirParts{Dir: ds}, ModelArrow, 1)
	if want := "arrowio: split model " + path + ": row 2 is K action 0 state 0, want D action 0 state 1"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v, want %q", err, want)
	}
	if ents, _ := os.ReadDir(ds); len(ents) != 0 {
		t.Errorf("a failed split left %v", ents)
	}
}

func sha256sum(b []byte) [32]byte { return sha256.Sum256(b) }

// TestSplitModelCancelled: a split stopped by its context leaves nothing.
func TestSplitModelCancelled(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "model.arrow")
	if err := WriteModel(file, testModel(factor.TieNone), ModelArrow, withBatchBytes(8*5*4)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ds := filepath.Join(dir, "ds")
	if _, err := SplitModel(ctx, file, DirParts{Dir: ds}, ModelArrow, 10); !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
	if ents, _ := os.ReadDir(ds); len(ents) != 0 {
		t.Errorf("a cancelled split left %v", ents)
	}
}
