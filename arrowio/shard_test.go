package arrowio

import (
	"bytes"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/arrow/go/v15/arrow/ipc"
	"github.com/apache/arrow/go/v15/arrow/memory"

	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
)

// testShards counts random transitions and splits them into shards.
func testShards(t testing.TB, n, u, transitions, target int) []*shard.Shard {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	var ct shard.Counter
	for range transitions {
		if err := ct.Add(rng.IntN(n), rng.IntN(u), rng.IntN(n), 0.5+rng.Float64()); err != nil {
			t.Fatal(err)
		}
	}
	shards, _ := shard.Split(ct.Matrices(u), n, target)
	return shards
}

func sameShard(t *testing.T, got, want *shard.Shard) {
	t.Helper()
	if got.Info != want.Info {
		t.Errorf("info %+v, want %+v", got.Info, want.Info)
	}
	g, w := got.Block, want.Block
	if g.Action != w.Action || !reflect.DeepEqual(g.Rows, w.Rows) || !reflect.DeepEqual(g.Ptr, w.Ptr) ||
		!reflect.DeepEqual(g.Cols, w.Cols) || !reflect.DeepEqual(g.Vals, w.Vals) {
		t.Errorf("shard %d: block differs", want.ID)
	}
}

func TestShardRoundTrip(t *testing.T) {
	mem := checkedMem(t)
	shards := testShards(t, 50, 3, 2000, 200)
	if len(shards) < 4 {
		t.Fatalf("only %d shards", len(shards))
	}
	dir := t.TempDir()
	for _, s := range shards {
		data, err := EncodeShard(s, WithAllocator(mem))
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeShard(data, WithAllocator(mem))
		if err != nil {
			t.Fatal(err)
		}
		sameShard(t, got, s)
		path := filepath.Join(dir, "s.arrow")
		if err := WriteShardFile(path, s, WithAllocator(mem)); err != nil {
			t.Fatal(err)
		}
		got, err = ReadShardFile(path, WithAllocator(mem))
		if err != nil {
			t.Fatal(err)
		}
		sameShard(t, got, s)
	}
}

func TestShardManyBatches(t *testing.T) {
	// Batches of at most 50 nonzeros: runs of whole rows, read back in order.
	s := testShards(t, 300, 1, 5000, 1<<30)[0]
	var buf bytes.Buffer
	if err := encodeShard(&buf, s, memory.NewGoAllocator(), 50); err != nil {
		t.Fatal(err)
	}
	fr, err := ipc.NewFileReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if fr.NumRecords() < s.NNZ/50 {
		t.Errorf("%d record batches for %d nonzeros", fr.NumRecords(), s.NNZ)
	}
	fr.Close()
	got, err := DecodeShard(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	sameShard(t, got, s)
}

func TestShardCorrupt(t *testing.T) {
	s := testShards(t, 20, 2, 300, 1000)[0]
	data, err := EncodeShard(s)
	if err != nil {
		t.Fatal(err)
	}
	// Every single-byte change is caught: by the decoder, the CSR checks or
	// the checksum (changes in padding are harmless and give the same shard).
	for i := range data {
		c := bytes.Clone(data)
		c[i] ^= 0x5A
		got, err := DecodeShard(c)
		if err == nil {
			sameShard(t, got, s)
			continue
		}
		if !strings.HasPrefix(err.Error(), "arrowio: decode shard: ") {
			t.Errorf("flip at %d: %v", i, err)
		}
	}
	for _, cut := range truncations(data) {
		if _, err := DecodeShard(cut); err == nil {
			t.Errorf("truncated to %d of %d bytes: no error", len(cut), len(data))
		}
	}
	// A count changed at the source: the checksum catches it.
	bad := &shard.Shard{Info: s.Info, Block: &factor.Block{Action: s.Block.Action, Rows: s.Block.Rows,
		Ptr: s.Block.Ptr, Cols: s.Block.Cols, Vals: append([]float64(nil), s.Block.Vals...)}}
	bad.Block.Vals[0] += 1
	if _, err := EncodeShard(bad); err == nil || !strings.Contains(err.Error(), "Σcount") {
		t.Errorf("encoding a shard that fails Verify: %v", err)
	}
	if _, err := ReadShardFile(filepath.Join(t.TempDir(), "none.arrow")); err == nil {
		t.Error("missing shard file: no error")
	}
}
