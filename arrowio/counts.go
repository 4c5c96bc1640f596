package arrowio

import (
	"bytes"
	"fmt"
	"io"

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
	var mw metaWriter
	mw.set(keyVersion, FormatVersion)
	mw.set(keyKind, kindCounts)
	mw.set(keyCountsName, meta.Name)
	mw.set(keyCountsSeq, fmt.Sprint(meta.Seq))
	mw.set(keyCountsAdded, fmt.Sprint(meta.Added))
	mw.set(keyCountsPending, fmt.Sprint(meta.Pending))
	mw.int(keyCountsModel, meta.Version)
	sc := arrow.NewSchema(countsFields, mw.metadata())
	err := writeIPCFile(w, sc, mem, func(write func(arrow.Record) error) error {
		rb := array.NewRecordBuilder(mem, sc)
		defer rb.Release()
		as, ss, ns := rb.Field(0).(*array.Int32Builder), rb.Field(1).(*array.Int32Builder), rb.Field(2).(*array.Int32Builder)
		cs, ps := rb.Field(3).(*array.Float64Builder), rb.Field(4).(*array.Float64Builder)
		rows := 0
		err := scan(func(e shard.TableEntry) error {
			as.Append(e.Action)
			ss.Append(e.State)
			ns.Append(e.Next)
			cs.Append(e.Count)
			ps.Append(e.Pending)
			if rows++; rows%countsBatchRows == 0 {
				return flushRecord(rb, write)
			}
			return nil
		})
		if err != nil {
			return err
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
	err := readIPC(ipcSource{ra: bytes.NewReader(data), size: int64(len(data)), file: true}, newConfig(opts).mem,
		func(sc *arrow.Schema) error {
			if err := checkFields(sc, countsFields...); err != nil {
				return err
			}
			mr := metaReader{md: sc.Metadata()}
			mr.header(kindCounts)
			meta = CountsMeta{Name: mr.str(keyCountsName), Seq: mr.uint64(keyCountsSeq),
				Added: int64(mr.int(keyCountsAdded)), Pending: int64(mr.int(keyCountsPending)),
				Version: mr.int(keyCountsModel)}
			return mr.err
		},
		guard(func(rec arrow.Record) error {
			if err := noNulls(rec); err != nil {
				return err
			}
			as := rec.Column(0).(*array.Int32).Int32Values()
			ss := rec.Column(1).(*array.Int32).Int32Values()
			ns := rec.Column(2).(*array.Int32).Int32Values()
			cs := rec.Column(3).(*array.Float64).Float64Values()
			ps := rec.Column(4).(*array.Float64).Float64Values()
			for k := range as {
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
	t, err := b.Table(meta.Added, meta.Pending)
	if err != nil {
		return nil, meta, fmt.Errorf("arrowio: decode counts: %w", err)
	}
	return t, meta, nil
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
