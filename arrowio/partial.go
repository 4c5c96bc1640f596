package arrowio

import (
	"bytes"
	"fmt"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/memory"

	"github.com/emsf/emsf/factor"
)

const kindPartial = "partial"

// Partial schema metadata keys (besides emsf.format_version, emsf.kind,
// emsf.action and emsf.nnz).
const (
	keyJob        = "emsf.job"
	keyIteration  = "emsf.iteration"
	keyShard      = "emsf.shard"
	keyWorker     = "emsf.worker"
	keyM          = "emsf.m"
	keyRows       = "emsf.rows"
	keyCols       = "emsf.cols"
	keyLogLik     = "emsf.loglik"
	keyLogLikBits = "emsf.loglik_bits"
)

// Sections of a partial: the value of its section column.
const (
	sectionRows   = 0 // index = state i, x = X[i], v = Dh row i
	sectionCols   = 1 // index = next state j, x = 0, v = KhT row j
	sectionTotals = 2 // one row: index = -1, x = SumX, v = Y
)

// PartialMeta says which task a partial answers.
type PartialMeta struct {
	Job       string
	Iteration int
	Shard     int
	Worker    string
}

func partialFields(m int) []arrow.Field {
	return []arrow.Field{
		{Name: "section", Type: arrow.PrimitiveTypes.Int8},
		{Name: "index", Type: arrow.PrimitiveTypes.Int32},
		{Name: "x", Type: arrow.PrimitiveTypes.Float64},
		{Name: "v", Type: arrow.FixedSizeListOf(int32(m), arrow.PrimitiveTypes.Float64)},
	}
}

// EncodePartial returns p as an Arrow IPC stream of three record batches
// of one schema (section int8, index int32, x float64, v
// fixed_size_list<float64>[m]): the rows (Dh, X), the columns (KhT) and
// one totals row (Y, SumX). The task, action, nnz and loglik are in the
// schema metadata; every float round-trips bitwise (loglik through its
// IEEE 754 bits, so a NaN stays a NaN).
func EncodePartial(p *factor.Partial, meta PartialMeta, opts ...Option) ([]byte, error) {
	out, err := encodePartial(p, meta, newConfig(opts).mem)
	if err != nil {
		return nil, fmt.Errorf("arrowio: encode partial (job %s, iteration %d, shard %d): %w", meta.Job, meta.Iteration, meta.Shard, err)
	}
	return out, nil
}

