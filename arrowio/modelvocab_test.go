package arrowio

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/ipc"
	"github.com/apache/arrow/go/v15/arrow/memory"
	"github.com/apache/arrow/go/v15/parquet"
	"github.com/apache/arrow/go/v15/parquet/pqarrow"

	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
)

// vocabOf returns a vocabulary of n ids named prefix0, prefix1, ... with a
// multi-byte id among them.
func vocabOf(t *testing.T, prefix string, n int) *shard.Vocab {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	ids[n/2] = "日本/" + prefix
	v, err := shard.NewVocab(ids)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func sameVocab(t *testing.T, what string, got, want *shard.Vocab) {
	t.Helper()
	if (got == nil) != (want == nil) || got != nil && !got.Equal(want) {
		t.Errorf("%s vocabulary: got %q, want %q", what, got.Strings(), want.Strings())
	}
}

// TestModelVocabRoundTrip: a model with vocabularies (states, actions or
// both) round-trips through Arrow IPC and Parquet (with and without the
// stored Arrow schema), as format version 2; one without stays version 1
// with four columns.
func TestModelVocabRoundTrip(t *testing.T) {
	for _, which := range []string{"states", "actions", "states,actions"} {
		for _, format := range []string{ModelArrow, ModelParquet, "parquet-noschema"} {
			t.Run(which+"/"+format, func(t *testing.T) {
				mem := checkedMem(t)
				mf := testModel(factor.TieSharedK)
				if strings.Contains(which, "states") {
					mf.States = vocabOf(t, "s", mf.Model.N)
				}
				if strings.Contains(which, "actions") {
					mf.Actions = vocabOf(t, "a", mf.Model.U)
				}
				var got *ModelFile
				var err error
				if format == "parquet-noschema" {
					sc := modelSchema(mf)
					var buf bytes.Buffer
					fw, ferr := pqarrow.NewFileWriter(sc, &buf, parquet.NewWriterProperties(), pqarrow.DefaultWriterProps())
					if ferr != nil {
						t.Fatal(ferr)
					}
					if err := emitModel(mf, sc, memory.NewGoAllocator(), 1000, fw.Write); err != nil {
						t.Fatal(err)
					}
					if err := fw.Close(); err != nil {
						t.Fatal(err)
					}
					got, err = DecodeModel(buf.Bytes(), WithAllocator(mem))
				} else {
					path := filepath.Join(t.TempDir(), "m."+format)
					if err := WriteModel(path, mf, format, WithAllocator(mem)); err != nil {
						t.Fatal(err)
					}
					got, err = ReadModel(path, WithAllocator(mem))
				}
				if err != nil {
					t.Fatal(err)
				}
				sameModelFile(t, got, mf)
				sameVocab(t, "state", got.States, mf.States)
				sameVocab(t, "action", got.Actions, mf.Actions)
			})
		}
	}
	// The schema and metadata any Arrow reader sees.
	mf := testModel(factor.TieNone)
	mf.States = vocabOf(t, "s", mf.Model.N)
	data, err := EncodeModel(mf)
	if err != nil {
		t.Fatal(err)
	}
	fr, err := ipc.NewFileReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer fr.Close()
	md := fr.Schema().Metadata()
	sum := mf.States.Checksum()
	for k, want := range map[string]string{"emsf.format_version": "2", "emsf.vocab": "states", "emsf.vocab_checksum.states": fmt.Sprintf("%x", sum)} {
		if i := md.FindKey(k); i < 0 || md.Values()[i] != want {
			t.Errorf("metadata %s: got %v, want %q", k, md, want)
		}
	}
	if f, ok := fr.Schema().FieldsByName("id"); !ok || f[0].Type.ID() != arrow.STRING {
		t.Errorf("no utf8 id column: %v", fr.Schema())
	}
	mf.States = nil
	plain, err := EncodeModel(mf)
	if err != nil {
		t.Fatal(err)
	}
	pr, err := ipc.NewFileReader(bytes.NewReader(plain))
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	if pr.Schema().NumFields() != 4 || pr.Schema().Metadata().Values()[0] != "1" {
		t.Errorf("a model without ids is not version 1 with 4 columns: %v", pr.Schema())
	}
}

// TestModelVocabBad: a vocabulary of the wrong length is not written; a
// file whose ids do not match their checksum, or repeat, is not read.
func TestModelVocabBad(t *testing.T) {
	mf := testModel(factor.TieNone)
	mf.States = vocabOf(t, "s", mf.Model.N-1)
	if err := WriteModel(filepath.Join(t.TempDir(), "m.arrow"), mf, ""); err == nil || !strings.Contains(err.Error(), "state vocabulary has 36 ids, the model n=37") {
		t.Errorf("short vocabulary written: %v", err)
	}
	for name, other := range map[string]func() *shard.Vocab{
		"mangled": func() *shard.Vocab { return vocabOf(t, "t", mf.Model.N) },
		"repeated": func() *shard.Vocab {
			ids := vocabOf(t, "s", mf.Model.N).Strings()
			ids[3] = ids[2] + "\x00" // the writer does not check; NUL makes it fail NewVocab on read
			var v shard.Vocab
			for _, id := range ids {
				if _, err := v.Intern([]byte(id)); err != nil {
					t.Fatal(err)
				}
			}
			return &v
		},
	} {
		mf.States = vocabOf(t, "s", mf.Model.N)
		sc := modelSchema(mf) // checksum of the s ids
		bad := *mf
		bad.States = other()
		var buf bytes.Buffer
		mem := memory.NewGoAllocator()
		if err := writeIPCFile(&buf, sc, mem, func(write func(arrow.Record) error) error {
			return emitModel(&bad, sc, mem, modelBatchBytes, write)
		}); err != nil {
			t.Fatal(err)
		}
		_, err := DecodeModel(buf.Bytes())
		want := map[string]string{"mangled": "do not match emsf.vocab_checksum.states", "repeated": "NUL"}[name]
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", name, err, want)
		}
	}
}

