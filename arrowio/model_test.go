package arrowio

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/ipc"
	"github.com/apache/arrow/go/v15/arrow/memory"
	"github.com/apache/arrow/go/v15/parquet"
	"github.com/apache/arrow/go/v15/parquet/pqarrow"

	"github.com/emsf/emsf/factor"
)

func testModel(tie factor.Tie) *ModelFile {
	md := factor.NewRandom(37, 5, 3, tie, 42)
	md.Iteration = 17
	md.LogLik = -1234.5678901234567
	tenth := 0.1
	md.WKL = tenth + 0.2 // 0.30000000000000004: not a short decimal
	mf := &ModelFile{Model: md, Fingerprint: "sha256:abc", Params: map[string]string{"alpha": "1", "m": "5", "note": "a=b, c"},
		Status: "iteration limit"}
	if tie != factor.TieSharedK { // the shared-K model says nothing of its reduce order
		mf.ReduceOrder, mf.GroupNNZ = factor.ReduceOrder, 1<<25
	}
	return mf
}

func sameModelFile(t *testing.T, got, want *ModelFile) {
	t.Helper()
	g, w := got.Model, want.Model
	if !g.Equal(w) {
		t.Error("factors differ")
	}
	if g.Iteration != w.Iteration || g.Seed != w.Seed ||
		math.Float64bits(g.LogLik) != math.Float64bits(w.LogLik) && !(math.IsNaN(g.LogLik) && math.IsNaN(w.LogLik)) ||
		math.Float64bits(g.WKL) != math.Float64bits(w.WKL) && !(math.IsNaN(g.WKL) && math.IsNaN(w.WKL)) {
		t.Errorf("metadata: got it=%d ll=%v wkl=%v seed=%d, want it=%d ll=%v wkl=%v seed=%d",
			g.Iteration, g.LogLik, g.WKL, g.Seed, w.Iteration, w.LogLik, w.WKL, w.Seed)
	}
	if got.Fingerprint != want.Fingerprint || !reflect.DeepEqual(got.Params, want.Params) || got.Status != want.Status {
		t.Errorf("got fingerprint %q params %v status %q", got.Fingerprint, got.Params, got.Status)
	}
	if got.ReduceOrder != want.ReduceOrder || got.GroupNNZ != want.GroupNNZ {
		t.Errorf("got reduce order %q group nnz %d, want %q %d", got.ReduceOrder, got.GroupNNZ, want.ReduceOrder, want.GroupNNZ)
	}
}

func TestModelRoundTrip(t *testing.T) {
	dir := t.TempDir()
	for _, tie := range []factor.Tie{factor.TieNone, factor.TieSharedK, factor.TieSharedD} {
		for _, format := range []string{ModelArrow, ModelParquet} {
			t.Run(tie.String()+"/"+format, func(t *testing.T) {
				mem := checkedMem(t)
				mf := testModel(tie)
				if format == ModelParquet {
					mf.Model.LogLik, mf.Params = math.NaN(), nil
				}
				path := filepath.Join(dir, "model-"+tie.String()+"."+format)
				if err := WriteModel(path, mf, format, WithAllocator(mem)); err != nil {
					t.Fatal(err)
				}
				got, err := ReadModel(path, WithAllocator(mem))
				if err != nil {
					t.Fatal(err)
				}
				sameModelFile(t, got, mf)
				data, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				got, err = DecodeModel(data, WithAllocator(mem))
				if err != nil {
					t.Fatal(err)
				}
				sameModelFile(t, got, mf)
			})
		}
	}
	mem := checkedMem(t)
	mf := testModel(factor.TieNone)
	data, err := EncodeModel(mf, WithAllocator(mem))
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeModel(data, WithAllocator(mem))
	if err != nil {
		t.Fatal(err)
	}
	sameModelFile(t, got, mf)
}

