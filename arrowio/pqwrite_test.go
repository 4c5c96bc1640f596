package arrowio

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/memory"
	"github.com/apache/arrow/go/v15/parquet"
	"github.com/apache/arrow/go/v15/parquet/file"
	"github.com/apache/arrow/go/v15/parquet/pqarrow"
	"github.com/apache/arrow/go/v15/parquet/schema"

	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
)

// oldModelWriter is the Parquet model writer of emsf before pqwrite.go,
// on pqarrow: the reference of the new one.
func oldModelWriter(w io.Writer, sc *arrow.Schema, mem memory.Allocator) (recordWriter, error) {
	props := parquet.NewWriterProperties(parquet.WithAllocator(mem), parquet.WithDictionaryDefault(false))
	aprops := []pqarrow.WriterOption{pqarrow.WithAllocator(mem)}
	if sc.NumFields() == len(modelFields(1, false)) {
		aprops = append(aprops, pqarrow.WithStoreSchema())
	}
	return pqarrow.NewFileWriter(sc, struct{ io.Writer }{w}, props, pqarrow.NewArrowWriterProperties(aprops...))
}

// encodeModelWith writes mf as Parquet with the writer open, in record
// batches of batchBytes of values.
func encodeModelWith(t *testing.T, mf *ModelFile, batchBytes int, open func(io.Writer, *arrow.Schema, memory.Allocator) (recordWriter, error)) []byte {
	t.Helper()
	var buf bytes.Buffer
	sc := modelSchema(mf)
	mem := memory.NewGoAllocator()
	rw, err := open(&buf, sc, mem)
	if err != nil {
		t.Fatal(err)
	}
	if err := emitModel(mf, sc, mem, batchBytes, rw.Write); err != nil {
		t.Fatal(err)
	}
	if err := rw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// sameParquetFile reports how two Parquet files differ as pqarrow reads
// them ("" when they do not): their Parquet schemas, key-value metadata,
// row groups' rows, Arrow schemas (metadata included) and tables, value
// for value.
func sameParquetFile(got, want []byte) string {
	var rdrs [2]*file.Reader
	for k, data := range [][]byte{got, want} {
		rdr, err := file.NewParquetReader(bytes.NewReader(data))
		if err != nil {
			return err.Error()
		}
		rdrs[k] = rdr
	}
	var sch [2]bytes.Buffer
	for k, rdr := range rdrs {
		schema.PrintSchema(rdr.MetaData().Schema.Root(), &sch[k], 2)
	}
	if sch[0].String() != sch[1].String() {
		return fmt.Sprintf("Parquet schemas\n%s\nand\n%s", sch[0].String(), sch[1].String())
	}
	kv0, kv1 := rdrs[0].MetaData().KeyValueMetadata(), rdrs[1].MetaData().KeyValueMetadata()
	if fmt.Sprint(kv0.Keys(), kv0.Values()) != fmt.Sprint(kv1.Keys(), kv1.Values()) {
		return fmt.Sprintf("key-value metadata %v=%v and %v=%v", kv0.Keys(), kv0.Values(), kv1.Keys(), kv1.Values())
	}
	if rdrs[0].NumRowGroups() != rdrs[1].NumRowGroups() {
		return fmt.Sprintf("%d and %d row groups", rdrs[0].NumRowGroups(), rdrs[1].NumRowGroups())
	}
	for g := range rdrs[0].NumRowGroups() {
		if n0, n1 := rdrs[0].RowGroup(g).NumRows(), rdrs[1].RowGroup(g).NumRows(); n0 != n1 {
			return fmt.Sprintf("row group %d: %d and %d rows", g, n0, n1)
		}
	}
	var scs [2]*arrow.Schema
	for k, rdr := range rdrs {
		fr, err := pqarrow.NewFileReader(rdr, pqarrow.ArrowReadProperties{}, memory.NewGoAllocator())
		if err != nil {
			return err.Error()
		}
		if scs[k], err = fr.Schema(); err != nil {
			return err.Error()
		}
	}
	if !scs[0].Equal(scs[1]) || scs[0].String() != scs[1].String() {
		return fmt.Sprintf("Arrow schemas\n%s\nand\n%s", scs[0], scs[1])
	}
	sc0, r0, err0 := pqarrowRecords(got, 1<<20, nil, nil)
	sc1, r1, err1 := pqarrowRecords(want, 1<<20, nil, nil)
	defer releaseRecords(r0)
	defer releaseRecords(r1)
	return sameRecords(sc0, r0, err0, sc1, r1, err1)
}

// randomModelFile returns a random model: n, m, u, the tie, a smoothing
// rule or not, vocabularies or not.
func randomModelFile(t *testing.T, rng *rand.Rand) *ModelFile {
	t.Helper()
	n, m, u := 1+rng.IntN(40), 1+rng.IntN(6), 1+rng.IntN(4)
	tie := []factor.Tie{factor.TieNone, factor.TieSharedK, factor.TieSharedD}[rng.IntN(3)]
	md := factor.NewRandom(n, m, u, tie, rng.Uint64())
	md.Iteration, md.LogLik, md.WKL = rng.IntN(100), -rng.Float64()*1e4, rng.Float64()
	if rng.IntN(3) == 0 {
		rules := make([]factor.RuleParams, u)
		for a := range rules {
			rules[a] = factor.RuleParams{Lambda: rng.Float64(), Kappa: 3, Delta: 0.5}
		}
		sm, err := factor.NewSmoothing(n, u, factor.RandomCounts(n, u, 2, 3, rng.Uint64()), rules)
		if err != nil {
			t.Fatal(err)
		}
		md.Smoothing = sm
	}
	mf := &ModelFile{Model: md, Fingerprint: fmt.Sprintf("sha256:%x", rng.Uint64()), Params: map[string]string{"m": fmt.Sprint(m)}}
	if rng.IntN(2) == 0 {
		mf.States = vocabOf(t, "s", n)
	}
	if rng.IntN(3) == 0 {
		mf.Actions = vocabOf(t, "a", u)
	}
	return mf
}

// TestParquetWriterMatchesPqarrow writes random models (with and without
// vocabularies and smoothing rules, of many shapes, in record batches of
// many sizes) with the new Parquet writer and with the pqarrow writer it
// replaced: pqarrow reads the two files as the same Parquet schema,
// key-value metadata (the stored Arrow schema included), row groups,
// Arrow schema and values; and the model readers read both as the model.
func TestParquetWriterMatchesPqarrow(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	models := 60
	if testing.Short() {
		models = 15
	}
	for i := range models {
		mf := randomModelFile(t, rng)
		batchBytes := []int{64, 1000, modelBatchBytes}[rng.IntN(3)]
		got := encodeModelWith(t, mf, batchBytes, func(w io.Writer, sc *arrow.Schema, mem memory.Allocator) (recordWriter, error) {
			return newModelWriter(w, sc, mem, ModelParquet)
		})
		want := encodeModelWith(t, mf, batchBytes, oldModelWriter)
		what := fmt.Sprintf("model %d (n=%d m=%d u=%d tie %s, smoothing %v, vocabularies %v %v, batches of %d bytes)", i,
			mf.Model.N, mf.Model.M, mf.Model.U, mf.Model.Tie, mf.Model.Smoothing != nil, mf.States != nil, mf.Actions != nil, batchBytes)
		if diff := sameParquetFile(got, want); diff != "" {
			t.Fatalf("%s: the new writer's file and pqarrow's differ: %s", what, diff)
		}
		for k, data := range [][]byte{got, want} {
			back, err := DecodeModel(data, WithAllocator(checkedMem(t)))
			if err != nil {
				t.Fatalf("%s, file %d: %v", what, k, err)
			}
			sameModelFile(t, back, mf)
			sameVocab(t, "states", back.States, mf.States)
			sameVocab(t, "actions", back.Actions, mf.Actions)
		}
	}
}

// TestParquetOldModelsRead reads model files written by the pqarrow
// writer (fixed-size lists with the stored Arrow schema; variable-size
// lists, with null rows, for a model with a vocabulary) through every
// Parquet model reader: DecodeModel, the streaming split into a dataset
// (scanModelFile) and the dataset read back.
func TestParquetOldModelsRead(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	dir := t.TempDir()
	for i := range 12 {
		mf := randomModelFile(t, rng)
		old := encodeModelWith(t, mf, []int{64, modelBatchBytes}[rng.IntN(2)], oldModelWriter)
		back, err := DecodeModel(old, WithAllocator(checkedMem(t)))
		if err != nil {
			t.Fatalf("model %d: %v", i, err)
		}
		sameModelFile(t, back, mf)
		sameVocab(t, "states", back.States, mf.States)
		path := filepath.Join(dir, fmt.Sprintf("m%d.parquet", i))
		if err := os.WriteFile(path, old, 0o644); err != nil {
			t.Fatal(err)
		}
		ds := filepath.Join(dir, fmt.Sprintf("ds%d", i))
		if _, err := SplitModel(context.Background(), path, DirParts{Dir: ds}, ModelParquet, 1+rng.IntN(10), WithAllocator(checkedMem(t))); err != nil {
			t.Fatalf("model %d: split: %v", i, err)
		}
		back, err = ReadModelAny(context.Background(), ds, WithAllocator(checkedMem(t)))
		if err != nil {
			t.Fatalf("model %d: read the dataset: %v", i, err)
		}
		sameModelFile(t, back, mf)
		sameVocab(t, "states", back.States, mf.States)
		sameVocab(t, "actions", back.Actions, mf.Actions)
	}
}

// oldTransitionsParquet writes transitions as TransitionWriter did with
// pqarrow: one buffered row group, records of transitionBatchRows rows.
func oldTransitionsParquet(t *testing.T, rows [][6]int64, ids [2]*shard.Vocab) []byte {
	t.Helper()
	fields := append([]arrow.Field(nil), transitionFields...)
	for k, v := range []*shard.Vocab{ids[0], ids[1], ids[0]} {
		if v != nil {
			fields[k].Type = arrow.BinaryTypes.String
		}
	}
	sc := arrow.NewSchema(fields, nil)
	mem := memory.NewGoAllocator()
	var buf bytes.Buffer
	fw, err := pqarrow.NewFileWriter(sc, &buf, parquet.NewWriterProperties(parquet.WithAllocator(mem)), pqarrow.NewArrowWriterProperties(pqarrow.WithAllocator(mem)))
	if err != nil {
		t.Fatal(err)
	}
	b := array.NewRecordBuilder(mem, sc)
	defer b.Release()
	flush := func() {
		rec := b.NewRecord()
		defer rec.Release()
		if err := fw.WriteBuffered(rec); err != nil {
			t.Fatal(err)
		}
	}
	for i, r := range rows {
		for k := range 3 {
			if v := ids[k%2]; v != nil {
				b.Field(k).(*array.StringBuilder).BinaryBuilder.Append(v.ID(int(r[k])))
			} else {
				b.Field(k).(*array.Int32Builder).Append(int32(r[k]))
			}
		}
		b.Field(3).(*array.Float64Builder).Append(float64(r[3]) / 2)
		b.Field(4).(*array.Int64Builder).Append(r[4])
		b.Field(5).(*array.Int64Builder).Append(r[5])
		if (i+1)%transitionBatchRows == 0 {
			flush()
		}
	}
	if len(rows)%transitionBatchRows != 0 {
		flush()
	}
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestParquetTransitionWriterMatchesPqarrow writes random transitions
// (integers or ids; none, a few, more than a record batch of rows) with
// TransitionWriter and as it did with pqarrow: pqarrow reads the files
// as the same.
func TestParquetTransitionWriterMatchesPqarrow(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	dir := t.TempDir()
	states, actions := vocabOf(t, "s", 50), vocabOf(t, "a", 4)
	for i, n := range []int{0, 1, 1000, transitionBatchRows + 17} {
		var ids [2]*shard.Vocab
		if i%2 == 1 {
			ids = [2]*shard.Vocab{states, actions}
		}
		rows := make([][6]int64, n)
		for r := range rows {
			rows[r] = [6]int64{rng.Int64N(50), rng.Int64N(4), rng.Int64N(50), 1 + rng.Int64N(5), rng.Int64N(9), int64(r)}
		}
		path := filepath.Join(dir, fmt.Sprintf("t%d.parquet", i))
		w, err := NewTransitionWriterIDs(path, "", ids[0], ids[1])
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if err := w.Write(int(r[0]), int(r[1]), int(r[2]), float64(r[3])/2, r[4], r[5]); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if diff := sameParquetFile(data, oldTransitionsParquet(t, rows, ids)); diff != "" {
			t.Fatalf("%d rows, ids %v: the new writer's file and pqarrow's differ: %s", n, ids[0] != nil, diff)
		}
	}
}

// TestPQWriterRefusesOtherLists: a list column other than a nullable list
// of nullable elements is an error, not a file with wrong levels.
func TestPQWriterRefusesOtherLists(t *testing.T) {
	item := arrow.Field{Name: "item", Type: arrow.PrimitiveTypes.Float64, Nullable: false}
	sc := arrow.NewSchema([]arrow.Field{{Name: "values", Type: arrow.ListOfField(item), Nullable: false}}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	lb := b.Field(0).(*array.ListBuilder)
	lb.Append(true)
	lb.ValueBuilder().(*array.Float64Builder).AppendValues([]float64{0.5, 0.5}, nil)
	rec := b.NewRecord()
	defer rec.Release()
	var buf bytes.Buffer
	w, err := newPQWriter(&buf, sc, parquet.NewWriterProperties(), false)
	if err != nil {
		t.Fatal(err)
	}
	err = w.Write(rec)
	if err == nil {
		err = w.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "nullable list of nullable elements") {
		t.Fatalf("a required list of required doubles: %v, want the refusal", err)
	}
}
