package arrowio

import (
	"bufio"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/memory"

	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
)

// A model dataset is a model written in parts (docs/formats.md, "Model
// dataset"): files in the model schema that each hold rows [lo, hi) of one
// block (a block of D or K, or a stream of the smoothing rule, Q or C),
// and a manifest, written last, that lists them with their sizes and
// SHA-256 digests. The manifest is the commit: files it does not list
// are not part of the dataset.

// ManifestName is the name of a model dataset's manifest.
const ManifestName = "manifest.json"

const (
	kindModelPart    = "model_part"
	kindModelDataset = "model_dataset"
	keyPartFactor    = "emsf.part.factor"
	keyPartBlock     = "emsf.part.block"
	keyPartLo        = "emsf.part.lo"
	keyPartHi        = "emsf.part.hi"
	// maxManifestBytes bounds the manifest a reader accepts (a line is
	// about 200 bytes: a million parts).
	maxManifestBytes = 256 << 20
)

// ModelShape is what a part writer needs to know of its model.
type ModelShape struct {
	N, M, U int
	Tie     factor.Tie
	// SmoothNNZ is nil for a model without a smoothing rule; for a model
	// with one, the number of counts the rule stores for each action (U
	// values), which fixes the length of its C streams.
	SmoothNNZ []int
	// IDs names the vocabularies of user ids the model has ("states",
	// "actions"), in file order: blocks S (n rows) and A (u rows) after
	// every other, each row an id. ShapeOf leaves it empty (a part writer
	// of D and K rows has no use for it); a model file's metadata sets it.
	IDs []string
}

// ShapeOf returns md's shape; md.Smoothing, when set, must have its
// Counts (or none, every κ being +Inf).
func ShapeOf(md *factor.Model) ModelShape {
	s := ModelShape{N: md.N, M: md.M, U: md.U, Tie: md.Tie}
	if md.Smoothing != nil {
		s.SmoothNNZ = smoothNNZ(md.Smoothing, md.U)
	}
	return s
}

func (s ModelShape) check() error {
	if s.N < 1 || s.M < 1 || s.U < 1 || s.N > math.MaxInt32 || s.M > math.MaxInt32 || s.U > math.MaxInt32 {
		return fmt.Errorf("bad model shape n=%d m=%d u=%d", s.N, s.M, s.U)
	}
	if s.Tie.String() == "" {
		return fmt.Errorf("bad tie mode %d", s.Tie)
	}
	if s.SmoothNNZ != nil && len(s.SmoothNNZ) != s.U {
		return fmt.Errorf("smoothing rule with counts of %d actions, the model has u=%d", len(s.SmoothNNZ), s.U)
	}
	for a, nnz := range s.SmoothNNZ {
		if nnz < 0 || nnz > math.MaxInt32 {
			return fmt.Errorf("smoothing rule with %d counts for action %d", nnz, a)
		}
	}
	for k, name := range s.IDs {
		if name != vocabStates && name != vocabActions || slices.Contains(s.IDs[:k], name) {
			return fmt.Errorf("vocabularies %v: want states, actions or both, once each", s.IDs)
		}
	}
	return nil
}

// block returns the block of factor f ("D", "K", "Q" or "C") with index b.
func (s ModelShape) block(f string, b int) (modelBlock, error) {
	for _, blk := range s.blocks() {
		if blk.factor == f && blk.block == b {
			return blk, nil
		}
	}
	switch {
	case f == "D" || f == "K":
		return modelBlock{}, fmt.Errorf("%s block %d: out of range (a model with u=%d tie=%s has %d D and %d K blocks)",
			f, b, s.U, s.Tie, factor.NumD(s.U, s.Tie), factor.NumK(s.U, s.Tie))
	case (f == "Q" || f == "C") && s.SmoothNNZ == nil:
		return modelBlock{}, fmt.Errorf("%s block %d: the model has no smoothing rule (no %s)", f, b, keySmooth)
	case (f == "Q" || f == "C") && (b < 0 || b >= s.U):
		return modelBlock{}, fmt.Errorf("%s block %d: out of range (a model with u=%d has one per action)", f, b, s.U)
	case f == "C": // an action without counts has no C stream
		return modelBlock{}, fmt.Errorf("C block %d: the smoothing rule stores no counts for action %d", b, b)
	}
	return modelBlock{}, fmt.Errorf("factor %q (want D, K, Q or C)", f)
}

// PartSpec says which rows a part holds: rows [Lo, Hi) of block Block of
// factor Factor ("D" or "K"; K is stored transposed, so K's rows are the
// columns of K^a, the next states). An owner of D rows [lo, hi) of action
// a writes {"D", a, lo, hi} (block 0 for a shared D); an owner of K
// columns [lo, hi) of block k writes {"K", k, lo, hi}. The smoothing
// rule's streams are factors "Q" and "C", block a for action a, their
// rows the rows of a model file (m values each, the last padded with
// zeros; docs/formats.md).
type PartSpec struct {
	Factor        string
	Block, Lo, Hi int
	// Attempt, when set (letters, digits, '-', '_'), goes into the file
	// name, so that the parts of two attempts at the same rows (a backup
	// copy, a later epoch) never replace each other: the manifest then
	// names the one that counts.
	Attempt string
	// Format is ModelArrow (also "") or ModelParquet.
	Format string
}

var attemptPattern = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// Name is the part's file name: <factor>-<block>-<lo>-<hi>[.<attempt>].arrow
// (or .parquet).
func (p PartSpec) Name() string {
	ext := ".arrow"
	if p.Format == ModelParquet {
		ext = ".parquet"
	}
	att := ""
	if p.Attempt != "" {
		att = "." + p.Attempt
	}
	return fmt.Sprintf("%s-%d-%d-%d%s%s", p.Factor, p.Block, p.Lo, p.Hi, att, ext)
}