func TestModelManyBatches(t *testing.T) {
	// Batches of 8 rows of m = 4: each block of 30 states spans 4 batches.
	mf := &ModelFile{Model: factor.NewRandom(30, 4, 1, factor.TieNone, 1)}
	sc := modelSchema(mf)
	mem := memory.NewGoAllocator()
	var buf bytes.Buffer
	err := writeIPCFile(&buf, sc, mem, func(write func(arrow.Record) error) error {
		return emitModel(mf, sc, mem, 8*4*8, write)
	})
	if err != nil {
		t.Fatal(err)
	}
	fr, err := ipc.NewFileReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if fr.NumRecords() != 8 {
		t.Errorf("%d record batches, want 2 blocks × 4", fr.NumRecords())
	}
	fr.Close()
	got, err := DecodeModel(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if !got.Model.Equal(mf.Model) {
		t.Error("factors differ")
	}
}

// TestModelSchema reads a model file with the plain Arrow reader, as any
// other language would, and checks the documented schema.
func TestModelSchema(t *testing.T) {
	mf := testModel(factor.TieSharedK)
	data, err := EncodeModel(mf)
	if err != nil {
		t.Fatal(err)
	}
	fr, err := ipc.NewFileReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer fr.Close()
	sc := fr.Schema()
	want := "factor: utf8, action: int32, state: int32, values: fixed_size_list<item: float64, nullable>[5]"
	var names []string
	for _, f := range sc.Fields() {
		names = append(names, f.Name+": "+f.Type.String())
	}
	if got := strings.Join(names, ", "); got != want {
		t.Errorf("schema %s, want %s", got, want)
	}
	md := sc.Metadata()
	for k, v := range map[string]string{
		"emsf.format_version": "1", "emsf.n": "37", "emsf.m": "5", "emsf.u": "3", "emsf.tie": "shared-k",
		"emsf.iteration": "17", "emsf.loglik": "-1234.5678901234567", "emsf.wkl": "0.30000000000000004",
		"emsf.seed": "42", "emsf.fingerprint": "sha256:abc", "emsf.param.note": "a=b, c",
	} {
		if i := md.FindKey(k); i < 0 || md.Values()[i] != v {
			t.Errorf("metadata %s: got index %d, want %q", k, i, v)
		}
	}
	// Rows: D of actions 0, 1, 2, then the shared K (action -1), states ascending.
	var rows []string
	for i := range fr.NumRecords() {
		rec, err := fr.Record(i)
		if err != nil {
			t.Fatal(err)
		}
		f := rec.Column(0).(*array.String)
		a := rec.Column(1).(*array.Int32)
		s := rec.Column(2).(*array.Int32)
		for r := range int(rec.NumRows()) {
			if s.Value(r) == 0 {
				rows = append(rows, f.Value(r)+string(rune('0'+a.Value(r)+1)))
			}
			if r > 0 && s.Value(r) != s.Value(r-1)+1 {
				t.Fatalf("states not ascending at row %d", r)
			}
		}
	}
	if got := strings.Join(rows, " "); got != "D1 D2 D3 K0" {
		t.Errorf("blocks (factor, action+1): %s", got)
	}
}

func TestWriteModelAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "m.arrow")
	good := testModel(factor.TieNone)
	if err := WriteModel(path, good, ""); err != nil {
		t.Fatal(err)
	}
	bad := testModel(factor.TieNone)
	bad.Model.D[0][0] += 0.5 // row 0 no longer sums to 1
	for _, tc := range []struct {
		mf     *ModelFile
		format string
		msg    string
	}{
		{bad, ModelArrow, "not row-stochastic"},
		{bad, ModelParquet, "not row-stochastic"},
		{good, "xlsx", "unknown format"},
		{&ModelFile{}, ModelArrow, "no model"},
	} {
		err := WriteModel(path, tc.mf, tc.format)
		if err == nil || !strings.Contains(err.Error(), tc.msg) || !strings.HasPrefix(err.Error(), "arrowio: write model ") {
			t.Errorf("got %v, want an error with %q", err, tc.msg)
		}
	}
	if err := WriteModel(filepath.Join(dir, "no", "such", "dir.arrow"), good, ""); err == nil {
		t.Error("write into a missing directory: no error")
	}
	// The good model is intact and nothing else was left behind.
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "m.arrow" {
		t.Errorf("directory holds %v", entries)
	}
	got, err := ReadModel(path)
	if err != nil {
		t.Fatal(err)
	}
	sameModelFile(t, got, good)
}

func TestWriteAtomicFailure(t *testing.T) {
	// A write that fails half-way leaves neither the file nor a temporary.
	dir := t.TempDir()
	path := filepath.Join(dir, "x")
	err := writeAtomic(path, func(f *os.File) error {
		f.WriteString("half")
		return os.ErrClosed
	})
	if err == nil {
		t.Fatal("no error")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("left %v", entries)
	}
}

