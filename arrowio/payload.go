package arrowio

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/array"
	"github.com/apache/arrow/go/v15/arrow/ipc"

	"github.com/emsf/emsf/shard"
)

// payloadFields are the columns of a transitions message: the first four
// columns of a transitions file.
var payloadFields = transitionFields[:4]

// PayloadRowBytes is what one row adds to EncodeTransitionsPayload's
// output (three int32 and one float64 column); the schema and framing add
// about a kilobyte.
const PayloadRowBytes = 3*4 + 8

// EncodeTransitionsPayload returns rows [lo, hi) of b as an Arrow IPC
// stream (one record batch; columns state, action, next_state int32 and
// count float64): the payload of a message to a service's transitions
// subject, which any Arrow implementation can also write.
func EncodeTransitionsPayload(b *TransitionBatch, lo, hi int, opts ...Option) ([]byte, error) {
	return EncodeTransitionsPayloadIDs(b, lo, hi, nil, nil, opts...)
}

// EncodeTransitionsPayloadIDs is EncodeTransitionsPayload for a batch read
// with vocabularies: the state and next_state columns (states not nil)
// and the action column (actions not nil) hold the ids, as utf8 columns.
func EncodeTransitionsPayloadIDs(b *TransitionBatch, lo, hi int, states, actions *shard.Vocab, opts ...Option) ([]byte, error) {
	if lo < 0 || hi > b.Len() || lo > hi {
		return nil, fmt.Errorf("arrowio: encode payload: rows [%d, %d) of a batch of %d", lo, hi, b.Len())
	}
	mem := newConfig(opts).mem
	fields := slices.Clone(payloadFields)
	vs := []*shard.Vocab{states, actions, states}
	for k, v := range vs {
		if v != nil {
			fields[k].Type = arrow.BinaryTypes.String
		}
	}
	sc := arrow.NewSchema(fields, nil)
	rb := array.NewRecordBuilder(mem, sc)
	defer rb.Release()
	for k, col := range [][]int32{b.State[lo:hi], b.Action[lo:hi], b.Next[lo:hi]} {
		if v := vs[k]; v != nil {
			sb := rb.Field(k).(*array.StringBuilder)
			for _, x := range col {
				sb.BinaryBuilder.Append(v.ID(int(x)))
			}
			continue
		}
		rb.Field(k).(*array.Int32Builder).AppendValues(col, nil)
	}
	rb.Field(3).(*array.Float64Builder).AppendValues(b.Count[lo:hi], nil)
	rec := rb.NewRecord()
	defer rec.Release()
	var buf bytes.Buffer
	buf.Grow(1024 + (hi-lo)*PayloadRowBytes)
	w := ipc.NewWriter(&buf, ipc.WithSchema(sc), ipc.WithAllocator(mem))
	if err := w.Write(rec); err != nil {
		return nil, fmt.Errorf("arrowio: encode payload: %w", err)
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("arrowio: encode payload: %w", err)
	}
	return buf.Bytes(), nil
}
