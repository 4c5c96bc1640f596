package arrowio

import (
	"bytes"
	"fmt"

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
// shard.Table.Entries gives them) as an Arrow IPC file:
// columns action, state, next_state (int32), count and pending (float64;
// pending is the part not yet seen by a model version), one row per
// distinct transition sorted by (action, state, next_state), and meta in
// the schema metadata. It is an ordinary transitions file too: emsf fit
// reads it (the count column) as it reads any other.
func EncodeCounts(meta CountsMeta, es []shard.TableEntry, opts ...Option) ([]byte, error) {
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
	var buf bytes.Buffer
	err := writeIPCFile(&buf, sc, mem, func(write func(arrow.Record) error) error {
		rb := array.NewRecordBuilder(mem, sc)
		defer rb.Release()
		for lo := 0; lo == 0 || lo < len(es); lo += countsBatchRows {
			for _, e := range es[lo:min(lo+countsBatchRows, len(es))] {
				rb.Field(0).(*array.Int32Builder).Append(e.Action)
				rb.Field(1).(*array.Int32Builder).Append(e.State)
				rb.Field(2).(*array.Int32Builder).Append(e.Next)
				rb.Field(3).(*array.Float64Builder).Append(e.Count)
				rb.Field(4).(*array.Float64Builder).Append(e.Pending)
			}
			if err := flushRecord(rb, write); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("arrowio: encode counts: %w", err)
	}
	return buf.Bytes(), nil
}

// DecodeCounts reads a counts checkpoint written by EncodeCounts and checks
// it (distinct sorted entries, valid counts, the row counters).
func DecodeCounts(data []byte, opts ...Option) (*shard.Table, CountsMeta, error) {
	var meta CountsMeta
	var es []shard.TableEntry
	var prev *shard.TableEntry
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
				if prev != nil && !entryLess(prev, &e) {
					return fmt.Errorf("row %d (%d --%d--> %d) is not after the row before it: rows must be distinct and sorted", len(es), e.State, e.Action, e.Next)
				}
				es = append(es, e)
				prev = &es[len(es)-1]
			}
			return nil
		}))
	if err != nil {
		return nil, meta, fmt.Errorf("arrowio: decode counts: %w", err)
	}
	t, err := shard.Restore(es, meta.Added, meta.Pending)
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
