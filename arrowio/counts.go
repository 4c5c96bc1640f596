package arrowio

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"

	"github.com/emsf/emsf/shard"
)

const kindCounts = "counts"

// Counts schema metadata keys (besides emsf.format_version and emsf.kind).
const (
	keyCountsName    = "emsf.name"
	keyCountsSeq     = "emsf.stream_seq"
	keyCountsAdded   = "emsf.rows_added"
	keyCountsPending = "emsf.rows_pending"
	keyCountsModel   = "emsf.model_version"
	countsBatchRows  = 1 << 16
)

var countsFields = []arrow.Field{
	{Name: "action", Type: arrow.PrimitiveTypes.Int32},
	{Name: "state", Type: arrow.PrimitiveTypes.Int32},
	{Name: "next_state", Type: arrow.PrimitiveTypes.Int32},
	{Name: "count", Type: arrow.PrimitiveTypes.Float64},
	{Name: "pending", Type: arrow.PrimitiveTypes.Float64},
}

// CountsMeta is what a counts checkpoint records beside its table.
type CountsMeta struct {
	// Name is the model name of the service that wrote it.
	Name string
	// Seq is the last stream sequence whose transitions are included.
	Seq uint64
	// Added and Pending are the rows ingested in all and since the last
	// model version (shard.Table.Added).
	Added, Pending int64
	// Version is the latest model version when it was written (0: none).
	Version int
	// States and Actions, when not nil, are the service's vocabularies of
	// user ids (state i is States.ID(i)), written after the count rows
	// (format version 2, docs/formats.md) and read back by DecodeCounts:
	// in the same file as the counts and Seq, so that ids and counts are
	// those of one stream sequence.
	States, Actions *shard.Vocab
}

// countsVersionVocab is the emsf.format_version of a counts checkpoint
// with a vocabulary.
const countsVersionVocab = "2"

// idField is the nullable id column of a counts checkpoint with a
// vocabulary (null on the count rows).
var idField = arrow.Field{Name: "id", Type: arrow.BinaryTypes.String, Nullable: true}

// vocabs returns the vocabularies meta holds, by name, in file order.
func (meta *CountsMeta) vocabs() (names []string, vs []*shard.Vocab) {
	mf := ModelFile{States: meta.States, Actions: meta.Actions}
	return mf.vocabs()
}

