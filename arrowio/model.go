package arrowio

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/ipc"
	"github.com/apache/arrow/go/v15/arrow/memory"
	"github.com/apache/arrow/go/v15/parquet"

	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
)

// Model file formats, the format argument of WriteModel.
const (
	ModelArrow   = "arrow"   // Arrow IPC file (the default)
	ModelParquet = "parquet" // Parquet
)

const kindModel = "model"

// Model schema metadata keys.
const (
	keyN           = "emsf.n"
	keyU           = "emsf.u"
	keyTie         = "emsf.tie"
	keyWKL         = "emsf.wkl"
	keySeed        = "emsf.seed"
	keyFingerprint = "emsf.fingerprint"
	keyStatus      = "emsf.status"
	keyParamPrefix = "emsf.param."
	keyReduceOrder = "emsf.reduce_order"
	keyGroupNNZ    = "emsf.group_nnz"
	// The model's smoothing rule (factor.Smoothing), when it has one.
	keySmooth       = "emsf.smooth"
	keySmoothLambda = "emsf.smooth.lambda"
	keySmoothKappa  = "emsf.smooth.kappa"
	keySmoothDelta  = "emsf.smooth.delta"
	keySmoothNNZ    = "emsf.smooth.nnz"
	// interpolation-v2 adds the rule's μ, discount d and ρ
	// (factor.Smoothing); a rule without them is written as v1.
	keySmoothMu       = "emsf.smooth.mu"
	keySmoothDiscount = "emsf.smooth.discount"
	keySmoothRho      = "emsf.smooth.rho"
	smoothRule        = "interpolation-v1"
	smoothRuleV2      = "interpolation-v2"
	// The model's vocabularies of user ids, when it has them.
	keyVocab    = "emsf.vocab"
	keyVocabSum = "emsf.vocab_checksum." // + "states" or "actions"
	// modelVersionVocab is the emsf.format_version of a model file with a
	// vocabulary (a file without one stays version 1, bit for bit).
	modelVersionVocab = "2"
	// modelBatchBytes bounds the values of one record batch.
	modelBatchBytes = 4 << 20
)

// ModelFile is a model with what is recorded beside it: a model file is
// the unit of warm start, evaluation and publication.
type ModelFile struct {
	Model *factor.Model
	// Fingerprint identifies the training data.
	Fingerprint string
	// Params are the fit's parameters (free-form key/value).
	Params map[string]string
	// ReduceOrder names the order in which the fit summed its statistics
	// (factor.ReduceOrder) and GroupNNZ its reduction group size
	// (factor.ReducePlan): with the data, the shard size and the seed they
	// fix the model's bits. Empty and 0 when the writer did not say
	// (incremental fits, generated models, files of older versions).
	ReduceOrder string
	GroupNNZ    int
	// Status says how the fit that made the model ended: "converged",
	// "iteration limit", "time limit" (both: stopped before reaching the
	// tolerance) or "interrupted" (by a signal; the model is that of the
	// last completed iteration, emsf.iteration). An incremental fit, with
	// no convergence test, records "passes done". Empty when unknown (a
	// file written before the field existed, or no fit); written only
	// when set.
	Status string
	// States and Actions, when not nil, are the vocabularies of user ids:
	// state i of the model is States.ID(i), action a is Actions.ID(a)
	// (lengths n and u). Nil: the data named states and actions by
	// integer indices.
	States, Actions *shard.Vocab
	// vocabSums are the checksums of the vocabularies (by name) of a
	// header read from metadata whose ids are elsewhere (the parts of a
	// model dataset: headerFromMeta).
	vocabSums map[string]string
}

// vocabs returns the vocabularies the file holds, by name ("states",
// "actions"), in file order.
func (mf *ModelFile) vocabs() (names []string, vs []*shard.Vocab) {
	if mf.States != nil {
		names, vs = append(names, vocabStates), append(vs, mf.States)
	}
	if mf.Actions != nil {
		names, vs = append(names, vocabActions), append(vs, mf.Actions)
	}
	return names, vs
}

// Vocabulary names (emsf.vocab) and their rows' factor.
const (
	vocabStates  = "states"
	vocabActions = "actions"
	factorStates = "S"
	factorAction = "A"
)