// writeRawModel writes a model file whose rows emit chooses, bypassing the
// writer's checks.
func writeRawModel(t *testing.T, mf *ModelFile, emit func(rb *array.RecordBuilder)) string {
	t.Helper()
	sc := modelSchema(mf)
	var buf bytes.Buffer
	mem := memory.NewGoAllocator()
	err := writeIPCFile(&buf, sc, mem, func(write func(arrow.Record) error) error {
		rb := array.NewRecordBuilder(mem, sc)
		defer rb.Release()
		emit(rb)
		rec := rb.NewRecord()
		defer rec.Release()
		return write(rec)
	})
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, "raw.arrow", buf.Bytes())
}

func appendModelRow(rb *array.RecordBuilder, f string, a, s int32, vals []float64) {
	rb.Field(0).(*array.StringBuilder).Append(f)
	rb.Field(1).(*array.Int32Builder).Append(a)
	rb.Field(2).(*array.Int32Builder).Append(s)
	appendRows(rb.Field(3).(*array.FixedSizeListBuilder), vals, 1)
}

func TestReadModelBad(t *testing.T) {
	mf := &ModelFile{Model: factor.NewRandom(2, 2, 1, factor.TieNone, 1)}
	md := mf.Model
	row := func(f string, b, s int) []float64 {
		if f == "D" {
			return md.D[b][s*2 : s*2+2]
		}
		return md.KT[b][s*2 : s*2+2]
	}
	for _, tc := range []struct {
		name string
		emit func(rb *array.RecordBuilder)
		msg  string
	}{
		{"duplicate", func(rb *array.RecordBuilder) {
			appendModelRow(rb, "D", 0, 0, row("D", 0, 0))
			appendModelRow(rb, "D", 0, 0, row("D", 0, 0))
			appendModelRow(rb, "K", 0, 0, row("K", 0, 0))
			appendModelRow(rb, "K", 0, 1, row("K", 0, 1))
		}, "appears twice"},
		{"missing", func(rb *array.RecordBuilder) {
			appendModelRow(rb, "D", 0, 0, row("D", 0, 0))
			appendModelRow(rb, "K", 0, 0, row("K", 0, 0))
			appendModelRow(rb, "K", 0, 1, row("K", 0, 1))
		}, "3 rows, a model with n=2 u=1 tie=none has 4"},
		{"shared action", func(rb *array.RecordBuilder) {
			appendModelRow(rb, "D", -1, 0, row("D", 0, 0))
			appendModelRow(rb, "D", 0, 1, row("D", 0, 1))
			appendModelRow(rb, "K", 0, 0, row("K", 0, 0))
			appendModelRow(rb, "K", 0, 1, row("K", 0, 1))
		}, "action -1: out of range"},
		{"factor", func(rb *array.RecordBuilder) {
			appendModelRow(rb, "D", 0, 0, row("D", 0, 0))
			appendModelRow(rb, "D", 0, 1, row("D", 0, 1))
			appendModelRow(rb, "X", 0, 0, row("K", 0, 0))
			appendModelRow(rb, "K", 0, 1, row("K", 0, 1))
		}, `factor "X"`},
		{"state", func(rb *array.RecordBuilder) {
			appendModelRow(rb, "D", 0, 0, row("D", 0, 0))
			appendModelRow(rb, "D", 0, 2, row("D", 0, 1))
			appendModelRow(rb, "K", 0, 0, row("K", 0, 0))
			appendModelRow(rb, "K", 0, 1, row("K", 0, 1))
		}, "state 2: out of range"},
		{"not stochastic", func(rb *array.RecordBuilder) {
			appendModelRow(rb, "D", 0, 0, []float64{0.5, 0.6})
			appendModelRow(rb, "D", 0, 1, row("D", 0, 1))
			appendModelRow(rb, "K", 0, 0, row("K", 0, 0))
			appendModelRow(rb, "K", 0, 1, row("K", 0, 1))
		}, "not row-stochastic"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeRawModel(t, mf, tc.emit)
			_, err := ReadModel(path)
			if err == nil || !strings.Contains(err.Error(), tc.msg) || !strings.Contains(err.Error(), "arrowio: read model "+path+": ") {
				t.Errorf("got %v, want an error naming the file with %q", err, tc.msg)
			}
		})
	}
}

