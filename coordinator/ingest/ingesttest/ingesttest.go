// Package ingesttest holds what the distributed ingest's tests share
// (coordinator/ingest's in-process cluster, natsexec's NATS one, the
// multi-process test): random datasets and the oracle, the shards a local
// fit builds (cmd/emsf's loadData and shard.SplitGrid), to compare with
// bitwise.
package ingesttest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/coordinator/ingest"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
)

// localData is what a local fit builds from a dataset (cmd/emsf's
// loadData, one-pass path, then shard.SplitGrid): the oracle.
type Local struct {
	N, U        int
	Transitions int64
	Fingerprint string
	// Sets are each set's shards (ingestwire.SetTrain, and with a
	// holdout SetHeld and SetAll), Mans their manifests.
	Sets [][]*shard.Shard
	Mans []*shard.Manifest
}

// LocalShards reads the files in order as loadData does and splits them as
// fitOrder does. With vocabularies in read (fresh ones: they are grown),
// their groups are read as user ids, numbered as first seen, then sorted
// and the counts renumbered, as loadData does; the fingerprint hashes the
// ids.
func LocalShards(t testing.TB, files []arrowio.DataFile, read arrowio.ReadOptions, holdout float64, seed uint64, target, q int) *Local {
	t.Helper()
	var train, held shard.Counter
	hold := rand.NewPCG(seed, 0x686f6c64)
	rows := 0 // a row split in two is one transition (row) still
	var fp shard.FingerprintHash
	for _, f := range files {
		opts := read
		opts.Format = f.Format
		err := arrowio.ScanTransitions(context.Background(), f.Name, opts, func(b *arrowio.TransitionBatch) error {
			// (The callback runs where the vocabularies grow: a view
			// now holds every id of b.)
			fp.AddIDRows(b.State, b.Action, b.Next, b.Count, read.StateIDs.View(), read.ActionIDs.View())
			rows += b.Len()
			for k := range b.State {
				tr, h, _ := shard.SplitRowSets(b.Count[k], holdout, hold, 0, nil)
				for _, p := range [...]struct {
					ct *shard.Counter
					c  float64
				}{{&train, tr}, {&held, h}} {
					if p.c == 0 {
						continue
					}
					if err := p.ct.Add(int(b.State[k]), int(b.Action[k]), int(b.Next[k]), p.c); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("local read of %s: %v", f.Name, err)
		}
	}
	var perm [2][]int32
	for g, v := range [2]*shard.Vocab{read.StateIDs, read.ActionIDs} {
		if v != nil {
			perm[g] = v.SortFrom(0)
		}
	}
	train.Remap(perm[0], perm[1])
	held.Remap(perm[0], perm[1])
	n1, u1 := train.Dims()
	n2, u2 := held.Dims()
	d := &Local{N: max(n1, n2), U: max(u1, u2), Transitions: int64(rows), Fingerprint: fp.Sum().Fingerprint()}
	if read.States > 0 {
		d.N = read.States
	}
	if read.Actions > 0 {
		d.U = read.Actions
	}
	tr := train.Matrices(d.U)
	sets := [][]*factor.Block{tr}
	if holdout > 0 {
		he := held.Matrices(d.U)
		sets = append(sets, he, shard.Union(d.U, tr, he))
	}
	for _, mats := range sets {
		s, m := shard.SplitGrid(mats, d.N, target, q)
		d.Sets = append(d.Sets, s)
		d.Mans = append(d.Mans, m)
	}
	return d
}

// CheckSame fails unless res is want bitwise: sizes, fingerprint, every
// set's manifest (every Info, checksums included), each line's data term
// folding to factor.DataTerm, and (held not nil) each shard held by its
// line's holder with the local shard's nonzeros.
func CheckSame(t testing.TB, what string, held func(holder, checksum string) *shard.Shard, res *ingest.Result, want *Local) {
	t.Helper()
	if res.N != want.N || res.U != want.U || res.Transitions != want.Transitions || res.Fingerprint != want.Fingerprint {
		t.Fatalf("%s: n %d u %d transitions %d fingerprint %s; local n %d u %d transitions %d fingerprint %s", what,
			res.N, res.U, res.Transitions, res.Fingerprint, want.N, want.U, want.Transitions, want.Fingerprint)
	}
	if len(res.Sets) != len(want.Sets) {
		t.Fatalf("%s: %d sets, local %d", what, len(res.Sets), len(want.Sets))
	}
	for set, sr := range res.Sets {
		if !reflect.DeepEqual(sr.Manifest, want.Mans[set]) {
			t.Fatalf("%s: set %d: the manifest differs from the local one:\n%s", what, set, diffManifest(sr.Manifest, want.Mans[set]))
		}
		dt := 0.0
		for k, l := range sr.Lines {
			dt += l.DataTerm
			ws := want.Sets[set][k]
			if l.Rows != len(ws.Block.Rows) {
				t.Fatalf("%s: set %d shard %d: %d rows, local %d", what, set, k, l.Rows, len(ws.Block.Rows))
			}
			if held != nil {
				got := held(l.Holder, l.Checksum)
				// (A checksum may be the same in two sets: the cache keeps
				// one shard of it, with either ID.)
				if got == nil || !reflect.DeepEqual(got.Block, ws.Block) {
					t.Fatalf("%s: set %d shard %d: worker %s does not hold it as built locally", what, set, k, l.Holder)
				}
			}
		}
		if wdt := factor.DataTerm(shard.Blocks(want.Sets[set])); dt != wdt && len(sr.Lines) > 0 {
			t.Fatalf("%s: set %d: the lines' data term %v, local %v", what, set, dt, wdt)
		}
	}
}

func diffManifest(a, b *shard.Manifest) string {
	if a.N != b.N || a.U != b.U || a.NNZ != b.NNZ || a.Total != b.Total || len(a.Shards) != len(b.Shards) {
		return fmt.Sprintf("n %d/%d u %d/%d nnz %d/%d total %v/%v shards %d/%d", a.N, b.N, a.U, b.U, a.NNZ, b.NNZ, a.Total, b.Total, len(a.Shards), len(b.Shards))
	}
	for k := range a.Shards {
		if a.Shards[k] != b.Shards[k] {
			return fmt.Sprintf("shard %d: %+v\nlocal   %+v", k, a.Shards[k], b.Shards[k])
		}
	}
	return "?"
}

// Dataset writes a random dataset of rows into files of random formats
// in dir and returns them listed.
func Dataset(t testing.TB, rng *rand.Rand, dir string, rows [][4]float64, files int) []arrowio.DataFile {
	t.Helper()
	return DatasetOf(t, rng, dir, rows, files, "csv", "parquet", "arrow")
}

// DatasetOf is Dataset with each file's format drawn from formats.
func DatasetOf(t testing.TB, rng *rand.Rand, dir string, rows [][4]float64, files int, formats ...string) []arrowio.DataFile {
	t.Helper()
	return DatasetIDs(t, rng, dir, rows, files, nil, nil, formats...)
}

// DatasetIDs is DatasetOf with the states (or actions) written as the ids
// of states (actions) when not nil: index i as id i.
func DatasetIDs(t testing.TB, rng *rand.Rand, dir string, rows [][4]float64, files int, states, actions *shard.Vocab, formats ...string) []arrowio.DataFile {
	t.Helper()
	cuts := []int{0}
	for range files - 1 {
		cuts = append(cuts, rng.IntN(len(rows)+1))
	}
	cuts = append(cuts, len(rows))
	slices.Sort(cuts)
	for k := range files {
		part := rows[cuts[k]:cuts[k+1]]
		if len(part) == 0 {
			part = rows[:1] // every file has rows (an empty file is a data error)
		}
		format := formats[rng.IntN(len(formats))]
		path := filepath.Join(dir, fmt.Sprintf("part-%02d.%s", k, format))
		w, err := arrowio.NewTransitionWriterIDs(path, format, states, actions)
		if err != nil {
			t.Fatal(err)
		}
		for q, r := range part {
			if err := w.Write(int(r[0]), int(r[1]), int(r[2]), r[3], int64(q), 0); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	list, err := arrowio.ListDataset(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	return list
}

func TotalSize(files []arrowio.DataFile) int64 {
	s := int64(0)
	for _, f := range files {
		s += f.Size
	}
	return s
}

// RandomRows returns transitions with what makes counting and cutting
// interesting: duplicates, integer or fractional counts, an action
// without transitions, a row with more nonzeros than the target, and
// the largest state seen only as a next state.
func RandomRows(rng *rand.Rand, n, u, count, target int, fractional bool) [][4]float64 {
	var rows [][4]float64
	emptyAction := -1
	if u >= 3 {
		emptyAction = 1
	}
	for len(rows) < count {
		a := rng.IntN(u)
		if a == emptyAction {
			continue
		}
		i := rng.IntN(max(1, n-1))
		if rng.IntN(3) == 0 {
			i = rng.IntN(min(n-1, 5) + 1) // duplicates
			i = min(i, max(0, n-2))
		}
		j := rng.IntN(n - 1 + 1)
		c := float64(1 + rng.IntN(3))
		if rng.IntN(2) == 0 {
			c = 1
		}
		if fractional && rng.IntN(3) == 0 {
			c = []float64{0.1, 0.3, 2.5, 1e-9, 1.0 / 3}[rng.IntN(5)]
		}
		rows = append(rows, [4]float64{float64(i), float64(a), float64(j), c})
	}
	// A row longer than the target.
	big := rng.IntN(max(1, n-1))
	for j := range min(n, target+3) {
		rows = append(rows, [4]float64{float64(big), 0, float64(j), 1})
	}
	// State n−1 only as a next state.
	for k := range rows {
		if rows[k][0] == float64(n-1) {
			rows[k][0] = 0
		}
	}
	rows = append(rows, [4]float64{0, 0, float64(n - 1), 1})
	rng.Shuffle(len(rows), func(a, b int) { rows[a], rows[b] = rows[b], rows[a] })
	return rows
}

// RandomVocab returns n distinct ids in an order that is not their
// sorted one, of 1 to 12 bytes, some needing CSV quotes, some not ASCII.
func RandomVocab(t testing.TB, rng *rand.Rand, n int) *shard.Vocab {
	t.Helper()
	alphabet := []string{"a", "b", "z", "0", "9", "/", "-", ",", "\"", " x", "é", "ß", "日"}
	seen := map[string]bool{}
	var ids []string
	for len(ids) < n {
		id := ""
		for range 1 + rng.IntN(6) {
			id += alphabet[rng.IntN(len(alphabet))]
		}
		if id = strings.TrimSpace(id); id == "" || seen[id] {
			continue
		}
		seen[id] = true
		ids = append(ids, id)
	}
	v, err := shard.NewVocab(ids)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
