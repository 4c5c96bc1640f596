package service

import (
	"context"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
)

// FuzzCountPayload feeds any bytes, as any format, to the service's
// parse-and-count path twice: it never panics, the counts stay within the
// limits (finite, at most shard.MaxCount, a model within MaxModelBytes),
// every row read is counted or rejected, and the checkpoint the service
// would write restores to the same table (a restart always works).
func FuzzCountPayload(f *testing.F) {
	f.Add([]byte("state,action,next_state,count\n0,0,1,1e308\n0,0,1,1e308\n"), "csv")
	f.Add([]byte("state,action,next_state\n2147483646,0,0\n1,0,2\n"), "")
	f.Add([]byte("state,action,next_state,count\n3,1,2,9007199254740000\n3,1,2,7\n"), "csv")
	b := &arrowio.TransitionBatch{State: []int32{0, 40000}, Action: []int32{1, 0}, Next: []int32{2, 3}, Count: []float64{1, 2}}
	if p, err := arrowio.EncodeTransitionsPayload(b, 0, 2); err == nil {
		f.Add(p, "arrows")
	}
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}, "arrow")
	f.Fuzz(func(t *testing.T, data []byte, format string) {
		cfg := Config{Name: "fuzz", Order: 2, MaxModelBytes: 1 << 20}
		if err := cfg.defaults(); err != nil {
			t.Fatal(err)
		}
		m, _ := newMetrics(nil, "fuzz")
		s := &Service{cfg: cfg, log: hclog.NewNullLogger(), m: m, table: &shard.Table{}}
		var read int64
		for seq := uint64(1); seq <= 2; seq++ {
			rows, ids, err := s.parse(context.Background(), seq, format, data)
			was := s.rejectedMsg
			s.count(seq, rows, ids, err)
			if err == nil && s.rejectedMsg == was {
				read += int64(len(rows.State))
			}
		}
		all, _ := s.table.Added()
		if all+s.rejected != read {
			t.Fatalf("%d rows read, %d counted + %d rejected", read, all, s.rejected)
		}
		n, u := s.table.Dims()
		if !(s.table.Sum() <= shard.MaxCount) || n > cfg.MaxStates || u > cfg.MaxActions || (all > 0 && factor.ModelBytes(n, cfg.Order, u, cfg.Tie) > cfg.MaxModelBytes) {
			t.Fatalf("beyond the limits: sum %v, n %d, u %d", s.table.Sum(), n, u)
		}
		enc, err := arrowio.EncodeCounts(arrowio.CountsMeta{Name: "fuzz", Seq: s.seq, Added: all, Pending: all}, s.table.Entries())
		if err != nil {
			t.Fatal(err)
		}
		back, meta, err := arrowio.DecodeCounts(enc)
		s.table.Merge() // NNZ counts merged transitions
		if err != nil || meta.Seq != 2 || back.Sum() != s.table.Sum() || back.NNZ() != s.table.NNZ() {
			t.Fatalf("the checkpoint does not restore: %v", err)
		}
	})
}
