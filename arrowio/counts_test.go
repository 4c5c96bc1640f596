package arrowio

import (
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/emsf/emsf/shard"
)

func TestCountsRoundTrip(t *testing.T) {
	var tab shard.Table
	for k := range 200000 {
		if err := tab.Add(k%997, k%3, (k*7)%1009, 1+float64(k%4)/2); err != nil {
			t.Fatal(err)
		}
		if k == 150000 {
			tab.ClearPending()
		}
	}
	tab.Merge() // NNZ counts merged transitions
	meta := CountsMeta{Name: "demo", Seq: 42, Added: 200000, Pending: 49999, Version: 3}
	data, err := EncodeCounts(meta, tab.Entries())
	if err != nil {
		t.Fatal(err)
	}
	got, gm, err := DecodeCounts(data)
	if err != nil {
		t.Fatal(err)
	}
	if gm != meta {
		t.Errorf("meta %+v, want %+v", gm, meta)
	}
	if !reflect.DeepEqual(got.Entries(), tab.Entries()) {
		t.Error("entries differ after the round trip")
	}
	// An empty table round-trips too.
	data, err = EncodeCounts(CountsMeta{Name: "x"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, _, err := DecodeCounts(data); err != nil || got.NNZ() != 0 {
		t.Fatalf("empty table: %v, nnz %d", err, got.NNZ())
	}
	// A counts file is a transitions file with a count column.
	var rows int
	var sum float64
	err = ScanTransitionsReader(t.Context(), strings.NewReader(string(mustEncode(t, &tab))), "counts.arrow", "", ReadOptions{CountCol: "count"},
		func(b *TransitionBatch) error {
			rows += b.Len()
			for _, c := range b.Count {
				sum += c
			}
			return nil
		})
	if err != nil || rows != tab.NNZ() || sum != tab.Sum() {
		t.Fatalf("read as transitions: %v, %d rows (want %d), sum %v (want %v)", err, rows, tab.NNZ(), sum, tab.Sum())
	}
}

func mustEncode(t *testing.T, tab *shard.Table) []byte {
	t.Helper()
	data, err := EncodeCounts(CountsMeta{}, tab.Entries())
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestDecodeCountsRejects(t *testing.T) {
	var tab shard.Table
	_ = tab.Add(1, 0, 2, 1)
	good, err := EncodeCounts(CountsMeta{Added: 1, Pending: 1}, tab.Entries())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := DecodeCounts(good[:len(good)/2]); err == nil {
		t.Error("truncated counts file accepted")
	}
	bad, err := EncodeCounts(CountsMeta{Added: 1, Pending: 5}, tab.Entries())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := DecodeCounts(bad); err == nil || !strings.Contains(err.Error(), "pending") {
		t.Errorf("more pending than added rows: %v", err)
	}
}

// FuzzDecodeCounts: a checkpoint read back is either an error or a table
// that encodes back to a file decoding to the same entries.
func FuzzDecodeCounts(f *testing.F) {
	var tab shard.Table
	for k := range 50 {
		_ = tab.Add(k%7, k%2, (k*3)%11, 1+float64(k%3))
	}
	good, err := EncodeCounts(CountsMeta{Name: "f", Seq: 9, Added: 50, Pending: 50}, tab.Entries())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:len(good)-7])
	f.Add([]byte("ARROW1"))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, meta, err := DecodeCounts(data)
		if err != nil {
			return
		}
		again, err := EncodeCounts(meta, got.Entries())
		if err != nil {
			t.Fatalf("a decoded table does not encode: %v", err)
		}
		back, _, err := DecodeCounts(again)
		if err != nil || !reflect.DeepEqual(back.Entries(), got.Entries()) {
			t.Fatalf("round trip of a decoded table: %v", err)
		}
	})
}

// TestCountsVocabRoundTrip: a checkpoint with vocabularies (format
// version 2: the id column, one row per id after the count rows) gives
// back the same entries and ids, in index order, more than one record
// batch of them too; without vocabularies the file stays version 1; a
// mangled id is refused.
func TestCountsVocabRoundTrip(t *testing.T) {
	var tab shard.Table
	for k := range 1000 {
		if err := tab.Add(k%97, k%3, (k*7)%101, 1); err != nil {
			t.Fatal(err)
		}
	}
	tab.Merge()
	states := &shard.Vocab{}
	for i := range 70000 { // more than a record batch of rows
		if _, err := states.Intern([]byte("user-" + strings.Repeat("z", i%5) + string(rune('a'+i%26)) + strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	actions, err := shard.NewVocab([]string{"left", "right", "stay"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		meta CountsMeta
	}{
		{"states and actions", CountsMeta{Name: "ids", Seq: 9, Added: 1000, States: states, Actions: actions}},
		{"actions only", CountsMeta{Name: "ids", Seq: 9, Added: 1000, Actions: actions}},
	} {
		data, err := EncodeCounts(c.meta, tab.Entries())
		if err != nil {
			t.Fatal(err)
		}
		got, gm, err := DecodeCounts(data)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !reflect.DeepEqual(got.Entries(), tab.Entries()) || gm.Seq != 9 || gm.Added != 1000 {
			t.Fatalf("%s: entries or meta differ after the round trip: %+v", c.name, gm)
		}
		if (c.meta.States == nil) != (gm.States == nil) || (gm.States != nil && !gm.States.Equal(states)) || gm.Actions == nil || !gm.Actions.Equal(actions) {
			t.Fatalf("%s: vocabularies differ after the round trip", c.name)
		}
		// The id of the last action mangled (same length): the checksum
		// no longer matches.
		bad := []byte(string(data))
		if k := strings.LastIndex(string(bad), "stay"); k >= 0 {
			copy(bad[k:], "stax")
		}
		if _, _, err := DecodeCounts(bad); err == nil || !strings.Contains(err.Error(), "mangled") {
			t.Fatalf("%s: a mangled id: %v", c.name, err)
		}
	}
	plain, err := EncodeCounts(CountsMeta{Name: "ints"}, tab.Entries())
	if err != nil {
		t.Fatal(err)
	}
	if _, gm, err := DecodeCounts(plain); err != nil || gm.States != nil || gm.Actions != nil {
		t.Fatalf("no vocabulary: %+v, %v", gm, err)
	}
}