// TestModelVocabSmoothingRoundTrip: a model with vocabularies and a
// smoothing rule (the id column beside the Q and C streams) reads back
// with both, in both formats, for m = 1 and m = 4.
func TestModelVocabSmoothingRoundTrip(t *testing.T) {
	for _, m := range []int{1, 4} {
		for _, format := range []string{ModelArrow, ModelParquet} {
			const n, u = 9, 2
			md := factor.NewRandom(n, m, u, factor.TieSharedK, 3)
			blocks := factor.RandomCounts(n, u, 2, 3, 4)
			sm, err := factor.NewSmoothing(n, u, blocks, []factor.RuleParams{
				{Lambda: 0.2, Kappa: 3, Delta: 0.5}, {Lambda: 0.5, Kappa: math.Inf(1), Delta: math.Inf(1)}})
			if err != nil {
				t.Fatal(err)
			}
			md.Smoothing = sm
			mf := &ModelFile{Model: md, States: vocabOf(t, "s", n), Actions: vocabOf(t, "a", u)}
			path := filepath.Join(t.TempDir(), "m."+format)
			if err := WriteModel(path, mf, format); err != nil {
				t.Fatal(err)
			}
			got, err := ReadModel(path)
			if err != nil {
				t.Fatalf("m=%d %s: %v", m, format, err)
			}
			sameVocab(t, "states", got.States, mf.States)
			sameVocab(t, "actions", got.Actions, mf.Actions)
			if got.Model.Smoothing == nil || !got.Model.Equal(md) {
				t.Fatalf("m=%d %s: smoothing or factors lost", m, format)
			}
			for a := range u {
				for i := range n {
					for j := range n {
						if p, q := got.Model.Prob(a, i, j), md.Prob(a, i, j); p != q {
							t.Fatalf("m=%d %s: P̃^%d[%d,%d] = %v, written %v", m, format, a, i, j, p, q)
						}
					}
				}
			}
		}
	}
}

