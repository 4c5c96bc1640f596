package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/shard"
)

// writeCountRows writes rows (state, action, next state, count) in a
// format; spread multiplies every state index (a sparse state space).
func writeCountRows(t *testing.T, path, format string, rows [][4]float64, spread int) {
	t.Helper()
	w, err := arrowio.NewTransitionWriter(path, format)
	if err != nil {
		t.Fatal(err)
	}
	for k, r := range rows {
		if err := w.Write(int(r[0])*spread, int(r[1]), int(r[2])*spread, r[3], int64(k), 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestLoadDataTwoPassBitwise checks that the two-pass load of Arrow and
// Parquet files (and its one-pass fallback for spread states) gives the
// dataset of the one-pass load of the same rows as CSV, bitwise: counts,
// sizes and fingerprint.
func TestLoadDataTwoPassBitwise(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var rows [][4]float64
	for range 50000 {
		c := 1.0
		if rng.IntN(10) == 0 {
			c = []float64{0.1, 0.3, 2.5, 1e-9}[rng.IntN(4)]
		}
		i := rng.IntN(300)
		rows = append(rows, [4]float64{float64(i), float64(rng.IntN(3)), float64((i*7 + rng.IntN(20)) % 300), c})
	}
	checkTwoPassBitwise(t, rows)
}

// TestLoadDataTwoPassUnweighted is TestLoadDataTwoPassBitwise with every
// count 1 (then the second read skips the count column: NoCount).
func TestLoadDataTwoPassUnweighted(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var rows [][4]float64
	for range 50000 {
		i := rng.IntN(300)
		rows = append(rows, [4]float64{float64(i), float64(rng.IntN(3)), float64((i*7 + rng.IntN(20)) % 300), 1})
	}
	checkTwoPassBitwise(t, rows)
}

// checkTwoPassBitwise loads rows (state, action, next state, count)
// written as CSV, Arrow and Parquet, with states as given and spread
// 10000 apart (too spread for two passes), and fails unless every dataset
// equals the CSV one.
func checkTwoPassBitwise(t *testing.T, rows [][4]float64) {
	t.Helper()
	dir := t.TempDir()
	for _, spread := range []int{1, 10000} {
		var ref *dataset
		for _, format := range []string{"csv", "arrow", "parquet"} {
			path := filepath.Join(dir, "t."+format)
			writeCountRows(t, path, format, rows, spread)
			f := &inputFlags{input: path}
			if format != "csv" && !twoPassFormat(format) {
				t.Fatalf("%s: not read in two passes", format)
			}
			d, err := loadData(context.Background(), f, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			d.file = ""
			if ref == nil {
				ref = d
				continue
			}
			if !reflect.DeepEqual(d, ref) {
				t.Errorf("spread %d: %s: the dataset differs from the CSV one", spread, format)
			}
		}
	}
}

// TestLoadTwoPassInputChanged: a file rewritten between the two reads
// is an error, never a wrong count.
func TestLoadTwoPassInputChanged(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "t.arrow")
	rows := [][4]float64{{0, 0, 1, 1}, {1, 0, 2, 1}, {2, 1, 0, 1}}
	writeCountRows(t, path, "arrow", rows, 1)
	var tp shard.TwoPass
	f := &inputFlags{input: path}
	src, err := f.open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	err = scanPipelined(context.Background(), src, f.readOptions(), func(b *arrowio.TransitionBatch) error {
		_, err := tp.Hist(b.State, b.Action, b.Next, b.Count)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	tp.Plan()
	writeCountRows(t, path, "arrow", [][4]float64{{0, 0, 1, 1}, {0, 0, 2, 1}, {2, 1, 0, 1}}, 1)
	err = scanPipelined(context.Background(), src, f.readOptions(), func(b *arrowio.TransitionBatch) error {
		return tp.Fill(b.State, b.Action, b.Next, b.Count)
	})
	if err == nil {
		_, err = tp.Matrices(2)
	}
	if !errors.Is(err, shard.ErrInputChanged) {
		t.Fatalf("got %v, want ErrInputChanged", err)
	}
}

// TestSplitHash checks that the fingerprint hashed over two reads, the
// first stopping after any number of batches (the second without counts
// when every count is 1), is that of one read hashing every row.
func TestSplitHash(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, weighted := range []bool{false, true} {
		var rows [][4]float64
		for range 1000 {
			c := 1.0
			if weighted && rng.IntN(3) == 0 {
				c = 0.25
			}
			rows = append(rows, [4]float64{float64(rng.IntN(50)), float64(rng.IntN(3)), float64(rng.IntN(50)), c})
		}
		p := filepath.Join(t.TempDir(), "t.arrow")
		writeCountRows(t, p, arrowio.FormatArrowFile, rows, 1)
		opts := arrowio.ReadOptions{BatchRows: 64}
		want := newFingerprint()
		if err := arrowio.ScanTransitions(context.Background(), p, opts, want.add); err != nil {
			t.Fatal(err)
		}
		for stop := range 1000/64 + 2 {
			h := &splitHash{f: newFingerprint()}
			err := arrowio.ScanTransitions(context.Background(), p, opts, func(b *arrowio.TransitionBatch) error {
				h.first(b, h.batches == stop)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			second := opts
			second.NoCount = !weighted
			if err := arrowio.ScanTransitions(context.Background(), p, second, h.second); err != nil {
				t.Fatal(err)
			}
			if got, w := h.f.sum(), want.sum(); got != w {
				t.Errorf("weighted %v, first read stopped at batch %d: %s, want %s", weighted, stop, got, w)
			}
		}
	}
}

// TestFingerprintDefinition pins the fingerprint a fit records
// (docs/formats.md, emsf.fingerprint): "crc32c-ieee:" and the CRC-32C
// then the CRC-32 (IEEE) of the transitions in file order, 20 bytes each,
// computed here from the bytes by hand, for every input format, batch
// and incremental fits.
func TestFingerprintDefinition(t *testing.T) {
	rows := [][4]float64{{0, 0, 1, 1}, {1, 0, 0, 2.5}, {1, 1, 1, 1}, {0, 1, 0, 1e-9}, {1, 0, 0, 1}}
	var raw []byte
	for _, r := range rows {
		raw = binary.LittleEndian.AppendUint32(raw, uint32(r[0]))
		raw = binary.LittleEndian.AppendUint32(raw, uint32(r[1]))
		raw = binary.LittleEndian.AppendUint32(raw, uint32(r[2]))
		raw = binary.LittleEndian.AppendUint64(raw, math.Float64bits(r[3]))
	}
	want := fingerprintOf(raw)
	// What emsf recorded for these rows before ids were hashed by their
	// bytes (main a74bf6b): integer data keeps it.
	if pinned := "crc32c-ieee:fba79529c2fb9564"; want != pinned {
		t.Fatalf("the rows hash to %s, pinned %s", want, pinned)
	}
	dir := t.TempDir()
	for _, format := range []string{arrowio.FormatCSV, arrowio.FormatArrowFile, arrowio.FormatParquet} {
		in := filepath.Join(dir, "t."+format)
		writeCountRows(t, in, format, rows, 1)
		for _, extra := range [][]string{nil, {"--incremental", "--passes", "1"}} {
			out := filepath.Join(dir, "m.arrow")
			args := append([]string{"fit", "--input", in, "--order", "1", "--iters", "2", "--out", out, "--quiet"}, extra...)
			mustEmsf(t, args...)
			mf, err := arrowio.ReadModel(out)
			if err != nil {
				t.Fatal(err)
			}
			if mf.Fingerprint != want {
				t.Errorf("%s %v: fingerprint %q, want %q", format, extra, mf.Fingerprint, want)
			}
		}
	}
}

// fingerprintOf is the fingerprint of raw, the bytes of the rows
// (docs/formats.md, emsf.fingerprint), from the CRCs of the standard
// library.
func fingerprintOf(raw []byte) string {
	return fmt.Sprintf("crc32c-ieee:%08x%08x", crc32.Checksum(raw, crc32.MakeTable(crc32.Castagnoli)), crc32.ChecksumIEEE(raw))
}

// TestFingerprintIDs pins the fingerprint of data named by user ids
// (docs/formats.md, emsf.fingerprint): per row, each id as its bytes and
// a 0x00 in place of its index (a group of integers keeps its uint32),
// then the count's float64 bits, hashed here by hand. It is the same for
// a fresh fit and for one with --init from a model whose vocabulary
// numbers the ids otherwise (so the indices of every id differ), batch
// and incremental, and emsf inspect shows it.
func TestFingerprintIDs(t *testing.T) {
	dir := t.TempDir()
	rows := [][4]string{{"bob", "go", "alice", "1"}, {"alice", "stop", "carol", "2.5"}, {"carol", "go", "bob", "1"}, {"bob", "stop", "bob", "0.5"}}
	text := "state,action,next_state,count\n"
	var raw []byte
	for _, r := range rows {
		text += strings.Join(r[:], ",") + "\n"
		for _, id := range r[:3] {
			raw = append(append(raw, id...), 0)
		}
		c, err := strconv.ParseFloat(r[3], 64)
		if err != nil {
			t.Fatal(err)
		}
		raw = binary.LittleEndian.AppendUint64(raw, math.Float64bits(c))
	}
	want := fingerprintOf(raw)
	in := writeFile(t, dir, "ids.csv", text)
	// The --init model names carol and zed (not in the data) first, and
	// stop before go: the data's ids get other indices than a fresh fit's.
	initModel := filepath.Join(dir, "init.arrow")
	mustEmsf(t, "fit", "--input", writeFile(t, dir, "init.csv", "state,action,next_state\ncarol,stop,zed\nzed,stop,carol\n"),
		"--order", "1", "--iters", "2", "--out", initModel, "--quiet")
	for _, extra := range [][]string{nil, {"--incremental", "--passes", "1"}} {
		var fresh *arrowio.ModelFile
		for _, warm := range []bool{false, true} {
			out := filepath.Join(dir, "m.arrow")
			args := append([]string{"fit", "--input", in, "--order", "1", "--iters", "2", "--out", out, "--quiet"}, extra...)
			if warm {
				args = append(args, "--init", initModel)
			}
			mustEmsf(t, args...)
			mf := mustReadModel(t, out)
			if mf.Fingerprint != want {
				t.Errorf("%v, --init %v: fingerprint %q, want %q", extra, warm, mf.Fingerprint, want)
			}
			if !warm {
				fresh = mf
				if got := mustEmsf(t, "inspect", "--model", out); !strings.Contains(got, "data         "+want+"\n") {
					t.Errorf("%v: emsf inspect shows no line \"data %s\":\n%s", extra, want, got)
				}
				continue
			}
			// The indices differ, so a fingerprint of indices would.
			if i, _ := mf.States.IndexString("alice"); i == 0 || mf.States.Equal(fresh.States) || mf.Actions.Equal(fresh.Actions) {
				t.Fatalf("%v: the --init vocabularies %q %q number the ids as the fresh fit's %q %q", extra,
					mf.States.Strings(), mf.Actions.Strings(), fresh.States.Strings(), fresh.Actions.Strings())
			}
		}
	}
	// States named by ids, actions by integers (--ids auto reads the
	// action column as integers): the action's uint32 stays.
	raw = nil
	for _, r := range [][3]string{{"bob", "1", "alice"}, {"alice", "0", "carol"}} {
		a, _ := strconv.Atoi(r[1])
		raw = append(append(raw, r[0]...), 0)
		raw = binary.LittleEndian.AppendUint32(raw, uint32(a))
		raw = append(append(raw, r[2]...), 0)
		raw = binary.LittleEndian.AppendUint64(raw, math.Float64bits(1))
	}
	out := filepath.Join(dir, "mixed.arrow")
	mustEmsf(t, "fit", "--input", writeFile(t, dir, "mixed.csv", "state,action,next_state\nbob,1,alice\nalice,0,carol\n"),
		"--order", "1", "--iters", "2", "--out", out, "--quiet")
	if mf := mustReadModel(t, out); mf.States == nil || mf.Actions != nil || mf.Fingerprint != fingerprintOf(raw) {
		t.Errorf("states by ids, actions by integers: vocabularies %v %v, fingerprint %q, want %q", mf.States != nil, mf.Actions != nil, mf.Fingerprint, fingerprintOf(raw))
	}
}

// TestLoadDataDataset: a directory of files (mixed formats) and a glob
// load bitwise the dataset of one file holding their rows in path order
// (counts, sizes, fingerprint), with and without a holdout; a bad row in
// the second file names that file and its row.
func TestLoadDataDataset(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	var rows [][4]float64
	for range 3000 {
		c := 1.0
		if rng.IntN(4) == 0 {
			c = 0.5 + float64(rng.IntN(5))/4
		}
		rows = append(rows, [4]float64{float64(rng.IntN(200)), float64(rng.IntN(3)), float64(rng.IntN(200)), c})
	}
	dir := t.TempDir()
	one := filepath.Join(dir, "one.arrow")
	writeCountRows(t, one, "arrow", rows, 1)
	parts := filepath.Join(dir, "parts")
	if err := os.Mkdir(parts, 0o755); err != nil {
		t.Fatal(err)
	}
	for k, cut := range [][2]int{{0, 700}, {700, 1900}, {1900, 3000}} {
		format := []string{"csv", "parquet", "arrow"}[k]
		writeCountRows(t, filepath.Join(parts, fmt.Sprintf("p%d.%s", k, format)), format, rows[cut[0]:cut[1]], 1)
	}
	for _, holdout := range []float64{0, 0.3} {
		want, err := loadData(context.Background(), &inputFlags{input: one}, holdout, 5)
		if err != nil {
			t.Fatal(err)
		}
		for _, input := range []string{parts, filepath.Join(parts, "p*")} {
			got, err := loadData(context.Background(), &inputFlags{input: input}, holdout, 5)
			if err != nil {
				t.Fatal(err)
			}
			got.file = want.file
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s, holdout %v: the dataset differs from that of one file", input, holdout)
			}
		}
	}
	bad := filepath.Join(parts, "p1.parquet")
	rows[900][0] = -1
	writeCountRows(t, bad, "parquet", rows[700:1900], 1)
	_, err := loadData(context.Background(), &inputFlags{input: parts}, 0, 0)
	var ie *arrowio.InputError
	if !errors.As(err, &ie) || ie.File != bad || ie.Row != 201 || ie.Column != "state" {
		t.Fatalf("bad row in the second file: %v", err)
	}
}