func TestReadModelCorrupt(t *testing.T) {
	for _, format := range []string{ModelArrow, ModelParquet} {
		var buf bytes.Buffer
		if err := encodeModel(&buf, &ModelFile{Model: factor.NewRandom(6, 2, 2, factor.TieSharedD, 3)}, format, newConfig(nil)); err != nil {
			t.Fatal(err)
		}
		data := buf.Bytes()
		for _, cut := range truncations(data) {
			if _, err := DecodeModel(cut); err == nil {
				t.Errorf("%s truncated to %d of %d bytes: no error", format, len(cut), len(data))
			}
		}
		for i := 0; i < len(data); i += 1 + len(data)/300 {
			c := bytes.Clone(data)
			c[i] ^= 0x5A
			if _, err := DecodeModel(c); err != nil && !strings.HasPrefix(err.Error(), "arrowio: decode model: ") {
				t.Errorf("%s flip at %d: %v", format, i, err)
			}
		}
	}
	// Metadata that does not match the rows.
	mf := &ModelFile{Model: factor.NewRandom(2, 2, 1, factor.TieNone, 1)}
	mf2 := *mf
	mf2.Model = mf.Model.Clone()
	mf2.Model.Tie = factor.TieSharedK // metadata only: the rows stay those of tie none
	path := writeRawModel(t, &mf2, func(rb *array.RecordBuilder) {
		for s := range 2 {
			appendModelRow(rb, "D", 0, int32(s), mf.Model.D[0][s*2:s*2+2])
		}
		for s := range 2 {
			appendModelRow(rb, "K", 0, int32(s), mf.Model.KT[0][s*2:s*2+2])
		}
	})
	if _, err := ReadModel(path); err == nil || !strings.Contains(err.Error(), "the K factor is shared") {
		t.Errorf("tie mismatch: %v", err)
	}
	if _, err := ReadModel(filepath.Join(t.TempDir(), "none.arrow")); err == nil {
		t.Error("missing model: no error")
	}
	if _, err := DecodeModel([]byte("state,action\n")); err == nil || !strings.Contains(err.Error(), "neither") {
		t.Errorf("csv as a model: %v", err)
	}
}

// TestReadModelParquetNoSchema reads a Parquet model written without the
// stored Arrow schema (as tools other than Arrow's write it): values come
// back as list<float64>, metadata from the key-value metadata.
func TestReadModelParquetNoSchema(t *testing.T) {
	mf := testModel(factor.TieSharedD)
	sc := modelSchema(mf)
	mem := memory.NewGoAllocator()
	var buf bytes.Buffer
	fw, err := pqarrow.NewFileWriter(sc, &buf, parquet.NewWriterProperties(), pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	if err := emitModel(mf, sc, mem, modelBatchBytes, fw.Write); err != nil {
		t.Fatal(err)
	}
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := DecodeModel(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	sameModelFile(t, got, mf)
}

// TestModelSmoothingRoundTrip: a model with a smoothing rule (λ, κ, δ,
// q and counts) reads back with the same rule and predictions, in both
// formats, for m = 1 (streams of one value a row) and m = 4.
func TestModelSmoothingRoundTrip(t *testing.T) {
	for _, m := range []int{1, 4} {
		for _, format := range []string{ModelArrow, ModelParquet} {
			md := factor.NewRandom(9, m, 2, factor.TieSharedK, 3)
			blocks := factor.RandomCounts(9, 2, 2, 3, 4)
			sm, err := factor.NewSmoothing(9, 2, blocks, []float64{0.2, 0.5}, []float64{3, math.Inf(1)}, []float64{0.5, math.Inf(1)})
			if err != nil {
				t.Fatal(err)
			}
			md.Smoothing = sm
			path := filepath.Join(t.TempDir(), "m."+format)
			if err := WriteModel(path, &ModelFile{Model: md}, format); err != nil {
				t.Fatal(err)
			}
			mf, err := ReadModel(path)
			if err != nil {
				t.Fatal(err)
			}
			got := mf.Model
			if got.Smoothing == nil || !got.Equal(md) {
				t.Fatalf("m=%d %s: smoothing or factors lost", m, format)
			}
			for a := range 2 {
				for i := range 9 {
					for j := range 9 {
						if p, q := got.Prob(a, i, j), md.Prob(a, i, j); p != q {
							t.Fatalf("m=%d %s: P̃^%d[%d,%d] = %v, written %v", m, format, a, i, j, p, q)
						}
					}
				}
			}
		}
	}
}