// TestSplitIDs: a model with vocabularies splits into a dataset whose
// vocabulary parts (blocks S and A, after every other) hold the ids, in
// parts of partRows too; the dataset reads back as the model, ids and
// all, and assembles into the file WriteModel writes, byte for byte. A
// mangled id fails the vocabulary's checksum on reading and assembling.
func TestSplitIDs(t *testing.T) {
	for _, format := range []string{ModelArrow, ModelParquet} {
		for _, partRows := range []int{0, 3} {
			mf := testModel(factor.TieNone)
			mf.States = vocabOf(t, "s", mf.Model.N)
			mf.Actions = vocabOf(t, "a", mf.Model.U)
			dir := t.TempDir()
			path := filepath.Join(dir, "m."+format)
			if err := WriteModel(path, mf, format); err != nil {
				t.Fatal(err)
			}
			ds := filepath.Join(dir, "ds")
			man, err := SplitModel(t.Context(), path, DirParts{Dir: ds}, format, partRows)
			if err != nil {
				t.Fatalf("%s rows %d: %v", format, partRows, err)
			}
			var ids []string
			for _, p := range man.Parts {
				if p.Factor == "S" || p.Factor == "A" {
					ids = append(ids, fmt.Sprintf("%s[%d,%d)", p.Factor, p.Lo, p.Hi))
				}
			}
			if len(ids) == 0 || man.Parts[len(man.Parts)-1].Factor != "A" {
				t.Fatalf("%s rows %d: vocabulary parts %v, want S then A parts last", format, partRows, ids)
			}
			got, err := ReadModelDataset(t.Context(), DirParts{Dir: ds})
			if err != nil {
				t.Fatalf("%s rows %d: %v", format, partRows, err)
			}
			if !got.Model.Equal(mf.Model) || got.States == nil || !got.States.Equal(mf.States) || got.Actions == nil || !got.Actions.Equal(mf.Actions) {
				t.Fatalf("%s rows %d: the dataset reads back another model or other ids", format, partRows)
			}
			again := filepath.Join(dir, "again."+format)
			if err := AssembleModel(t.Context(), DirParts{Dir: ds}, again, format); err != nil {
				t.Fatal(err)
			}
			a, _ := os.ReadFile(path)
			b, _ := os.ReadFile(again)
			if !bytes.Equal(a, b) {
				t.Fatalf("%s rows %d: the assembled file differs from the one written (%d and %d bytes)", format, partRows, len(a), len(b))
			}
		}
	}
	// A mangled id (the part's bytes and the manifest's digest made to
	// agree): the vocabulary's checksum catches it.
	mf := testModel(factor.TieNone)
	mf.States = vocabOf(t, "s", mf.Model.N)
	dir := t.TempDir()
	path := filepath.Join(dir, "m.arrow")
	if err := WriteModel(path, mf, ModelArrow); err != nil {
		t.Fatal(err)
	}
	ds := filepath.Join(dir, "ds")
	man, err := SplitModel(t.Context(), path, DirParts{Dir: ds}, ModelArrow, 0)
	if err != nil {
		t.Fatal(err)
	}
	last := &man.Parts[len(man.Parts)-1]
	part := filepath.Join(ds, last.File)
	data, _ := os.ReadFile(part)
	id := []byte(mf.States.String(mf.Model.N - 1))
	k := bytes.LastIndex(data, id)
	if k < 0 {
		t.Fatal("the last id is not in its part's bytes")
	}
	data[k] ^= 1
	if err := os.WriteFile(part, data, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	last.SHA256 = hex.EncodeToString(sum[:])
	js, _ := json.Marshal(man)
	if err := os.WriteFile(filepath.Join(ds, ManifestName), js, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadModelDataset(t.Context(), DirParts{Dir: ds}); err == nil || !strings.Contains(err.Error(), "mangled") {
		t.Fatalf("read a mangled id: %v", err)
	}
	if err := AssembleModel(t.Context(), DirParts{Dir: ds}, filepath.Join(dir, "x.arrow"), ModelArrow); err == nil || !strings.Contains(err.Error(), "mangled") {
		t.Fatalf("assemble a mangled id: %v", err)
	}
}
