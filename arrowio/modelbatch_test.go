package arrowio

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/apache/arrow/go/v15/arrow"
	"github.com/apache/arrow/go/v15/arrow/memory"

	"github.com/emsf/emsf/factor"
)

// emitRowByRow writes mf as emitModel does, but each block's rows one at
// a time through the batcher's builders (add, flush): the batches as they
// were built before direct took the values straight from the model.
func emitRowByRow(mf *ModelFile, sc *arrow.Schema, mem memory.Allocator, batchBytes int, write func(arrow.Record) error) error {
	md := mf.Model
	b := newModelBatcher(sc, mem, modelBatchRows(md.N, md.M, batchBytes), write)
	defer b.release()
	bs := ShapeOf(md).blocks()
	for i, vals := range blockValues(md, bs) {
		b.start(bs[i].factor, bs[i].action, 0)
		for r := 0; r < len(vals); r += md.M {
			if b.rows == 0 && b.per == 1 {
				return fmt.Errorf("one row a batch: every row would be direct")
			}
			if err := b.add(vals[r : r+md.M]); err != nil {
				return err
			}
		}
		if err := b.flush(); err != nil {
			return err
		}
	}
	return b.vocabs(mf)
}

// TestModelDirectBatches: a model file whose values columns refer to the
// model's own memory (emitModel: addBlock, direct) is byte for byte the
// file whose batches the builders copied row by row, in both formats,
// with and without a smoothing rule and vocabularies, for batch sizes from
// two rows to one batch a block; and the allocator holds nothing after.
func TestModelDirectBatches(t *testing.T) {
	for i, tc := range []struct {
		tie   factor.Tie
		rule  string
		vocab bool
		rows  int // rows a batch
	}{
		{factor.TieNone, "no-rule", false, 2},
		{factor.TieSharedK, "rule", true, 3},
		{factor.TieSharedD, "rule-no-counts", false, 7},
		{factor.TieNone, "rule", true, 1000},
	} {
		for _, format := range []string{ModelArrow, ModelParquet} {
			t.Run(fmt.Sprintf("%d-%s-%s-vocab%v-%drows-%s", i, tc.tie, tc.rule, tc.vocab, tc.rows, format), func(t *testing.T) {
				mem := checkedMem(t)
				mf := testModel(tc.tie)
				md := factor.NewRandom(23, 3, 2, tc.tie, uint64(i+1))
				md.Iteration, md.LogLik, md.WKL = mf.Model.Iteration, mf.Model.LogLik, mf.Model.WKL
				if tc.rule != "no-rule" {
					withRule(t, md, tc.rule == "rule", uint64(i+7))
				}
				mf.Model = md
				if tc.vocab {
					mf.States = vocabOf(t, "s", md.N)
					mf.Actions = vocabOf(t, "a", md.U)
				}
				sc := modelSchema(mf)
				encode := func(emit func(*ModelFile, *arrow.Schema, memory.Allocator, int, func(arrow.Record) error) error) []byte {
					var buf bytes.Buffer
					rw, err := newModelWriter(&buf, sc, mem, format)
					if err != nil {
						t.Fatal(err)
					}
					if err := emit(mf, sc, mem, 8*md.M*tc.rows, rw.Write); err != nil {
						t.Fatal(err)
					}
					if err := rw.Close(); err != nil {
						t.Fatal(err)
					}
					return buf.Bytes()
				}
				direct, copied := encode(emitModel), encode(emitRowByRow)
				if !bytes.Equal(direct, copied) {
					t.Fatalf("the file with direct batches (%d bytes) differs from the one built row by row (%d bytes)", len(direct), len(copied))
				}
				got, err := DecodeModel(direct, WithAllocator(mem))
				if err != nil {
					t.Fatal(err)
				}
				sameModelFile(t, got, mf)
			})
		}
	}
}
