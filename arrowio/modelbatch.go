package arrowio

import (
	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/memory"

	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
)

// modelBlock is one block of a model table: its factor ("D" or "K", or
// "Q" or "C", a stream of the smoothing rule), its index among that
// factor's blocks, the action its rows carry (-1 for a shared factor) and
// its number of rows.
type modelBlock struct {
	factor string
	block  int
	action int32
	rows   int
}

// blocks lists the blocks of a model of shape s in the order of a model
// file: all D blocks in block order, then all K blocks (n rows each),
// then, when the model has a smoothing rule, for each action its Q stream
// and, if the action stores counts, its C stream (rows of m values, the
// row's state its index in the stream).
func (s ModelShape) blocks() []modelBlock {
	var bs []modelBlock
	add := func(name string, count int, shared bool) {
		for b := range count {
			a := int32(b)
			if shared {
				a = -1
			}
			bs = append(bs, modelBlock{name, b, a, s.N})
		}
	}
	add("D", factor.NumD(s.U, s.Tie), s.Tie == factor.TieSharedD)
	add("K", factor.NumK(s.U, s.Tie), s.Tie == factor.TieSharedK)
	for a, nnz := range s.SmoothNNZ {
		bs = append(bs, modelBlock{"Q", a, int32(a), streamRows(s.N, s.M)})
		if nnz > 0 {
			bs = append(bs, modelBlock{"C", a, int32(a), streamRows(3*nnz, s.M)})
		}
	}
	for _, name := range s.IDs {
		if name == vocabStates {
			bs = append(bs, modelBlock{factorStates, 0, -1, s.N})
		} else {
			bs = append(bs, modelBlock{factorAction, 0, -1, s.U})
		}
	}
	return bs
}

// isIDs reports whether a block's factor is a vocabulary of ids (S, A):
// its rows hold an id and no values.
func isIDs(f string) bool { return f == factorStates || f == factorAction }

// modelBatchRows is the number of rows of a model file's record batches:
// at most batchBytes of values, at least one row, at most n.
func modelBatchRows(n, m, batchBytes int) int { return max(1, min(n, batchBytes/(8*m))) }

// modelBatcher cuts the rows of a model's blocks into record batches as a
// model file has them: per rows a batch, a block's last batch shorter, no
// batch across blocks. Rows come in state order in pieces of any size
// (add), so the batches, and the bytes of the file, do not depend on how
// the rows arrive: a whole block (WriteModel) or the parts of a dataset
// (AssembleModel).
type modelBatcher struct {
	rb     *array.RecordBuilder
	m, per int
	factor string
	action int32
	state  int32 // the state of the next row
	rows   int   // rows in rb
	ids    bool  // the schema has the id column (a model with a vocabulary)
	write  func(arrow.Record) error
}

func newModelBatcher(sc *arrow.Schema, mem memory.Allocator, per int, write func(arrow.Record) error) *modelBatcher {
	m := int(sc.Field(3).Type.(*arrow.FixedSizeListType).Len())
	return &modelBatcher{rb: array.NewRecordBuilder(mem, sc), m: m, per: per, ids: sc.NumFields() > 4, write: write}
}

func (b *modelBatcher) release() { b.rb.Release() }

// start begins the rows of a block at state; the rows of the block before
// must have been flushed.
func (b *modelBatcher) start(factor string, action int32, state int) {
	if b.rows != 0 {
		panic("arrowio: modelBatcher.start with rows not flushed")
	}
	b.factor, b.action, b.state = factor, action, int32(state)
}