// EncodeCounts returns a service's count table (its entries, as
// shard.Table.Entries gives them) as an Arrow IPC file (WriteCounts).
func EncodeCounts(meta CountsMeta, es []shard.TableEntry, opts ...Option) ([]byte, error) {
	var buf bytes.Buffer
	err := WriteCounts(&buf, meta, func(yield func(shard.TableEntry) error) error {
		for _, e := range es {
			if err := yield(e); err != nil {
				return err
			}
		}
		return nil
	}, opts...)
	if err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// WriteCounts writes a service's count table to w as an Arrow IPC file:
// columns action, state, next_state (int32), count and pending (float64;
// pending is the part not yet seen by a model version), one row per
// distinct transition sorted by (action, state, next_state), and meta in
// the schema metadata. scan yields the entries in that order (as
// shard.Table.Scan does); they are written in record batches of 2^16
// rows as they come, so the file is never whole in memory (w can be the
// pipe into an Object Store put). It is an ordinary transitions file too:
// emsf fit reads it (the count column) as it reads any other.
//
// Rows of another kind (the vocabulary of issue 27: a nullable id column,
// count 0 and action or state -1; docs/formats.md) are to follow the
// entries, from a second source: scan yields count rows only.
func WriteCounts(w io.Writer, meta CountsMeta, scan func(yield func(shard.TableEntry) error) error, opts ...Option) error {
	mem := newConfig(opts).mem
	names, vs := meta.vocabs()
	var mw metaWriter
	fields := countsFields
	if len(vs) > 0 {
		mw.set(keyVersion, countsVersionVocab)
		fields = append(slices.Clip(countsFields), idField)
	} else {
		mw.set(keyVersion, FormatVersion)
	}
	mw.set(keyKind, kindCounts)
	mw.set(keyCountsName, meta.Name)
	mw.set(keyCountsSeq, fmt.Sprint(meta.Seq))
	mw.set(keyCountsAdded, fmt.Sprint(meta.Added))
	mw.set(keyCountsPending, fmt.Sprint(meta.Pending))
	mw.int(keyCountsModel, meta.Version)
	mw.vocab(names, vs)
	sc := arrow.NewSchema(fields, mw.metadata())
	err := writeIPCFile(w, sc, mem, func(write func(arrow.Record) error) error {
		rb := array.NewRecordBuilder(mem, sc)
		defer rb.Release()
		as, ss, ns := rb.Field(0).(*array.Int32Builder), rb.Field(1).(*array.Int32Builder), rb.Field(2).(*array.Int32Builder)
		cs, ps := rb.Field(3).(*array.Float64Builder), rb.Field(4).(*array.Float64Builder)
		var ids *array.StringBuilder
		if len(vs) > 0 {
			ids = rb.Field(5).(*array.StringBuilder)
		}
		rows := 0
		row := func(a, s, n int32, c, p float64, id []byte) error {
			as.Append(a)
			ss.Append(s)
			ns.Append(n)
			cs.Append(c)
			ps.Append(p)
			switch {
			case ids == nil:
			case id == nil:
				ids.AppendNull()
			default:
				ids.BinaryBuilder.Append(id)
			}
			if rows++; rows%countsBatchRows == 0 {
				return flushRecord(rb, write)
			}
			return nil
		}
		err := scan(func(e shard.TableEntry) error { return row(e.Action, e.State, e.Next, e.Count, e.Pending, nil) })
		if err != nil {
			return err
		}
		// The vocabularies' rows: a state id as action −1, an action id
		// as state −1, index in the other column, next_state −1.
		for k, v := range vs {
			for i := range v.Len() {
				a, st := int32(-1), int32(i)
				if names[k] == vocabActions {
					a, st = int32(i), -1
				}
				if err := row(a, st, -1, 0, 0, v.ID(i)); err != nil {
					return err
				}
			}
		}
		if rows == 0 || rows%countsBatchRows != 0 {
			return flushRecord(rb, write)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("arrowio: encode counts: %w", err)
	}
	return nil
}

// DecodeCounts reads a counts checkpoint written by WriteCounts and checks
// it (distinct sorted entries, valid counts, the row counters). The
// entries go straight into the table's matrices (shard.TableBuilder).
func DecodeCounts(data []byte, opts ...Option) (*shard.Table, CountsMeta, error) {
	var meta CountsMeta
	var b shard.TableBuilder
	var prev shard.TableEntry
	row := 0
	// With a vocabulary: the checksums the metadata names, the ids read.
	var sums map[string]string
	var ids map[string][]string
	err := readIPC(ipcSource{ra: bytes.NewReader(data), size: int64(len(data)), file: true}, newConfig(opts).mem,
		func(sc *arrow.Schema) error {
			mr := metaReader{md: sc.Metadata()}
			version := mr.headerOf(kindCounts, FormatVersion, countsVersionVocab)
			if mr.err != nil {
				return mr.err
			}
			fields := countsFields
			if version == countsVersionVocab {
				fields = append(slices.Clip(countsFields), idField)
				var err error
				if sums, err = readVocabMeta(&mr); err != nil {
					return err
				}
				ids = map[string][]string{}
			}
			if err := checkFields(sc, fields...); err != nil {
				return err
			}
			meta = CountsMeta{Name: mr.str(keyCountsName), Seq: mr.uint64(keyCountsSeq),
				Added: int64(mr.int(keyCountsAdded)), Pending: int64(mr.int(keyCountsPending)),
				Version: mr.int(keyCountsModel)}
			return mr.err
		},
		guard(func(rec arrow.Record) error {
			var idCol *array.String
			if ids != nil {
				idCol = rec.Column(5).(*array.String)
			}
			if err := noNullsIn(rec, 5); err != nil {
				return err
			}
			as := rec.Column(0).(*array.Int32).Int32Values()
			ss := rec.Column(1).(*array.Int32).Int32Values()
			ns := rec.Column(2).(*array.Int32).Int32Values()
			cs := rec.Column(3).(*array.Float64).Float64Values()
			ps := rec.Column(4).(*array.Float64).Float64Values()
			for k := range as {
				if idCol != nil && idCol.IsValid(k) {
					// A vocabulary row: after every count row, each
					// vocabulary's ids in index order.
					name, idx := vocabStates, ss[k]
					if ss[k] == -1 {
						name, idx = vocabActions, as[k]
					}
					if ns[k] != -1 || (as[k] != -1) == (ss[k] != -1) || cs[k] != 0 || ps[k] != 0 || sums[name] == "" || int(idx) != len(ids[name]) {
						return fmt.Errorf("row %d: a vocabulary row (id %q) must have next_state −1, action or state −1, the next index of a vocabulary the metadata names (%s) and count 0", row, shown(idCol.Value(k)), keyVocab)
					}
					ids[name] = append(ids[name], idCol.Value(k))
					row++
					continue
				}
				if len(ids) > 0 {
					return fmt.Errorf("row %d: a count row after the vocabulary rows", row)
				}
				e := shard.TableEntry{Action: as[k], State: ss[k], Next: ns[k], Count: cs[k], Pending: ps[k]}
				if row > 0 && !entryLess(&prev, &e) {
					return fmt.Errorf("row %d (%d --%d--> %d) is not after the row before it: rows must be distinct and sorted", row, e.State, e.Action, e.Next)
				}
				if err := b.Add(e); err != nil {
					return fmt.Errorf("row %d: %w", row, err)
				}
				prev = e
				row++
			}
			return nil
		}))
	if err != nil {
		return nil, meta, fmt.Errorf("arrowio: decode counts: %w", err)
	}
	for name, sum := range sums {
		v, err := checkedVocab(name, ids[name], sum)
		if err != nil {
			return nil, meta, fmt.Errorf("arrowio: decode counts: %w", err)
		}
		if name == vocabStates {
			meta.States = v
		} else {
			meta.Actions = v
		}
	}
	t, err := b.Table(meta.Added, meta.Pending)
	if err != nil {
		return nil, meta, fmt.Errorf("arrowio: decode counts: %w", err)
	}
	return t, meta, nil
}

// checkedVocab is the vocabulary of ids named name, checked against its
// checksum sum (hex, from the metadata).
func checkedVocab(name string, ids []string, sum string) (*shard.Vocab, error) {
	v, err := shard.NewVocab(ids)
	if err != nil {
		return nil, fmt.Errorf("%s vocabulary: %w", name, err)
	}
	if got := v.Checksum(); hex.EncodeToString(got[:]) != sum {
		return nil, fmt.Errorf("%s vocabulary: its ids do not match %s%s (a mangled vocabulary)", name, keyVocabSum, name)
	}
	return v, nil
}

// readVocabMeta reads emsf.vocab and the checksums it names.
func readVocabMeta(mr *metaReader) (map[string]string, error) {
	sums := map[string]string{}
	list := mr.str(keyVocab)
	if mr.err != nil {
		return nil, mr.err
	}
	for _, name := range strings.Split(list, ",") {
		if name != vocabStates && name != vocabActions || sums[name] != "" {
			return nil, fmt.Errorf("schema metadata %s = %q: want states, actions or states,actions", keyVocab, list)
		}
		sums[name] = mr.str(keyVocabSum + name)
	}
	return sums, mr.err
}

func entryLess(x, y *shard.TableEntry) bool {
	if x.Action != y.Action {
		return x.Action < y.Action
	}
	if x.State != y.State {
		return x.State < y.State
	}
	return x.Next < y.Next
}