func (p PartSpec) check(s ModelShape) (modelBlock, error) {
	blk, err := s.block(p.Factor, p.Block)
	if err != nil {
		return blk, err
	}
	if p.Lo < 0 || p.Lo >= p.Hi || p.Hi > blk.rows {
		return blk, fmt.Errorf("rows [%d, %d) are not a non-empty range of [0, %d)", p.Lo, p.Hi, blk.rows)
	}
	if p.Attempt != "" && !attemptPattern.MatchString(p.Attempt) {
		return blk, fmt.Errorf("attempt %q: want letters, digits, '-' and '_'", p.Attempt)
	}
	if p.Format != "" && p.Format != ModelArrow && p.Format != ModelParquet {
		return blk, fmt.Errorf("unknown model format %q (want arrow or parquet)", p.Format)
	}
	return blk, nil
}

// ModelPart is one line of a manifest: a part's file (relative to the
// dataset), its rows, its size in bytes and the hex SHA-256 of its bytes.
// ModelPartWriter.Close returns it; CommitModelDataset collects them.
type ModelPart struct {
	File   string `json:"file"`
	Factor string `json:"factor"`
	Block  int    `json:"block"`
	Lo     int    `json:"lo"`
	Hi     int    `json:"hi"`
	Rows   int64  `json:"rows"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// ModelManifest is the manifest of a model dataset (manifest.json).
// Metadata holds the model's metadata under the keys of a model file's
// schema metadata (emsf.n, emsf.m, ..., emsf.smooth..., emsf.param.<key>);
// Parts lists the parts in the row order of a model file (the D blocks,
// the K blocks, then each action's Q and C streams; by block, then lo),
// together covering the rows of every block exactly once.
type ModelManifest struct {
	FormatVersion string            `json:"format_version"`
	Kind          string            `json:"kind"`
	Metadata      map[string]string `json:"metadata"`
	Parts         []ModelPart       `json:"parts"`
}

// partSchema is the schema of a part: the model table, with the model's
// shape and the part's place in the schema metadata.
func partSchema(s ModelShape, p PartSpec) *arrow.Schema {
	var mw metaWriter
	mw.modelShape(FormatVersion, kindModelPart, s)
	mw.set(keyPartFactor, p.Factor)
	mw.int(keyPartBlock, p.Block)
	mw.int(keyPartLo, p.Lo)
	mw.int(keyPartHi, p.Hi)
	return arrow.NewSchema(modelFields(s.M, isIDs(p.Factor)), mw.metadata())
}

// modelShape writes the format version, kind and s, the first keys of a
// model file's and a part's schema metadata (a model file with a
// vocabulary is of version modelVersionVocab, a part never is).
func (w *metaWriter) modelShape(version, kind string, s ModelShape) {
	w.set(keyVersion, version)
	w.set(keyKind, kind)
	w.int(keyN, s.N)
	w.int(keyM, s.M)
	w.int(keyU, s.U)
	w.set(keyTie, s.Tie.String())
}

// digestWriter counts and hashes what it passes on.
type digestWriter struct {
	w io.Writer
	h hash.Hash
	n int64
}

func (d *digestWriter) Write(p []byte) (int, error) {
	n, err := d.w.Write(p)
	d.h.Write(p[:n])
	d.n += int64(n)
	return n, err
}

// ModelPartWriter writes one part of a model dataset: rows [Lo, Hi) of one
// block, appended in state order in pieces of any size, so that an owner
// never needs its rows in one slice. Close commits the file and returns
// its manifest line; on any error the part is aborted (nothing is left
// under its name).
type ModelPartWriter struct {
	spec  PartSpec
	where string // the sink and file, for errors
	m     int
	file  PartFile
	dw    *digestWriter
	buf   *bufio.Writer
	rw    recordWriter
	b     *modelBatcher
	next  int // the state of the next row
	err   error
	done  bool
}

// NewModelPartWriter starts part spec of a model of shape s in sink.
func NewModelPartWriter(ctx context.Context, sink PartSink, s ModelShape, spec PartSpec, opts ...Option) (*ModelPartWriter, error) {
	where := spec.Name() + " in " + sink.String()
	if err := s.check(); err != nil {
		return nil, fmt.Errorf("arrowio: write model part %s: %w", where, err)
	}
	blk, err := spec.check(s)
	if err != nil {
		return nil, fmt.Errorf("arrowio: write model part %s: %w", where, err)
	}
	f, err := sink.Create(ctx, spec.Name())
	if err != nil {
		return nil, err // the sink's errors name the file
	}
	cfg := newConfig(opts)
	mem := cfg.mem
	w := &ModelPartWriter{spec: spec, where: where, m: s.M, file: f, dw: &digestWriter{w: f, h: sha256.New()}, next: spec.Lo}
	w.buf = bufio.NewWriterSize(w.dw, 1<<20)
	sc := partSchema(s, spec)
	if w.rw, err = newModelWriter(w.buf, sc, mem, spec.Format); err != nil {
		f.Abort()
		return nil, fmt.Errorf("arrowio: write model part %s: %w", where, err)
	}
	w.b = newModelBatcher(sc, mem, modelBatchRows(s.N, s.M, cfg.modelBatchBytes()), w.rw.Write)
	w.b.start(blk.factor, blk.action, spec.Lo)
	return w, nil
}

// AppendIDs adds the next ids of a part of a vocabulary (factor S or A).
func (w *ModelPartWriter) AppendIDs(ids ...[]byte) error {
	if w.err != nil || w.done {
		return w.failed()
	}
	if !isIDs(w.spec.Factor) {
		return w.fail(fmt.Errorf("ids appended to a part of factor %s", w.spec.Factor))
	}
	if w.next+len(ids) > w.spec.Hi {
		return w.fail(fmt.Errorf("rows [%d, %d) run past the part's rows [%d, %d)", w.next, w.next+len(ids), w.spec.Lo, w.spec.Hi))
	}
	for _, id := range ids {
		if why := shard.CheckID(id); why != "" {
			return w.fail(fmt.Errorf("row %d: %q %s", w.next, id, why))
		}
		if err := w.b.addID(id); err != nil {
			return w.fail(err)
		}
		w.next++
	}
	return nil
}

// Append adds rows: m values each, row-major, the next states of the part
// (of a Q or C part, the next rows of the stream).
func (w *ModelPartWriter) Append(rows []float64) error {
	if w.err != nil || w.done {
		return w.failed()
	}
	if len(rows)%w.m != 0 {
		return w.fail(fmt.Errorf("%d values are not whole rows of m = %d", len(rows), w.m))
	}
	if isIDs(w.spec.Factor) {
		return w.fail(fmt.Errorf("values appended to a part of vocabulary %s", w.spec.Factor))
	}
	k := len(rows) / w.m
	if w.next+k > w.spec.Hi {
		return w.fail(fmt.Errorf("rows [%d, %d) run past the part's rows [%d, %d)", w.next, w.next+k, w.spec.Lo, w.spec.Hi))
	}
	if err := w.b.add(rows); err != nil {
		return w.fail(err)
	}
	w.next += k
	return nil
}

// Close finishes and commits the part; it fails unless rows [Lo, Hi) have
// all been appended.
func (w *ModelPartWriter) Close() (ModelPart, error) {
	if w.err != nil || w.done {
		return ModelPart{}, w.failed()
	}
	if w.next != w.spec.Hi {
		return ModelPart{}, w.fail(fmt.Errorf("closed with rows [%d, %d) of [%d, %d)", w.spec.Lo, w.next, w.spec.Lo, w.spec.Hi))
	}
	err := w.b.flush()
	w.b.release()
	w.done = true
	if cerr := w.rw.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = w.buf.Flush()
	}
	if err != nil {
		w.file.Abort()
		w.err = err
		return ModelPart{}, w.failed()
	}
	if err := w.file.Commit(); err != nil {
		w.err = err
		return ModelPart{}, w.failed()
	}
	return ModelPart{File: w.spec.Name(), Factor: w.spec.Factor, Block: w.spec.Block, Lo: w.spec.Lo, Hi: w.spec.Hi,
		Rows: int64(w.spec.Hi - w.spec.Lo), Bytes: w.dw.n, SHA256: hex.EncodeToString(w.dw.h.Sum(nil))}, nil
}

// Abort discards the part; after Close or a failure it does nothing.
func (w *ModelPartWriter) Abort() {
	if w.err == nil && !w.done {
		w.fail(errors.New("aborted"))
	}
}

func (w *ModelPartWriter) fail(err error) error {
	if w.err == nil && !w.done {
		w.err = err
		w.done = true
		w.b.release()
		w.rw.Close()
		w.file.Abort()
	}
	return w.failed()
}

func (w *ModelPartWriter) failed() error {
	if w.err == nil {
		return fmt.Errorf("arrowio: write model part %s: already closed", w.where)
	}
	return fmt.Errorf("arrowio: write model part %s: %w", w.where, w.err)
}

// WriteModelPart writes part spec of a model of shape s from rows, its
// (Hi-Lo)·m values row-major, and returns its manifest line.
func WriteModelPart(ctx context.Context, sink PartSink, s ModelShape, spec PartSpec, rows []float64, opts ...Option) (ModelPart, error) {
	w, err := NewModelPartWriter(ctx, sink, s, spec, opts...)
	if err != nil {
		return ModelPart{}, err
	}
	if err := w.Append(rows); err != nil {
		return ModelPart{}, err
	}
	return w.Close()
}

// CommitModelDataset writes the manifest of a dataset into sink, which
// makes the dataset exist: mf gives the model's metadata (its Model's
// shape and scalars, and its Smoothing, whose λ κ δ (μ d ρ) and Counts give the
// rule's metadata; D, KT and the rule's Q are not read and may be nil),
// parts the lines of every part, in any order. They must cover the rows
// of every block (ModelShape.blocks) exactly once. The manifest is
// written atomically (PartFile.Commit) and replaces an earlier one.
func CommitModelDataset(ctx context.Context, sink PartSink, mf *ModelFile, parts []ModelPart) (*ModelManifest, error) {
	if mf == nil || mf.Model == nil {
		return nil, fmt.Errorf("arrowio: commit model dataset %s: no model metadata", sink)
	}
	return commitDataset(ctx, sink, mf, ShapeOf(mf.Model), parts)
}

// CommitModelDatasetIDs is CommitModelDataset for a model whose
// vocabularies of user ids are parts of the dataset, written by whoever
// streams them (VocabPart), not held in mf (whose States and Actions are
// ignored): sums are their checksums (shard.VocabChecksum over the ids
// in index order), by name ("states", "actions"; VocabNames).
func CommitModelDatasetIDs(ctx context.Context, sink PartSink, mf *ModelFile, parts []ModelPart, sums map[string][32]byte) (*ModelManifest, error) {
	if mf == nil || mf.Model == nil {
		return nil, fmt.Errorf("arrowio: commit model dataset %s: no model metadata", sink)
	}
	hdr := *mf
	hdr.States, hdr.Actions, hdr.vocabSums = nil, nil, map[string]string{}
	s := ShapeOf(mf.Model)
	for _, name := range VocabNames {
		if sum, ok := sums[name]; ok {
			s.IDs = append(s.IDs, name)
			hdr.vocabSums[name] = hex.EncodeToString(sum[:])
		}
	}
	if len(s.IDs) != len(sums) {
		return nil, fmt.Errorf("arrowio: commit model dataset %s: vocabularies %v: want states, actions or both", sink, slices.Collect(maps.Keys(sums)))
	}
	return commitDataset(ctx, sink, &hdr, s, parts)
}

// VocabNames are the names of the vocabularies of a model, in file
// order: of states, of actions.
var VocabNames = [2]string{vocabStates, vocabActions}

// VocabPart is the spec of a part holding ids [lo, hi) of vocabulary
// name (VocabNames) of a model whose shape lists it in IDs.
func VocabPart(name string, lo, hi int, attempt, format string) PartSpec {
	f := factorStates
	if name == vocabActions {
		f = factorAction
	}
	return PartSpec{Factor: f, Block: 0, Lo: lo, Hi: hi, Attempt: attempt, Format: format}
}

// commitDataset is CommitModelDataset for a header mf of a model of shape
// s (headerFromMeta).
func commitDataset(ctx context.Context, sink PartSink, mf *ModelFile, s ModelShape, parts []ModelPart) (*ModelManifest, error) {
	man, err := newManifest(mf, s, parts)
	if err != nil {
		return nil, fmt.Errorf("arrowio: commit model dataset %s: %w", sink, err)
	}
	data, err := json.MarshalIndent(man, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("arrowio: commit model dataset %s: %w", sink, err)
	}
	f, err := sink.Create(ctx, ManifestName)
	if err != nil {
		return nil, fmt.Errorf("arrowio: commit model dataset %s: %w", sink, err)
	}
	if _, err := f.Write(append(data, '\n')); err != nil {
		f.Abort()
		return nil, fmt.Errorf("arrowio: commit model dataset %s: %w", sink, err)
	}
	if err := f.Commit(); err != nil {
		return nil, fmt.Errorf("arrowio: commit model dataset %s: %w", sink, err)
	}
	return man, nil
}

func newManifest(mf *ModelFile, s ModelShape, parts []ModelPart) (*ModelManifest, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if s.SmoothNNZ != nil && (mf.Model.Smoothing == nil || len(mf.Model.Smoothing.Lambda) != s.U ||
		len(mf.Model.Smoothing.Kappa) != s.U || len(mf.Model.Smoothing.Delta) != s.U) {
		return nil, fmt.Errorf("the smoothing rule's metadata lacks λ, κ or δ for each of the u=%d actions", s.U)
	}
	kv := modelSchemaOf(mf, s).Metadata()
	man := &ModelManifest{FormatVersion: FormatVersion, Kind: kindModelDataset, Metadata: make(map[string]string, kv.Len()),
		Parts: slices.Clone(parts)}
	for i, k := range kv.Keys() {
		man.Metadata[k] = kv.Values()[i]
	}
	type key struct {
		factor string
		block  int
	}
	bs := s.blocks()
	rank := make(map[key]int, len(bs))
	for i, blk := range bs {
		rank[key{blk.factor, blk.block}] = i
	}
	order := func(p ModelPart) int {
		if r, ok := rank[key{p.Factor, p.Block}]; ok {
			return r
		}
		return len(bs) // no block of the model: checkParts says so
	}
	slices.SortStableFunc(man.Parts, func(a, b ModelPart) int {
		return cmp.Or(cmp.Compare(order(a), order(b)), cmp.Compare(a.Lo, b.Lo))
	})
	return man, checkParts(s, man.Parts)
}

// checkParts checks manifest lines: each well formed, in the row order of
// a model file, together covering the rows of every block exactly once.
func checkParts(s ModelShape, parts []ModelPart) error {
	files := map[string]bool{}
	for _, p := range parts {
		if !fs.ValidPath(p.File) || p.File == "." || p.File == ManifestName {
			return fmt.Errorf("part file %q is not a relative slash-separated path inside the dataset", p.File)
		}
		if files[p.File] {
			return fmt.Errorf("part %s is listed twice", p.File)
		}
		files[p.File] = true
		blk, err := s.block(p.Factor, p.Block)
		if err != nil {
			return fmt.Errorf("part %s: %w", p.File, err)
		}
		if p.Lo < 0 || p.Lo >= p.Hi || p.Hi > blk.rows {
			return fmt.Errorf("part %s: rows [%d, %d) are not a non-empty range of [0, %d)", p.File, p.Lo, p.Hi, blk.rows)
		}
		if p.Rows != int64(p.Hi-p.Lo) {
			return fmt.Errorf("part %s: rows = %d, but [%d, %d) holds %d", p.File, p.Rows, p.Lo, p.Hi, p.Hi-p.Lo)
		}
		if p.Bytes <= 0 {
			return fmt.Errorf("part %s: bytes = %d", p.File, p.Bytes)
		}
		if b, err := hex.DecodeString(p.SHA256); err != nil || len(b) != sha256.Size || hex.EncodeToString(b) != p.SHA256 {
			return fmt.Errorf("part %s: sha256 %q is not 64 lowercase hex digits", p.File, p.SHA256)
		}
	}
	i := 0
	for _, blk := range s.blocks() {
		lo := 0
		for ; i < len(parts) && parts[i].Factor == blk.factor && parts[i].Block == blk.block; i++ {
			p := parts[i]
			switch {
			case p.Lo > lo:
				return fmt.Errorf("%s block %d: rows [%d, %d) are in no part", blk.factor, blk.block, lo, p.Lo)
			case p.Lo < lo:
				return fmt.Errorf("%s block %d: part %s (rows [%d, %d)) overlaps the part before it, or is out of order (listed after rows [0, %d))",
					blk.factor, blk.block, p.File, p.Lo, p.Hi, lo)
			}
			lo = p.Hi
		}
		if lo != blk.rows {
			return fmt.Errorf("%s block %d: rows [%d, %d) are in no part", blk.factor, blk.block, lo, blk.rows)
		}
	}
	if i < len(parts) {
		p := parts[i]
		return fmt.Errorf("part %s (%s block %d) is out of order: parts are listed in the row order of a model file (D, K, then each action's Q and C), then by rows",
			p.File, p.Factor, p.Block)
	}
	return nil
}

// ReadModelManifest reads and checks the manifest of the dataset in src:
// its format version and kind, the model's metadata (as a model file's
// is checked) and the parts' coverage. It does not open the parts.
func ReadModelManifest(ctx context.Context, src PartSource) (*ModelManifest, error) {
	man, _, _, err := readManifest(ctx, src)
	if err != nil {
		return nil, fmt.Errorf("arrowio: read model %s: %w", src, err)
	}
	return man, nil
}

// Header returns the model's metadata: a ModelFile whose Model has the
// shape and scalars (iteration, loglik, WKL, seed) and no factors; with
// a smoothing rule, its Smoothing holds the rule's λ, κ and δ (and μ, d, ρ) only (Q and
// the counts are in the parts).
func (man *ModelManifest) Header() (*ModelFile, error) {
	hdr, _, err := parseModelMeta(man.Metadata)
	if err != nil {
		return nil, fmt.Errorf("arrowio: %s metadata: %w", ManifestName, err)
	}
	return hdr, nil
}

func parseModelMeta(meta map[string]string) (*ModelFile, ModelShape, error) {
	keys := make([]string, 0, len(meta))
	for k := range meta {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	vals := make([]string, len(keys))
	for i, k := range keys {
		vals[i] = meta[k]
	}
	return headerFromMeta(arrow.NewMetadata(keys, vals))
}

// headerFromMeta reads a model's metadata as a model file's reader does:
// the header (a ModelFile with no factors; with a smoothing rule, a
// Smoothing with its λ, κ and δ (and μ, d, ρ) only) and the model's shape.
// A model dataset's parts hold D and K rows and the rule's streams: a
// model with a vocabulary of user ids (emsf.vocab) cannot be one, and is
// refused here, before any part is written.
func headerFromMeta(kv arrow.Metadata) (*ModelFile, ModelShape, error) {
	var r modelReader
	if err := r.meta(kv); err != nil {
		return nil, ModelShape{}, err
	}
	hdr := r.mf
	hdr.Model.N, hdr.Model.M, hdr.Model.U, hdr.Model.Tie = r.n, r.m, r.u, r.tie
	s := ModelShape{N: r.n, M: r.m, U: r.u, Tie: r.tie}
	if r.vocab {
		// The vocabularies are parts (blocks S and A); their checksums
		// stay with the header, for the metadata and for the check of the
		// ids read.
		if i := kv.FindKey(keyVocab); i >= 0 {
			s.IDs = strings.Split(kv.Values()[i], ",")
		}
		hdr.vocabSums = r.sums
	}
	if r.smooth {
		hdr.Model.Smoothing = &factor.Smoothing{Lambda: r.lambda, Kappa: r.kappa, Delta: r.delta, Mu: r.mu, Discount: r.discount, Rho: r.rho}
		s.SmoothNNZ = r.nnz
	}
	return &hdr, s, nil
}

func readManifest(ctx context.Context, src PartSource) (*ModelManifest, *ModelFile, ModelShape, error) {
	f, err := src.Open(ctx, ManifestName)
	if err != nil {
		return nil, nil, ModelShape{}, fmt.Errorf("%s: %w (not a model dataset?)", ManifestName, err)
	}
	defer f.Close()
	if f.Size() > maxManifestBytes {
		return nil, nil, ModelShape{}, fmt.Errorf("%s: %d bytes, more than a manifest's %d", ManifestName, f.Size(), maxManifestBytes)
	}
	var man ModelManifest
	dec := json.NewDecoder(io.NewSectionReader(f, 0, f.Size()))
	if err := dec.Decode(&man); err != nil {
		return nil, nil, ModelShape{}, fmt.Errorf("%s: not a manifest: %w", ManifestName, err)
	}
	if man.FormatVersion != FormatVersion {
		return nil, nil, ModelShape{}, fmt.Errorf("%s: format_version is %q; this build reads version %s", ManifestName, man.FormatVersion, FormatVersion)
	}
	if man.Kind != kindModelDataset {
		return nil, nil, ModelShape{}, fmt.Errorf("%s: kind is %q, want %q", ManifestName, man.Kind, kindModelDataset)
	}
	hdr, s, err := parseModelMeta(man.Metadata)
	if err != nil {
		return nil, nil, ModelShape{}, fmt.Errorf("%s metadata: %w", ManifestName, err)
	}
	if err := checkParts(s, man.Parts); err != nil {
		return nil, nil, ModelShape{}, fmt.Errorf("%s: %w", ManifestName, err)
	}
	return &man, hdr, s, nil
}

// checkPartMeta checks a part's schema metadata against the model's shape
// and the part's manifest line.
func checkPartMeta(kv arrow.Metadata, s ModelShape, p ModelPart) error {
	mr := metaReader{md: kv}
	mr.header(kindModelPart)
	got := ModelShape{N: mr.int(keyN), M: mr.int(keyM), U: mr.int(keyU)}
	tie := mr.str(keyTie)
	f, b, lo, hi := mr.str(keyPartFactor), mr.int(keyPartBlock), mr.int(keyPartLo), mr.int(keyPartHi)
	if mr.err != nil {
		return mr.err
	}
	if got.N != s.N || got.M != s.M || got.U != s.U || tie != s.Tie.String() {
		return fmt.Errorf("a part of a model with n=%d m=%d u=%d tie=%s, the manifest's has n=%d m=%d u=%d tie=%s",
			got.N, got.M, got.U, tie, s.N, s.M, s.U, s.Tie)
	}
	if f != p.Factor || b != p.Block || lo != p.Lo || hi != p.Hi {
		return fmt.Errorf("holds %s block %d rows [%d, %d), the manifest says %s block %d rows [%d, %d)",
			f, b, lo, hi, p.Factor, p.Block, p.Lo, p.Hi)
	}
	return nil
}

// openPart opens a part and checks its size and SHA-256 against its line.
func openPart(ctx context.Context, src PartSource, p ModelPart) (*io.SectionReader, func() error, error) {
	pr, err := src.Open(ctx, p.File)
	if err != nil {
		return nil, nil, err
	}
	if pr.Size() != p.Bytes {
		pr.Close()
		return nil, nil, fmt.Errorf("%d bytes, the manifest says %d", pr.Size(), p.Bytes)
	}
	sr := io.NewSectionReader(pr, 0, p.Bytes)
	h := sha256.New()
	if _, err := io.Copy(h, sr); err != nil {
		pr.Close()
		return nil, nil, err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != p.SHA256 {
		pr.Close()
		return nil, nil, fmt.Errorf("SHA-256 %s, the manifest says %s (changed or corrupt)", got, p.SHA256)
	}
	if _, err := sr.Seek(0, io.SeekStart); err != nil {
		pr.Close()
		return nil, nil, err
	}
	return sr, pr.Close, nil
}

// readPart reads part p (after checking its size, digest and metadata)
// and calls fn for its rows, a run of consecutive states at a time, one
// record batch in memory.
func readPart(ctx context.Context, src PartSource, s ModelShape, p ModelPart, mem memory.Allocator, fn func(state int, vals []float64) error, idFn func(state int, id []byte) error) error {
	sr, closePart, err := openPart(ctx, src, p)
	if err != nil {
		return fmt.Errorf("part %s: %w", p.File, err)
	}
	defer closePart()
	blk, err := s.block(p.Factor, p.Block)
	if err != nil {
		return fmt.Errorf("part %s: %w", p.File, err)
	}
	meta := func(kv arrow.Metadata) (*rowCursor, error) {
		if err := checkPartMeta(kv, s, p); err != nil {
			return nil, err
		}
		return newRowCursor(s.N, s.M, []rowSeg{{blk, p.Lo, p.Hi}}), nil
	}
	err = scanModelFile(ctx, sr, p.Bytes, mem, meta,
		func(_, state int, vals []float64) error { return fn(state, vals) },
		func(_, state int, id []byte) error { return idFn(state, id) })
	if err != nil {
		return fmt.Errorf("part %s: %w", p.File, err)
	}
	return nil
}

// statParts checks, before anything of the model's size is allocated,
// that every part is there with its size and that the sizes can hold the
// values (parts are uncompressed: at least 8 bytes a value).
func statParts(ctx context.Context, src PartSource, s ModelShape, parts []ModelPart) error {
	for _, p := range parts {
		pr, err := src.Open(ctx, p.File)
		if err != nil {
			return fmt.Errorf("part %s: %w", p.File, err)
		}
		size := pr.Size()
		pr.Close()
		if size != p.Bytes {
			return fmt.Errorf("part %s: %d bytes, the manifest says %d", p.File, size, p.Bytes)
		}
		if !isIDs(p.Factor) && p.Bytes/8/int64(s.M) < p.Rows {
			return fmt.Errorf("part %s: %d bytes cannot hold its %d rows of m = %d values", p.File, p.Bytes, p.Rows, s.M)
		}
	}
	return nil
}

// ReadModelDataset reads the model dataset in src: the manifest, then
// every part, checked against its line (size, SHA-256, shape and rows)
// and row by row, and the model against Model.Validate. Errors name the
// dataset and the file: a missing part, a digest mismatch, a manifest of
// another format version.
func ReadModelDataset(ctx context.Context, src PartSource, opts ...Option) (*ModelFile, error) {
	mf, err := readModelDataset(ctx, src, newConfig(opts).mem)
	if err != nil {
		return nil, fmt.Errorf("arrowio: read model %s: %w", src, err)
	}
	return mf, nil
}

func readModelDataset(ctx context.Context, src PartSource, mem memory.Allocator) (*ModelFile, error) {
	man, hdr, s, err := readManifest(ctx, src)
	if err != nil {
		return nil, err
	}
	if err := statParts(ctx, src, s, man.Parts); err != nil {
		return nil, err
	}
	md := factor.NewModel(s.N, s.M, s.U, s.Tie)
	md.Iteration, md.LogLik, md.WKL, md.Seed = hdr.Model.Iteration, hdr.Model.LogLik, hdr.Model.WKL, hdr.Model.Seed
	// Where each block's rows go: the factors, and the smoothing rule's
	// streams (checkParts: the parts cover them, statParts: their bytes
	// can hold them).
	dst := map[string][][]float64{"D": md.D, "K": md.KT}
	if s.SmoothNNZ != nil {
		dst["Q"], dst["C"] = make([][]float64, s.U), make([][]float64, s.U)
		for _, blk := range s.blocks() {
			if blk.factor == "Q" || blk.factor == "C" {
				dst[blk.factor][blk.block] = make([]float64, blk.rows*s.M)
			}
		}
	}
	ids := map[string][]string{}
	for _, p := range man.Parts {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var vals []float64
		if !isIDs(p.Factor) {
			vals = dst[p.Factor][p.Block]
		}
		err := readPart(ctx, src, s, p, mem, func(state int, rows []float64) error {
			copy(vals[state*s.M:], rows)
			return nil
		}, func(_ int, id []byte) error {
			ids[p.Factor] = append(ids[p.Factor], string(id))
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	for _, name := range s.IDs {
		f := factorStates
		if name == vocabActions {
			f = factorAction
		}
		v, err := checkedVocab(name, ids[f], hdr.vocabSums[name])
		if err != nil {
			return nil, err
		}
		if f == factorStates {
			hdr.States = v
		} else {
			hdr.Actions = v
		}
	}
	if err := md.Validate(); err != nil {
		return nil, err
	}
	if s.SmoothNNZ != nil {
		if md.Smoothing, err = newSmoothing(s.N, s.U, hdr.Model.Smoothing, s.SmoothNNZ, dst["Q"], dst["C"]); err != nil {
			return nil, err
		}
	}
	hdr.Model = md
	return hdr, nil
}

// AssembleModel writes the model dataset in src as one model file at path
// (atomically, as WriteModel), in format ModelArrow (also "") or
// ModelParquet. It streams: the parts are read one after another, a
// record batch at a time, and re-cut into the record batches WriteModel
// writes, so memory stays a few record batches (4 MiB of values each)
// whatever the model's size, and the file is byte for byte the one
// WriteModel writes for the same model.
func AssembleModel(ctx context.Context, src PartSource, path, format string, opts ...Option) error {
	if format != "" && format != ModelArrow && format != ModelParquet {
		return fmt.Errorf("arrowio: assemble model %s: unknown format %q (want arrow or parquet)", src, format)
	}
	a, err := CreateAtomic(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(a, 1<<20)
	if err := assembleModel(ctx, src, w, format, newConfig(opts)); err != nil {
		a.Abort()
		return fmt.Errorf("arrowio: assemble model %s into %s: %w", src, path, err)
	}
	if err := w.Flush(); err != nil {
		a.Abort()
		return fmt.Errorf("arrowio: assemble model %s into %s: %w", src, path, err)
	}
	return a.Commit()
}

func assembleModel(ctx context.Context, src PartSource, w io.Writer, format string, cfg *config) error {
	mem := cfg.mem
	man, hdr, s, err := readManifest(ctx, src)
	if err != nil {
		return err
	}
	sc := modelSchemaOf(hdr, s)
	rw, err := newModelWriter(w, sc, mem, format)
	if err != nil {
		return err
	}
	b := newModelBatcher(sc, mem, modelBatchRows(s.N, s.M, cfg.modelBatchBytes()), rw.Write)
	defer b.release()
	// A vocabulary's checksum, taken as its ids stream through.
	var sum shard.VocabChecksum
	for k, p := range man.Parts {
		if p.Lo == 0 { // a block begins (checkParts: the parts tile each block in order)
			if err := b.flush(); err != nil {
				rw.Close()
				return err
			}
			blk, _ := s.block(p.Factor, p.Block)
			b.start(blk.factor, blk.action, 0)
			sum = shard.VocabChecksum{}
		}
		if err := ctx.Err(); err != nil {
			rw.Close()
			return err
		}
		err := readPart(ctx, src, s, p, mem, func(_ int, rows []float64) error { return b.add(rows) }, func(_ int, id []byte) error {
			sum.Add(id)
			return b.addID(id)
		})
		if err != nil {
			rw.Close()
			return err
		}
		if last := k+1 == len(man.Parts) || man.Parts[k+1].Lo == 0; last && isIDs(p.Factor) {
			name := vocabStates
			if p.Factor == factorAction {
				name = vocabActions
			}
			if got := sum.Sum(); hex.EncodeToString(got[:]) != hdr.vocabSums[name] {
				rw.Close()
				return fmt.Errorf("%s vocabulary: its ids do not match %s%s (a mangled vocabulary)", name, keyVocabSum, name)
			}
		}
	}
	if err := b.flush(); err != nil {
		rw.Close()
		return err
	}
	return rw.Close()
}

// SplitModel writes the model file at path (Arrow IPC or Parquet, in the
// row order every emsf writer uses) as a dataset into sink: parts of at
// most partRows rows (0: one part per block; the smoothing rule's streams
// are blocks too) in format, then the manifest. It streams, one record batch in memory. On an error the parts
// it wrote are removed and no manifest is written.
func SplitModel(ctx context.Context, path string, sink PartSink, format string, partRows int, opts ...Option) (*ModelManifest, error) {
	if partRows < 0 {
		return nil, fmt.Errorf("arrowio: split model %s: part rows %d: must be >= 0", path, partRows)
	}
	var parts []ModelPart
	man, err := splitModel(ctx, path, sink, format, partRows, opts, &parts)
	if err != nil {
		for _, p := range parts {
			sink.Remove(ctx, p.File)
		}
		return nil, err
	}
	return man, nil
}

func splitModel(ctx context.Context, path string, sink PartSink, format string, partRows int, opts []Option, parts *[]ModelPart) (*ModelManifest, error) {
	mem := newConfig(opts).mem
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("arrowio: split model: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("arrowio: split model %s: %w", path, err)
	}
	var (
		hdr *ModelFile
		s   ModelShape
		bs  []modelBlock
		pw  *ModelPartWriter
	)
	defer func() {
		if pw != nil {
			pw.Abort()
		}
	}()
	meta := func(kv arrow.Metadata) (*rowCursor, error) {
		if hdr, s, err = headerFromMeta(kv); err != nil {
			return nil, err
		}
		bs = s.blocks()
		var segs []rowSeg
		for _, blk := range bs {
			segs = append(segs, rowSeg{blk, 0, blk.rows})
		}
		return newRowCursor(s.N, s.M, segs), nil
	}
	cur := -1
	// open starts the part that holds row state of segment seg, unless
	// it is open; done closes it once its last row is in.
	open := func(seg, state int) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if pw != nil && seg == cur {
			return nil
		}
		blk := bs[seg]
		per := partRows
		if per == 0 {
			per = blk.rows
		}
		cur = seg
		spec := PartSpec{Factor: blk.factor, Block: blk.block, Lo: state, Hi: min(blk.rows, (state/per+1)*per), Format: format}
		if pw, err = NewModelPartWriter(ctx, sink, s, spec, opts...); err != nil {
			return writerError{err}
		}
		return nil
	}
	done := func(state int) error {
		if state != pw.spec.Hi {
			return nil
		}
		line, err := pw.Close()
		pw = nil
		if err != nil {
			return writerError{err}
		}
		*parts = append(*parts, line)
		return nil
	}
	rows := func(seg, state int, vals []float64) error {
		for len(vals) > 0 {
			if err := open(seg, state); err != nil {
				return err
			}
			k := min(len(vals)/s.M, pw.spec.Hi-state)
			if err := pw.Append(vals[:k*s.M]); err != nil {
				return writerError{err}
			}
			vals, state = vals[k*s.M:], state+k
			if err := done(state); err != nil {
				return err
			}
		}
		return nil
	}
	ids := func(seg, state int, id []byte) error {
		if err := open(seg, state); err != nil {
			return err
		}
		if err := pw.AppendIDs(id); err != nil {
			return writerError{err}
		}
		return done(state + 1)
	}
	if err := scanModelFile(ctx, f, st.Size(), mem, meta, rows, ids); err != nil {
		var we writerError
		if errors.As(err, &we) {
			return nil, we.error // it names the part and the dataset
		}
		return nil, fmt.Errorf("arrowio: split model %s: %w", path, err)
	}
	return commitDataset(ctx, sink, hdr, s, *parts)
}

// writerError marks an error of a part writer inside a scan.
type writerError struct{ error }

// DatasetDir says whether path names a model dataset on the file system:
// a directory, or a file named manifest.json (the dataset is then its
// directory); it returns the dataset's directory.
func DatasetDir(path string) (string, bool) {
	if filepath.Base(path) == ManifestName {
		return filepath.Dir(path), true
	}
	st, err := os.Stat(path)
	return path, err == nil && st.IsDir()
}

// ReadModelAny reads a model in either form: a model dataset (a directory
// or its manifest.json, ReadModelDataset) or one model file (ReadModel).
// A URL (nats-obj://) needs its PartSource: ReadModelDataset.
func ReadModelAny(ctx context.Context, path string, opts ...Option) (*ModelFile, error) {
	if strings.Contains(path, "://") {
		return nil, fmt.Errorf("arrowio: read model %s: a URL: open its PartSource (worker/wire.OpenObjectParts) and use ReadModelDataset", path)
	}
	if dir, ok := DatasetDir(path); ok {
		return ReadModelDataset(ctx, DirParts{Dir: dir}, opts...)
	}
	return ReadModel(path, opts...)
}

// CopyModelDataset copies the dataset of src into dst file by file: each
// part, checked against its manifest line's size and SHA-256 as it is
// copied, then the manifest, so that the copy exists only once it is
// whole. It holds one buffer, not a part. On an error the parts it
// copied are removed and no manifest is written.
func CopyModelDataset(ctx context.Context, src PartSource, dst PartSink) (*ModelManifest, error) {
	man, _, _, err := readManifest(ctx, src)
	if err != nil {
		return nil, fmt.Errorf("arrowio: copy model %s: %w", src, err)
	}
	buf := make([]byte, 1<<20)
	var done []string
	fail := func(err error) (*ModelManifest, error) {
		for _, name := range done {
			dst.Remove(ctx, name)
		}
		return nil, fmt.Errorf("arrowio: copy model %s into %s: %w", src, dst, err)
	}
	for _, p := range append(slices.Clone(man.Parts), ModelPart{File: ManifestName}) {
		if err := copyPartFile(ctx, src, dst, p, buf); err != nil {
			return fail(err)
		}
		done = append(done, p.File)
	}
	return man, nil
}

// copyPartFile copies file p.File of src into dst; a part (not the
// manifest) is checked against its size and SHA-256 before it is
// committed.
func copyPartFile(ctx context.Context, src PartSource, dst PartSink, p ModelPart, buf []byte) error {
	r, err := src.Open(ctx, p.File)
	if err != nil {
		return err
	}
	defer r.Close()
	f, err := dst.Create(ctx, p.File)
	if err != nil {
		return err
	}
	h := sha256.New()
	n, err := io.CopyBuffer(io.MultiWriter(f, h), io.NewSectionReader(r, 0, r.Size()), buf)
	if err == nil && p.File != ManifestName {
		if got := hex.EncodeToString(h.Sum(nil)); n != p.Bytes || got != p.SHA256 {
			err = fmt.Errorf("%s: %d bytes of SHA-256 %s, the manifest says %d of %s", p.File, n, got, p.Bytes, p.SHA256)
		}
	}
	if err != nil {
		f.Abort()
		return err
	}
	return f.Commit()
}