// modelFields is the model table. The fields are declared nullable (as
// pyarrow does by default; they never hold nulls): the Parquet reader of
// arrow-go v15 reads a non-nullable fixed-size list back as all nulls.
// A model with a vocabulary has a fifth column, id (model parts never do).
func modelFields(m int, vocab bool) []arrow.Field {
	fs := []arrow.Field{
		{Name: "factor", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "action", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
		{Name: "state", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
		{Name: "values", Type: arrow.FixedSizeListOf(int32(m), arrow.PrimitiveTypes.Float64), Nullable: true},
	}
	if vocab {
		fs = append(fs, arrow.Field{Name: "id", Type: arrow.BinaryTypes.String, Nullable: true})
	}
	return fs
}

// modelSchema returns the schema of a model file, metadata included.
func modelSchema(mf *ModelFile) *arrow.Schema { return modelSchemaOf(mf, ShapeOf(mf.Model)) }

// modelSchemaOf is modelSchema for a model of shape s, which gives the
// smoothing rule's count of counts per action: mf may be a header (no
// factors; a rule's λ, κ, δ (and μ, d, ρ) only, see headerFromMeta).
func modelSchemaOf(mf *ModelFile, s ModelShape) *arrow.Schema {
	md := mf.Model
	var mw metaWriter
	names, vs := mf.vocabs()
	ids := len(vs) > 0 || len(s.IDs) > 0
	version := FormatVersion
	if ids {
		version = modelVersionVocab
	}
	mw.modelShape(version, kindModel, s)
	mw.int(keyIteration, md.Iteration)
	mw.set(keyLogLik, fmtFloat(md.LogLik))
	mw.set(keyWKL, fmtFloat(md.WKL))
	mw.set(keySeed, strconv.FormatUint(md.Seed, 10))
	mw.set(keyFingerprint, mf.Fingerprint)
	if mf.ReduceOrder != "" {
		mw.set(keyReduceOrder, mf.ReduceOrder)
		mw.int(keyGroupNNZ, mf.GroupNNZ)
	}
	if mf.Status != "" {
		mw.set(keyStatus, mf.Status)
	}
	if s.SmoothNNZ != nil {
		sm := md.Smoothing
		if sm.Mu != nil || sm.Discount != nil || sm.Rho != nil {
			mw.set(keySmooth, smoothRuleV2)
			mw.set(keySmoothMu, floatList(orZeros(sm.Mu, md.U)))
			mw.set(keySmoothDiscount, floatList(orZeros(sm.Discount, md.U)))
			mw.set(keySmoothRho, floatList(orZeros(sm.Rho, md.U)))
		} else {
			mw.set(keySmooth, smoothRule)
		}
		mw.set(keySmoothLambda, floatList(sm.Lambda))
		mw.set(keySmoothKappa, floatList(sm.Kappa))
		mw.set(keySmoothDelta, floatList(sm.Delta))
		mw.set(keySmoothNNZ, intList(s.SmoothNNZ))
	}
	keys := make([]string, 0, len(mf.Params))
	for k := range mf.Params {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		mw.set(keyParamPrefix+k, mf.Params[k])
	}
	if len(vs) == 0 && len(s.IDs) > 0 {
		// A header whose ids are in parts: the checksums it was read with.
		mw.set(keyVocab, strings.Join(s.IDs, ","))
		for _, name := range s.IDs {
			mw.set(keyVocabSum+name, mf.vocabSums[name])
		}
	} else {
		mw.vocab(names, vs)
	}
	return arrow.NewSchema(modelFields(md.M, ids), mw.metadata())
}

// emitModel produces the record batches of a model: its blocks in the
// order of ShapeOf(md).blocks() (D, K, then the smoothing rule's
// streams), states ascending, at most batchBytes of values per batch (but
// at least one row); see modelBatcher. Then the vocabularies' rows
// (states, then actions).
func emitModel(mf *ModelFile, sc *arrow.Schema, mem memory.Allocator, batchBytes int, write func(arrow.Record) error) error {
	md := mf.Model
	b := newModelBatcher(sc, mem, modelBatchRows(md.N, md.M, batchBytes), write)
	defer b.release()
	bs := ShapeOf(md).blocks()
	for i, vals := range blockValues(md, bs) {
		b.start(bs[i].factor, bs[i].action, 0)
		if err := b.addBlock(vals); err != nil {
			return err
		}
	}
	return b.vocabs(mf)
}

// blockValues returns the rows of md's blocks bs (ShapeOf(md).blocks()),
// m values a row: the D and K^T blocks as md holds them, and the smoothing
// rule's streams, each action's a stream of float64 values cut into rows
// of m: q^a (n values), then its counts as (state, next state, count)
// triples, the last row of a stream padded with zeros.
func blockValues(md *factor.Model, bs []modelBlock) [][]float64 {
	sm := md.Smoothing
	stream := func(rows int, vals []float64) []float64 {
		padded := make([]float64, rows*md.M)
		copy(padded, vals)
		return padded
	}
	out := make([][]float64, len(bs))
	// The triples go straight into their padded streams, made at their
	// size: appending them (and copying them into the stream) touched
	// about three times the memory, at the cost of a page fault per
	// fresh 4 KiB (the counts of a 400 000-row file are a few MB).
	var triples [][]float64 // each action's stream of triples
	for k, blk := range bs {
		switch blk.factor {
		case "D":
			out[k] = md.D[blk.block]
		case "K":
			out[k] = md.KT[blk.block]
		case "Q":
			out[k] = stream(blk.rows, sm.Q[blk.block])
		case "C":
			if triples == nil {
				triples = make([][]float64, md.U)
			}
			out[k] = make([]float64, blk.rows*md.M)
			triples[blk.block] = out[k][:0]
		}
	}
	if triples != nil && sm.Counts != nil {
		sm.Counts.Entries(func(a, i, j int, c float64) {
			triples[a] = append(triples[a], float64(i), float64(j), c)
		})
		for k, blk := range bs {
			if blk.factor == "C" && len(triples[blk.block]) > len(out[k]) {
				// The stream's rows come from the same counts (smoothNNZ):
				// appending past them would leave the stream empty.
				panic(fmt.Sprintf("arrowio: %d values of counts for action %d, room for %d", len(triples[blk.block]), blk.block, len(out[k])))
			}
		}
	}
	return out
}

// smoothNNZ returns the number of stored counts per action.
func smoothNNZ(sm *factor.Smoothing, u int) []int {
	nnz := make([]int, u)
	if sm.Counts != nil {
		sm.Counts.Entries(func(a, _, _ int, _ float64) { nnz[a]++ })
	}
	return nnz
}

// orZeros returns xs, or u zeros for a nil xs.
func orZeros(xs []float64, u int) []float64 {
	if xs == nil {
		return make([]float64, u)
	}
	return xs
}

func floatList(xs []float64) string {
	parts := make([]string, len(xs))
	for k, x := range xs {
		parts[k] = fmtFloat(x)
	}
	return strings.Join(parts, ",")
}

func intList(xs []int) string {
	parts := make([]string, len(xs))
	for k, x := range xs {
		parts[k] = strconv.Itoa(x)
	}
	return strings.Join(parts, ",")
}

// streamRows is the number of rows of m values a stream of k values
// takes.
func streamRows(k, m int) int { return (k + m - 1) / m }

func checkWritable(mf *ModelFile) error {
	if mf == nil || mf.Model == nil {
		return fmt.Errorf("no model")
	}
	if mf.Model.N > math.MaxInt32 || mf.Model.M > math.MaxInt32 {
		return fmt.Errorf("model shape n=%d m=%d does not fit int32", mf.Model.N, mf.Model.M)
	}
	if mf.States != nil && mf.States.Len() != mf.Model.N {
		return fmt.Errorf("the state vocabulary has %d ids, the model n=%d states", mf.States.Len(), mf.Model.N)
	}
	if mf.Actions != nil && mf.Actions.Len() != mf.Model.U {
		return fmt.Errorf("the action vocabulary has %d ids, the model u=%d actions", mf.Actions.Len(), mf.Model.U)
	}
	return mf.Model.Validate()
}

// EncodeModel returns mf as an Arrow IPC file (see the package doc for the
// schema).
func EncodeModel(mf *ModelFile, opts ...Option) ([]byte, error) {
	var buf bytes.Buffer
	if md := mf.Model; md != nil {
		// Room for the values and their row keys up front: growing a
		// buffer of megabytes doubles it again and again.
		buf.Grow((len(md.D)+len(md.KT))*md.N*(md.M*8+16) + 64<<10)
	}
	if err := encodeModel(&buf, mf, ModelArrow, newConfig(opts)); err != nil {
		return nil, fmt.Errorf("arrowio: encode model: %w", err)
	}
	return buf.Bytes(), nil
}

func encodeModel(w io.Writer, mf *ModelFile, format string, cfg *config) error {
	if err := checkWritable(mf); err != nil {
		return err
	}
	sc := modelSchema(mf)
	rw, err := newModelWriter(w, sc, cfg.mem, format)
	if err != nil {
		return err
	}
	if err := emitModel(mf, sc, cfg.mem, cfg.modelBatchBytes(), rw.Write); err != nil {
		rw.Close()
		return err
	}
	return rw.Close()
}

// recordWriter is an open Arrow IPC file or Parquet writer.
type recordWriter interface {
	Write(arrow.Record) error
	Close() error
}

// newModelWriter opens a model file writer on w: an Arrow IPC file for
// ModelArrow (also ""), Parquet for ModelParquet, one row group per record,
// with the schema's metadata in the file's key-value metadata and the
// Arrow schema stored there too, except for a model with a vocabulary:
// its vocabulary rows have null values, which arrow-go v15 cannot read
// back as a fixed-size list ("expected all lists to be of size=m"), so
// its values read as list<double>.
func newModelWriter(w io.Writer, sc *arrow.Schema, mem memory.Allocator, format string) (recordWriter, error) {
	switch format {
	case ModelArrow, "":
		return ipc.NewFileWriter(&posWriter{w: w}, ipc.WithSchema(sc), ipc.WithAllocator(mem))
	case ModelParquet:
		props := parquet.NewWriterProperties(parquet.WithAllocator(mem), parquet.WithDictionaryDefault(false))
		// The caller owns w: the writer never closes it.
		return newPQWriter(w, sc, props, sc.NumFields() == len(modelFields(1, false)))
	}
	return nil, fmt.Errorf("unknown model format %q (want arrow or parquet)", format)
}

// WriteModel writes mf to path atomically (a temporary file in the same
// directory, fsync, rename; on any error the temporary file is removed and
// path is untouched). format is ModelArrow (also "") or ModelParquet. The
// model must pass Model.Validate.
func WriteModel(path string, mf *ModelFile, format string, opts ...Option) error {
	if format != "" && format != ModelArrow && format != ModelParquet {
		return fmt.Errorf("arrowio: write model %s: unknown format %q (want arrow or parquet)", path, format)
	}
	if err := checkWritable(mf); err != nil {
		return fmt.Errorf("arrowio: write model %s: %w", path, err)
	}
	cfg := newConfig(opts)
	return writeAtomic(path, func(f *os.File) error {
		w := bufio.NewWriterSize(f, 1<<20)
		if err := encodeModel(w, mf, format, cfg); err != nil {
			return err
		}
		return w.Flush()
	})
}

// DecodeModel reads a model from bytes (Arrow IPC file or Parquet,
// detected by the magic bytes).
func DecodeModel(data []byte, opts ...Option) (*ModelFile, error) {
	mf, err := decodeModel(bytes.NewReader(data), int64(len(data)), newConfig(opts).mem)
	if err != nil {
		return nil, fmt.Errorf("arrowio: decode model: %w", err)
	}
	return mf, nil
}

// ReadModel reads a model file written by WriteModel, in either format
// (detected by the magic bytes). It checks the metadata, the shape, that
// every (factor, block, state) row is there exactly once, and
// Model.Validate; errors name the file.
func ReadModel(path string, opts ...Option) (*ModelFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("arrowio: read model: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("arrowio: read model %s: %w", path, err)
	}
	mf, err := decodeModel(f, st.Size(), newConfig(opts).mem)
	if err != nil {
		return nil, fmt.Errorf("arrowio: read model %s: %w", path, err)
	}
	return mf, nil
}

func decodeModel(ra parquet.ReaderAtSeeker, size int64, mem memory.Allocator) (*ModelFile, error) {
	var head [8]byte
	n, _ := ra.ReadAt(head[:], 0)
	var mr modelReader
	defer mr.release()
	switch formatFromMagic(head[:n]) {
	case FormatArrowFile:
		if err := readIPC(ipcSource{ra: ra, size: size, file: true}, mem, mr.schema, guard(mr.record)); err != nil {
			return nil, err
		}
	case FormatParquet:
		if err := mr.parquet(ra, size, mem); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("neither an Arrow IPC file nor Parquet")
	}
	return mr.model()
}

// modelReader collects the record batches of a model file and builds the
// model once it has seen all rows, so nothing is allocated on the word of
// the metadata alone.
type modelReader struct {
	mf      ModelFile
	n, m, u int
	tie     factor.Tie
	want    int64 // rows expected
	rows    int64
	recs    []arrow.Record
	// The smoothing rule's metadata, when the file has one.
	smooth               bool
	lambda, kappa, delta []float64
	// mu, discount and rho: nil for an interpolation-v1 rule.
	mu, discount, rho []float64
	nnz               []int
	streams           map[string][][]float64
	got               []map[int]bool
	gotIdx            map[string]int
	// vocab: the file has an id column; sums are the vocabularies'
	// checksums by name (emsf.vocab_checksum.*).
	vocab bool
	sums  map[string]string
}

func (r *modelReader) release() {
	for _, rec := range r.recs {
		rec.Release()
	}
	r.recs = nil
}

func (r *modelReader) schema(sc *arrow.Schema) error {
	if err := r.meta(sc.Metadata()); err != nil {
		return err
	}
	return checkFields(sc, modelFields(r.m, r.vocab)...)
}

// meta reads and checks a model's metadata (the schema metadata of a
// model file, the metadata of a dataset's manifest).
func (r *modelReader) meta(kv arrow.Metadata) error {
	mr := metaReader{md: kv}
	version := mr.headerOf(kindModel, FormatVersion, modelVersionVocab)
	r.n, r.m, r.u = mr.int(keyN), mr.int(keyM), mr.int(keyU)
	if version == modelVersionVocab && mr.err == nil {
		r.vocab = true
		var err error
		if r.sums, err = readVocabMeta(&mr); err != nil {
			return err
		}
	}
	tie := mr.str(keyTie)
	md := &factor.Model{Iteration: mr.int(keyIteration), LogLik: mr.float(keyLogLik),
		WKL: mr.float(keyWKL), Seed: mr.uint64(keySeed)}
	r.mf.Fingerprint = mr.str(keyFingerprint)
	if kv.FindKey(keyReduceOrder) >= 0 {
		r.mf.ReduceOrder, r.mf.GroupNNZ = mr.str(keyReduceOrder), mr.int(keyGroupNNZ)
	}
	if i := kv.FindKey(keyStatus); i >= 0 {
		r.mf.Status = kv.Values()[i]
	}
	if mr.err != nil {
		return mr.err
	}
	var err error
	if r.tie, err = factor.ParseTie(tie); err != nil || tie == "" {
		return fmt.Errorf("schema metadata %s = %q is not a tie mode", keyTie, tie)
	}
	if r.n < 1 || r.m < 1 || r.u < 1 || r.n > math.MaxInt32 || r.m > math.MaxInt32 || r.u > math.MaxInt32 {
		return fmt.Errorf("bad model shape n=%d m=%d u=%d", r.n, r.m, r.u)
	}
	r.want = int64(factor.NumD(r.u, r.tie)+factor.NumK(r.u, r.tie)) * int64(r.n)
	if _, ok := r.sums[vocabStates]; ok {
		r.want += int64(r.n)
	}
	if _, ok := r.sums[vocabActions]; ok {
		r.want += int64(r.u)
	}
	if err := r.smoothMeta(kv); err != nil {
		return err
	}
	r.mf.Model = md
	for i, k := range kv.Keys() {
		if p, ok := strings.CutPrefix(k, keyParamPrefix); ok {
			if r.mf.Params == nil {
				r.mf.Params = map[string]string{}
			}
			r.mf.Params[p] = kv.Values()[i]
		}
	}
	return nil
}

func (r *modelReader) record(rec arrow.Record) error {
	if !r.vocab { // with a vocabulary: vocabRows checks where nulls are
		if err := noNulls(rec); err != nil {
			return err
		}
	}
	r.rows += rec.NumRows()
	if r.rows > r.want {
		return fmt.Errorf("more than the %d rows of a model with n=%d u=%d tie=%s", r.want, r.n, r.u, r.tie)
	}
	rec.Retain()
	r.recs = append(r.recs, rec)
	return nil
}

func (r *modelReader) parquet(ra parquet.ReaderAtSeeker, size int64, mem memory.Allocator) error {
	f, err := openPQ(ra, size, capAllocator(mem, size), 1<<16)
	if err != nil {
		return err
	}
	sc, err := f.schemaOf(nil)
	if err != nil {
		return err
	}
	// The schema metadata is in the file's key-value metadata.
	if err := r.schema(arrow.NewSchema(sc.Fields(), &f.md)); err != nil {
		return err
	}
	rr, err := f.records(nil, nil)
	if err != nil {
		return err
	}
	defer rr.release()
	for {
		rec, err := rr.next()
		if err != nil {
			return err
		}
		if rec == nil {
			return nil
		}
		if err := guard(r.record)(rec); err != nil {
			return err
		}
	}
}

// vocabRows returns the values of a record of a model with a vocabulary
// (row i's at out[i*m:(i+1)*m], zeros on vocabulary rows) and its id
// column, checking that values are null exactly where id is not.
func vocabRows(rec arrow.Record, m int) ([]float64, *array.String, error) {
	for c := range 3 {
		if n := rec.Column(c).NullN(); n > 0 {
			return nil, nil, fmt.Errorf("column %s has %d nulls", rec.ColumnName(c), n)
		}
	}
	idCol, ok := rec.Column(4).(*array.String)
	if !ok {
		return nil, nil, fmt.Errorf("id column has type %s", rec.Column(4).DataType())
	}
	l, ok := rec.Column(3).(interface {
		arrow.Array
		ListValues() arrow.Array
		ValueOffsets(int) (int64, int64)
	})
	if !ok {
		return nil, nil, fmt.Errorf("values column of type %s is not a list", rec.Column(3).DataType())
	}
	f, ok := l.ListValues().(*array.Float64)
	if !ok {
		return nil, nil, fmt.Errorf("list values of type %s are not float64", l.ListValues().DataType())
	}
	vals := f.Float64Values()
	names := rec.Column(0).(*array.String)
	out := make([]float64, int(rec.NumRows())*m)
	for i := range int(rec.NumRows()) {
		vocab := names.Value(i) == factorStates || names.Value(i) == factorAction
		if l.IsNull(i) != vocab || idCol.IsNull(i) == vocab {
			return nil, nil, fmt.Errorf("row %d (factor %s): values null %v, id null %v", i, names.Value(i), l.IsNull(i), idCol.IsNull(i))
		}
		if vocab {
			continue
		}
		start, end := l.ValueOffsets(i)
		if end-start != int64(m) || start < 0 || end > int64(len(vals)) {
			return nil, nil, fmt.Errorf("list row %d holds values [%d, %d), want %d values", i, start, end, m)
		}
		for k := start; k < end && f.NullN() > 0; k++ {
			if f.IsNull(int(k)) {
				return nil, nil, fmt.Errorf("column values has null list values")
			}
		}
		copy(out[i*m:], vals[start:end])
	}
	return out, idCol, nil
}

// model builds the model from the collected records and validates it.
func (r *modelReader) model() (_ *ModelFile, err error) {
	defer catchDecode(&err)
	if r.rows != r.want {
		return nil, fmt.Errorf("%d rows, a model with n=%d u=%d tie=%s has %d", r.rows, r.n, r.u, r.tie, r.want)
	}
	md := factor.NewModel(r.n, r.m, r.u, r.tie)
	md.Iteration, md.LogLik, md.WKL, md.Seed = r.mf.Model.Iteration, r.mf.Model.LogLik, r.mf.Model.WKL, r.mf.Model.Seed
	seen := map[string][][]bool{"D": make([][]bool, len(md.D)), "K": make([][]bool, len(md.KT))}
	blocks := map[string][][]float64{"D": md.D, "K": md.KT}
	shared := map[string]bool{"D": r.tie == factor.TieSharedD, "K": r.tie == factor.TieSharedK}
	m := r.m
	ids := map[string][]string{}
	if _, ok := r.sums[vocabStates]; ok {
		ids[factorStates] = make([]string, r.n)
	}
	if _, ok := r.sums[vocabActions]; ok {
		ids[factorAction] = make([]string, r.u)
	}
	for _, rec := range r.recs {
		names, ok := rec.Column(0).(*array.String)
		if !ok {
			return nil, fmt.Errorf("factor column has type %s", rec.Column(0).DataType())
		}
		actions := rec.Column(1).(*array.Int32).Int32Values()
		states := rec.Column(2).(*array.Int32).Int32Values()
		var vals []float64
		var idCol *array.String
		if r.vocab {
			if vals, idCol, err = vocabRows(rec, m); err != nil {
				return nil, err
			}
		} else if vals, err = listRows(rec.Column(3), m); err != nil {
			return nil, err
		}
		for i := range int(rec.NumRows()) {
			f, a, s := names.Value(i), int(actions[i]), int(states[i])
			if vs, ok := ids[f]; ok {
				if a != -1 || s < 0 || s >= len(vs) {
					return nil, fmt.Errorf("vocabulary row %s action %d index %d: want action -1 and an index in [0, %d)", f, a, s, len(vs))
				}
				if vs[s] != "" {
					return nil, fmt.Errorf("vocabulary row %s index %d appears twice", f, s)
				}
				if vs[s] = idCol.Value(i); vs[s] == "" {
					return nil, fmt.Errorf("vocabulary row %s index %d has an empty id", f, s)
				}
				continue
			}
			if f == "Q" || f == "C" {
				if err := r.streamRow(f, a, s, vals[i*m:(i+1)*m]); err != nil {
					return nil, err
				}
				continue
			}
			bs, ok := blocks[f]
			if !ok {
				return nil, fmt.Errorf("row with factor %q (want D or K)", f)
			}
			b := a
			if shared[f] {
				if a != -1 {
					return nil, fmt.Errorf("row %s action %d: the %s factor is shared (tie %s), its action must be -1", f, a, f, r.tie)
				}
				b = 0
			} else if a < 0 || a >= r.u {
				return nil, fmt.Errorf("row %s action %d: out of range [0, %d)", f, a, r.u)
			}
			if s < 0 || s >= r.n {
				return nil, fmt.Errorf("row %s action %d state %d: out of range [0, %d)", f, a, s, r.n)
			}
			if seen[f][b] == nil {
				seen[f][b] = make([]bool, r.n)
			}
			if seen[f][b][s] {
				return nil, fmt.Errorf("row %s action %d state %d appears twice", f, a, s)
			}
			seen[f][b][s] = true
			copy(bs[b][s*m:(s+1)*m], vals[i*m:(i+1)*m])
		}
	}
	// rows == want and no duplicates: every row is there.
	if err := md.Validate(); err != nil {
		return nil, err
	}
	if r.smooth {
		if md.Smoothing, err = r.smoothing(); err != nil {
			return nil, err
		}
	}
	for f, name := range map[string]string{factorStates: vocabStates, factorAction: vocabActions} {
		vs, ok := ids[f]
		if !ok {
			continue
		}
		v, err := checkedVocab(name, vs, r.sums[name])
		if err != nil {
			return nil, err
		}
		if f == factorStates {
			r.mf.States = v
		} else {
			r.mf.Actions = v
		}
	}
	r.mf.Model = md
	out := r.mf
	return &out, nil
}

// smoothMeta reads the smoothing rule's metadata and adds its rows to
// the rows expected.
func (r *modelReader) smoothMeta(md arrow.Metadata) error {
	i := md.FindKey(keySmooth)
	if i < 0 {
		return nil
	}
	v2 := false
	switch v := md.Values()[i]; v {
	case smoothRule:
	case smoothRuleV2:
		v2 = true
	default:
		return fmt.Errorf("schema metadata %s = %q: unknown smoothing rule (want %s or %s)", keySmooth, v, smoothRule, smoothRuleV2)
	}
	r.smooth = true
	get := func(key string) ([]string, error) {
		k := md.FindKey(key)
		if k < 0 {
			return nil, fmt.Errorf("schema metadata lacks %s (the file has %s)", key, keySmooth)
		}
		parts := strings.Split(md.Values()[k], ",")
		if len(parts) != r.u {
			return nil, fmt.Errorf("schema metadata %s holds %d values, want one per action (%d)", key, len(parts), r.u)
		}
		return parts, nil
	}
	fields := []struct {
		key string
		dst *[]float64
	}{{keySmoothLambda, &r.lambda}, {keySmoothKappa, &r.kappa}, {keySmoothDelta, &r.delta}}
	if !v2 {
		// An interpolation-v1 reader would ignore them: the file would
		// predict otherwise than its writer meant.
		for _, k := range []string{keySmoothMu, keySmoothDiscount, keySmoothRho} {
			if md.FindKey(k) >= 0 {
				return fmt.Errorf("schema metadata %s with %s = %s: the parameter belongs to %s", k, keySmooth, smoothRule, smoothRuleV2)
			}
		}
	} else {
		r.mu, r.discount, r.rho = []float64{}, []float64{}, []float64{}
		fields = append(fields, []struct {
			key string
			dst *[]float64
		}{{keySmoothMu, &r.mu}, {keySmoothDiscount, &r.discount}, {keySmoothRho, &r.rho}}...)
	}
	for _, f := range fields {
		parts, err := get(f.key)
		if err != nil {
			return err
		}
		for _, p := range parts {
			v, err := strconv.ParseFloat(p, 64)
			if err != nil {
				return fmt.Errorf("schema metadata %s: %q is not a number", f.key, p)
			}
			*f.dst = append(*f.dst, v)
		}
	}
	parts, err := get(keySmoothNNZ)
	if err != nil {
		return err
	}
	for _, p := range parts {
		v, err := strconv.Atoi(p)
		if err != nil || v < 0 || v > math.MaxInt32 {
			return fmt.Errorf("schema metadata %s: %q is not a count of nonzeros", keySmoothNNZ, p)
		}
		r.nnz = append(r.nnz, v)
		r.want += int64(streamRows(3*v, r.m))
	}
	r.want += int64(r.u) * int64(streamRows(r.n, r.m))
	r.streams = map[string][][]float64{"Q": make([][]float64, r.u), "C": make([][]float64, r.u)}
	return nil
}

// streamRow places row s of the Q or C stream of action a.
func (r *modelReader) streamRow(f string, a, s int, vals []float64) error {
	if !r.smooth {
		return fmt.Errorf("row %s action %d: the file has no %s", f, a, keySmooth)
	}
	if a < 0 || a >= r.u {
		return fmt.Errorf("row %s action %d: out of range [0, %d)", f, a, r.u)
	}
	k := r.n
	if f == "C" {
		k = 3 * r.nnz[a]
	}
	rows := streamRows(k, r.m)
	if s < 0 || s >= rows {
		return fmt.Errorf("row %s action %d index %d: out of range [0, %d)", f, a, s, rows)
	}
	st := r.streams[f]
	if st[a] == nil {
		st[a] = make([]float64, rows*r.m)
		r.got = append(r.got, map[int]bool{})
		if r.gotIdx == nil {
			r.gotIdx = map[string]int{}
		}
		r.gotIdx[fmt.Sprintf("%s%d", f, a)] = len(r.got) - 1
	}
	g := r.got[r.gotIdx[fmt.Sprintf("%s%d", f, a)]]
	if g[s] {
		return fmt.Errorf("row %s action %d index %d appears twice", f, a, s)
	}
	g[s] = true
	copy(st[a][s*r.m:(s+1)*r.m], vals)
	return nil
}

// smoothing builds the rule from the streams (every row present: the
// row count matched and none repeated).
func (r *modelReader) smoothing() (*factor.Smoothing, error) {
	return newSmoothing(r.n, r.u, &factor.Smoothing{Lambda: r.lambda, Kappa: r.kappa, Delta: r.delta,
		Mu: r.mu, Discount: r.discount, Rho: r.rho}, r.nnz, r.streams["Q"], r.streams["C"])
}

// newSmoothing builds and validates a smoothing rule of a model with n
// states and u actions from its metadata, λ κ δ and (interpolation-v2)
// μ d ρ (the fields of meta) and the count of counts per action, and its
// streams: q[a] holds q^a and then padding, c[a] the 3·nnz[a] values of
// action a's count triples and then padding (nil when nnz[a] is 0).
func newSmoothing(n, u int, meta *factor.Smoothing, nnz []int, q, c [][]float64) (*factor.Smoothing, error) {
	sm := &factor.Smoothing{Lambda: meta.Lambda, Kappa: meta.Kappa, Delta: meta.Delta,
		Mu: meta.Mu, Discount: meta.Discount, Rho: meta.Rho, Q: make([][]float64, u)}
	var es []factor.CountEntry
	for a := range u {
		sm.Q[a] = q[a][:n]
		for k := 0; k < 3*nnz[a]; k += 3 {
			i, j := c[a][k], c[a][k+1]
			if i != math.Trunc(i) || j != math.Trunc(j) || i < 0 || j < 0 || i >= float64(n) || j >= float64(n) {
				return nil, fmt.Errorf("stored count %d of action %d names states %v, %v: not in [0, %d)", k/3, a, i, j, n)
			}
			es = append(es, factor.CountEntry{A: a, I: int(i), J: int(j), C: c[a][k+2]})
		}
	}
	if len(es) > 0 || slices.ContainsFunc(sm.Kappa, func(k float64) bool { return !math.IsInf(k, 1) }) {
		cnt, err := factor.NewCNTFromEntries(n, u, es)
		if err != nil {
			return nil, err
		}
		sm.Counts = cnt
	}
	if err := sm.Prepare(n, u); err != nil {
		return nil, err
	}
	return sm, nil
}