// add appends rows (m values each, row-major) and writes each batch that
// fills up.
func (b *modelBatcher) add(vals []float64) error {
	if len(vals)%b.m != 0 {
		panic("arrowio: modelBatcher.add of a partial row")
	}
	for len(vals) > 0 {
		k := min(b.per-b.rows, len(vals)/b.m)
		if b.rows == 0 && k == b.per {
			if err := b.direct(vals[:k*b.m]); err != nil {
				return err
			}
			vals = vals[k*b.m:]
			continue
		}
		fb := b.rb.Field(0).(*array.StringBuilder)
		ab := b.rb.Field(1).(*array.Int32Builder)
		sb := b.rb.Field(2).(*array.Int32Builder)
		lb := b.rb.Field(3).(*array.FixedSizeListBuilder)
		if b.rows == 0 {
			// Room for a whole batch at once: grown piece by piece, the
			// buffers would be copied and thrown away again and again.
			fb.Reserve(b.per)
			fb.ReserveData(b.per * len(b.factor))
			ab.Reserve(b.per)
			sb.Reserve(b.per)
			lb.Reserve(b.per)
			lb.ValueBuilder().Reserve(b.per * b.m)
		}
		b.keys(k)
		appendRows(lb, vals[:k*b.m], k)
		vals = vals[k*b.m:]
		if b.rows += k; b.rows == b.per {
			if err := b.flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// addBlock writes the rows of a whole block (start, no rows held), per
// rows a batch, the last one shorter: the batches add and flush would
// write, each with its values straight from vals (direct).
func (b *modelBatcher) addBlock(vals []float64) error {
	if b.rows != 0 {
		panic("arrowio: modelBatcher.addBlock with rows not flushed")
	}
	if len(vals)%b.m != 0 {
		panic("arrowio: modelBatcher.addBlock of a partial row")
	}
	for len(vals) > 0 {
		k := min(b.per, len(vals)/b.m)
		if err := b.direct(vals[:k*b.m]); err != nil {
			return err
		}
		vals = vals[k*b.m:]
	}
	return nil
}

// direct writes the rows of vals (no rows held) as one record batch whose
// values column refers to vals instead of a copy: a model's factors are
// written without a second model's worth of memory, each fresh page of
// which costs a fault (4 MiB batches, allocated anew each). The file's
// bytes are those of the builder's batch: its list and values have no
// nulls, whose bitmaps the IPC and Parquet writers drop.
func (b *modelBatcher) direct(vals []float64) error {
	k := len(vals) / b.m
	b.rb.Field(0).(*array.StringBuilder).ReserveData(k * len(b.factor))
	b.keys(k)
	sc := b.rb.Schema()
	cols := make([]arrow.Array, sc.NumFields())
	for i := range cols {
		if i != 3 {
			cols[i] = b.rb.Field(i).NewArray()
		}
	}
	values := array.NewData(arrow.PrimitiveTypes.Float64, len(vals),
		[]*memory.Buffer{nil, memory.NewBufferBytes(arrow.Float64Traits.CastToBytes(vals))}, nil, 0, 0)
	list := array.NewData(sc.Field(3).Type, k, []*memory.Buffer{nil}, []arrow.ArrayData{values}, 0, 0)
	cols[3] = array.MakeFromData(list)
	values.Release()
	list.Release()
	rec := array.NewRecord(sc, cols, int64(k))
	for _, c := range cols {
		c.Release()
	}
	defer rec.Release()
	return b.write(rec)
}

// keys appends the next k rows' factor, action and state (and null ids)
// to the builders, all but the values.
func (b *modelBatcher) keys(k int) {
	fb := b.rb.Field(0).(*array.StringBuilder)
	ab := b.rb.Field(1).(*array.Int32Builder)
	sb := b.rb.Field(2).(*array.Int32Builder)
	fb.Reserve(k)
	ab.Reserve(k)
	sb.Reserve(k)
	for range k {
		fb.Append(b.factor)
		ab.UnsafeAppend(b.action)
		sb.UnsafeAppend(b.state)
		b.state++
	}
	if b.ids {
		b.rb.Field(4).(*array.StringBuilder).AppendNulls(k)
	}
}

// vocabs writes the vocabularies of mf, states then actions (each, if
// any, after the rows held).
func (b *modelBatcher) vocabs(mf *ModelFile) error {
	if mf.States != nil {
		if err := b.vocab(factorStates, mf.States); err != nil {
			return err
		}
	}
	if mf.Actions != nil {
		return b.vocab(factorAction, mf.Actions)
	}
	return nil
}

// vocab writes the rows of a vocabulary (the schema must have the id
// column), per rows a batch: factor name (S or A), action -1, state the
// index, values null, id the id.
func (b *modelBatcher) vocab(name string, v *shard.Vocab) error {
	if err := b.flush(); err != nil {
		return err
	}
	b.start(name, -1, 0)
	for i := range v.Len() {
		if err := b.addID(v.ID(i)); err != nil {
			return err
		}
	}
	return b.flush()
}

// addID appends the next row of a vocabulary block (start(S or A, -1,
// 0)): state the next index, values null, id the id; per rows a batch,
// as vocab cuts them, so a vocabulary that arrives in pieces (the parts
// of a dataset) gives the bytes of a whole one.
func (b *modelBatcher) addID(id []byte) error {
	b.rb.Field(0).(*array.StringBuilder).Append(b.factor)
	b.rb.Field(1).(*array.Int32Builder).Append(b.action)
	b.rb.Field(2).(*array.Int32Builder).Append(b.state)
	b.rb.Field(3).(*array.FixedSizeListBuilder).AppendNull()
	b.rb.Field(4).(*array.StringBuilder).BinaryBuilder.Append(id)
	b.state++
	if b.rows++; b.rows == b.per {
		return b.flush()
	}
	return nil
}

// flush writes the rows held, if any, as one record batch.
func (b *modelBatcher) flush() error {
	if b.rows == 0 {
		return nil
	}
	b.rows = 0
	return flushRecord(b.rb, b.write)
}