func encodePartial(p *factor.Partial, meta PartialMeta, mem memory.Allocator) ([]byte, error) {
	m := len(p.Y)
	if m == 0 {
		return nil, fmt.Errorf("partial has no Y (m = 0)")
	}
	if len(p.Dh) != len(p.Rows)*m || len(p.X) != len(p.Rows) || len(p.KhT) != len(p.Cols)*m {
		return nil, fmt.Errorf("partial has inconsistent dimensions (rows %d, Dh %d, X %d, cols %d, KhT %d, m %d)",
			len(p.Rows), len(p.Dh), len(p.X), len(p.Cols), len(p.KhT), m)
	}
	var mw metaWriter
	mw.set(keyVersion, FormatVersion)
	mw.set(keyKind, kindPartial)
	mw.set(keyJob, meta.Job)
	mw.int(keyIteration, meta.Iteration)
	mw.int(keyShard, meta.Shard)
	mw.set(keyWorker, meta.Worker)
	mw.int(keyAction, p.Action)
	mw.int(keyM, m)
	mw.int(keyNNZ, p.NNZ)
	mw.int(keyRows, len(p.Rows))
	mw.int(keyCols, len(p.Cols))
	mw.set(keyLogLik, fmtFloat(p.LogLik))
	mw.set(keyLogLikBits, fmtBits(p.LogLik))
	sc := arrow.NewSchema(partialFields(m), mw.metadata())
	var buf bytes.Buffer
	// Room for the values up front: growing a buffer of megabytes doubles
	// it again and again.
	buf.Grow((len(p.Rows)+len(p.Cols)+1)*(m*8+24) + 16<<10)
	err := writeIPCStream(&buf, sc, mem, func(write func(arrow.Record) error) error {
		rb := array.NewRecordBuilder(mem, sc)
		defer rb.Release()
		section := func(sec int8, idx []int32, x, v []float64) error {
			n := len(v) / m
			sb := rb.Field(0).(*array.Int8Builder)
			sb.Reserve(n)
			for range n {
				sb.UnsafeAppend(sec)
			}
			rb.Field(1).(*array.Int32Builder).AppendValues(idx, nil)
			xb := rb.Field(2).(*array.Float64Builder)
			if x != nil {
				xb.AppendValues(x, nil)
			} else {
				xb.AppendValues(make([]float64, n), nil)
			}
			appendRows(rb.Field(3).(*array.FixedSizeListBuilder), v, n)
			return flushRecord(rb, write)
		}
		if err := section(sectionRows, p.Rows, p.X, p.Dh); err != nil {
			return err
		}
		if err := section(sectionCols, p.Cols, nil, p.KhT); err != nil {
			return err
		}
		return section(sectionTotals, []int32{-1}, []float64{p.SumX}, p.Y)
	})
	if err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// appendRows appends n rows of the row-major values v to a fixed-size list
// builder.
func appendRows(lb *array.FixedSizeListBuilder, v []float64, n int) {
	lb.Reserve(n)
	for range n {
		lb.Append(true)
	}
	lb.ValueBuilder().(*array.Float64Builder).AppendValues(v, nil)
}

// DecodePartial reads a partial written by EncodePartial. It checks the
// structure (schema, sections, dimensions); factor.Accumulator.Merge checks
// the values.
func DecodePartial(data []byte, opts ...Option) (*factor.Partial, PartialMeta, error) {
	p, meta, err := decodePartial(data, newConfig(opts).mem)
	if err != nil {
		return nil, PartialMeta{}, fmt.Errorf("arrowio: decode partial: %w", err)
	}
	return p, meta, nil
}

func decodePartial(data []byte, mem memory.Allocator) (*factor.Partial, PartialMeta, error) {
	var (
		p          factor.Partial
		meta       PartialMeta
		m          int
		nrow, ncol int
		last       int8
		totals     int
	)
	err := readIPC(ipcSource{r: bytes.NewReader(data), size: int64(len(data))}, mem,
		func(sc *arrow.Schema) error {
			mr := metaReader{md: sc.Metadata()}
			mr.header(kindPartial)
			meta = PartialMeta{Job: mr.str(keyJob), Iteration: mr.int(keyIteration),
				Shard: mr.int(keyShard), Worker: mr.str(keyWorker)}
			p.Action, p.NNZ, m = mr.int(keyAction), mr.int(keyNNZ), mr.int(keyM)
			nrow, ncol = mr.int(keyRows), mr.int(keyCols)
			bits := mr.str(keyLogLikBits)
			if mr.err != nil {
				return mr.err
			}
			var err error
			if p.LogLik, err = parseBits(bits); err != nil {
				return fmt.Errorf("schema metadata %s = %q is not 16 hex digits", keyLogLikBits, bits)
			}
			if m < 1 || m > 1<<20 || nrow < 0 || ncol < 0 {
				return fmt.Errorf("metadata has m %d, rows %d, cols %d", m, nrow, ncol)
			}
			return checkFields(sc, partialFields(m)...)
		},
		guard(func(rec arrow.Record) error {
			if err := noNulls(rec); err != nil {
				return err
			}
			secs := rec.Column(0).(*array.Int8).Int8Values()
			idx := rec.Column(1).(*array.Int32).Int32Values()
			xs := rec.Column(2).(*array.Float64).Float64Values()
			vs, err := listRows(rec.Column(3), m)
			if err != nil {
				return err
			}
			for i, sec := range secs {
				if sec < last {
					return fmt.Errorf("section %d after section %d", sec, last)
				}
				last = sec
				v := vs[i*m : (i+1)*m]
				switch sec {
				case sectionRows:
					p.Rows = append(p.Rows, idx[i])
					p.X = append(p.X, xs[i])
					p.Dh = append(p.Dh, v...)
				case sectionCols:
					p.Cols = append(p.Cols, idx[i])
					p.KhT = append(p.KhT, v...)
				case sectionTotals:
					totals++
					if totals > 1 {
						return fmt.Errorf("more than one totals row")
					}
					p.SumX = xs[i]
					p.Y = append([]float64(nil), v...)
				default:
					return fmt.Errorf("unknown section %d", sec)
				}
			}
			return nil
		}))
	if err != nil {
		return nil, meta, err
	}
	if totals != 1 {
		return nil, meta, fmt.Errorf("no totals row")
	}
	if len(p.Rows) != nrow || len(p.Cols) != ncol {
		return nil, meta, fmt.Errorf("%d rows and %d columns, metadata says %d and %d", len(p.Rows), len(p.Cols), nrow, ncol)
	}
	return &p, meta, nil
}
