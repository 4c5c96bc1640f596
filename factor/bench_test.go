package factor

import (
	"bufio"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Benchmarks of one EM iteration (Pass + Commit) on generated count
// matrices, DESIGN §7-8. Run them with
//
//	go test -run NONE -bench BenchmarkIteration -benchtime 20x ./factor/
//
// and compare with scikit-learn's KL-NMF on the same data with
// scripts/bench_compare.sh (see docs/benchmarks.md).

// benchSize is one family of benchmark data: n states, u = 1 action, each
// row with perRow distinct random columns.
type benchSize struct {
	name      string
	n, perRow int
}

var benchSizes = []benchSize{
	{"small", 2000, 100},   // 200 000 nonzeros; K and K̂ fit in L2 at m = 8
	{"medium", 20000, 100}, // 2 000 000 nonzeros: the target size, K and K̂ in L3
}

// benchLarge is the DRAM-regime family (issue 13): K and K̂ are 256 MB
// each at m = 32, far beyond L3; BenchmarkIterationLarge times it.
var benchLarge = benchSize{"large", 1000000, 20} // 20 000 000 nonzeros

// benchSeed fixes the data of every family.
const benchSeed = 20150725

// benchBlockNNZ is the target block size, as shard.DefaultTargetNNZ.
const benchBlockNNZ = 1 << 17

var benchCache = map[string][]*Block{}

// benchBlocks returns the deterministic count matrix of a size
// (RandomCounts: row i gets perRow distinct columns drawn uniformly from
// [0, n), counts drawn uniformly from {1, 2, 3, 4}), split into blocks of whole rows of
// about benchBlockNNZ nonzeros each, as shard.Split does (factor may not
// import shard). Random columns make every nonzero a random gather of a
// row of K: the unfavourable case for the kernel's memory access.
func benchBlocks(sz benchSize) []*Block {
	if bs, ok := benchCache[sz.name]; ok {
		return bs
	}
	whole := RandomCounts(sz.n, 1, sz.perRow, 4, benchSeed)[0]
	bs := splitBlock(whole, benchBlockNNZ)
	benchCache[sz.name] = bs
	return bs
}

// splitBlock cuts b into blocks of whole rows with about target nonzeros
// each (views into b), like shard.Split.
func splitBlock(b *Block, target int) []*Block {
	var out []*Block
	r := 0
	for r < len(b.Rows) {
		start, lo := r, b.Ptr[r]
		for r < len(b.Rows) && (r == start || b.Ptr[r+1]-lo <= int64(target)) {
			r++
		}
		hi := b.Ptr[r]
		part := &Block{Action: b.Action, Rows: b.Rows[start:r], Ptr: make([]int64, r-start+1),
			Cols: b.Cols[lo:hi], Vals: b.Vals[lo:hi]}
		for q := start; q <= r; q++ {
			part.Ptr[q-start] = b.Ptr[q] - lo
		}
		out = append(out, part)
	}
	return out
}

func BenchmarkIteration(b *testing.B) {
	for _, sz := range benchSizes {
		for _, m := range []int{8, 32} {
			for _, workers := range []int{1, 2} {
				for _, ll := range []bool{false, true} {
					name := fmt.Sprintf("%s/m=%d/workers=%d/loglik=%v", sz.name, m, workers, ll)
					b.Run(name, func(b *testing.B) { benchIteration(b, sz, m, workers, ll) })
				}
			}
		}
	}
}

// BenchmarkIterationLarge is BenchmarkIteration on the large family
// (n = 10^6, 20M nonzeros), m = 32, without loglik: the size of
// `emsf bench --states 1000000 --per-row 20`. Generating the data takes
// ≈ 10 s and the arrays ≈ 1.5 GB; run it with -benchtime 3x.
func BenchmarkIterationLarge(b *testing.B) {
	for _, workers := range []int{1, 2} {
		b.Run(fmt.Sprintf("m=32/workers=%d", workers), func(b *testing.B) { benchIteration(b, benchLarge, 32, workers, false) })
	}
}

func benchIteration(b *testing.B, sz benchSize, m, workers int, withLL bool) {
	blocks := benchBlocks(sz)
	nnz := 0
	for _, bl := range blocks {
		nnz += bl.NNZ()
	}
	dataTerm := DataTerm(blocks)
	md := NewRandom(sz.n, m, 1, TieNone, 1)
	acc := NewAccumulator(md)
	var ps Passer // as Fit does: working memory kept across iterations
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, cpuOK := processCPU()
	start := time.Now()
	for range b.N {
		if err := ps.Pass(ctx, md, blocks, acc, workers, withLL); err != nil {
			b.Fatal(err)
		}
		acc.CommitWorkers(md, 1, dataTerm, workers)
	}
	el := time.Since(start)
	cpu1, cpuOK1 := processCPU()
	b.ReportMetric(float64(el.Nanoseconds())/float64(b.N)/float64(nnz), "ns/nnz")
	b.ReportMetric(float64(b.N)/el.Seconds(), "iter/s")
	if cpuOK && cpuOK1 {
		// CPU time of the whole process (all threads, GC included) per
		// iteration: unlike wall time, it does not grow when other
		// processes share the cores, which makes runs on a busy machine
		// comparable.
		b.ReportMetric((cpu1-cpu0).Seconds()*1000/float64(b.N), "cpu-ms/iter")
	}
}

// processCPU returns the user + system CPU time of this process from
// /proc/self/stat (Linux; clock ticks of 10 ms), or false elsewhere.
func processCPU() (time.Duration, bool) {
	buf, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0, false
	}
	// Fields after the command name (which is in parentheses and may hold
	// spaces): state is field 3, utime 14, stime 15.
	s := string(buf)
	k := strings.LastIndexByte(s, ')')
	if k < 0 {
		return 0, false
	}
	f := strings.Fields(s[k+1:])
	if len(f) < 13 {
		return 0, false
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	const tick = 10 * time.Millisecond // USER_HZ = 100 on Linux
	return time.Duration(ut+st) * tick, true
}

// BenchmarkReferenceIteration times the forward-backward oracle on
// trajectories, beside the kernel on the same transitions: the cost the
// simplified update removes.
func BenchmarkReferenceIteration(b *testing.B) {
	rng := rand.New(rand.NewPCG(benchSeed, 1))
	truth, err := TrueModel(2000, 20, 1, RowsDirichlet, 0.5, rng)
	if err != nil {
		b.Fatal(err)
	}
	const count = 200000
	eps, err := SampleEpisodes(truth, count, 100, rng)
	if err != nil {
		b.Fatal(err)
	}
	md := NewRandom(2000, 32, 1, TieNone, 1)
	b.Run("fb", func(b *testing.B) {
		for range b.N {
			if _, _, err := ReferenceIteration(md, eps, ReferenceOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/count, "ns/transition")
	})
	b.Run("kernel", func(b *testing.B) {
		blocks, err := EpisodeBlocks(eps, 2000, 1)
		if err != nil {
			b.Fatal(err)
		}
		acc := NewAccumulator(md)
		next := md.Clone()
		b.ResetTimer()
		for range b.N {
			if err := Pass(context.Background(), next, blocks, acc, 1, true); err != nil {
				b.Fatal(err)
			}
			acc.Commit(next, 1, 0)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/count, "ns/transition")
	})
}

var benchDump = flag.String("emsf.benchdump", "", "write the medium benchmark data set to this file (for scripts/bench_compare.sh)")
var benchDumpSize = flag.String("emsf.benchsize", "medium", "which benchmark data set -emsf.benchdump writes (small or medium)")

// TestBenchDataDump writes the data of one BenchmarkIteration family so a
// peer (scripts/sklearn_bench.py) can run on exactly the same nonzeros.
// Format, little-endian: the 8 bytes "EMSFCOO1", int64 n, int64 nnz, then
// int32 rows[nnz], int32 cols[nnz], float64 counts[nnz], sorted by (row,
// col). It does nothing unless -emsf.benchdump is given.
func TestBenchDataDump(t *testing.T) {
	if *benchDump == "" {
		t.Skip("pass -emsf.benchdump=FILE to write the benchmark data (scripts/bench_compare.sh does)")
	}
	i := slices.IndexFunc(benchSizes, func(s benchSize) bool { return s.name == *benchDumpSize })
	if i < 0 {
		t.Fatalf("-emsf.benchsize=%q: want small or medium", *benchDumpSize)
	}
	sz := benchSizes[i]
	blocks := benchBlocks(sz)
	f, err := os.Create(*benchDump)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := bufio.NewWriterSize(f, 1<<20)
	nnz := 0
	for _, bl := range blocks {
		nnz += bl.NNZ()
	}
	le := binary.LittleEndian
	w.WriteString("EMSFCOO1")
	binary.Write(w, le, [2]int64{int64(sz.n), int64(nnz)})
	for _, bl := range blocks {
		for r, row := range bl.Rows {
			for q := bl.Ptr[r]; q < bl.Ptr[r+1]; q++ {
				binary.Write(w, le, row)
			}
		}
	}
	for _, bl := range blocks {
		binary.Write(w, le, bl.Cols)
	}
	for _, bl := range blocks {
		binary.Write(w, le, bl.Vals)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s: n=%d nnz=%d Σc=%v", *benchDump, sz.n, nnz, TotalCount(blocks))
}

// BenchmarkCommit times Accumulator.CommitWorkers alone on the
// statistics of one pass (medium: n = 20 000, m = 32), in the scalar
// rule (pureGo: what Commit was before commitAVX2) and in AVX2 on one and
// two goroutines. The commit after a real pass also pays for statistics
// that lie in another core's cache (BenchmarkIteration). Run with
//
//	go test -run NONE -bench BenchmarkCommit ./factor/
func BenchmarkCommit(b *testing.B) {
	sz := benchSizes[1]
	blocks := benchBlocks(sz)
	md := NewRandom(sz.n, 32, 1, TieNone, benchSeed)
	acc := NewAccumulator(md)
	if err := Pass(context.Background(), md, blocks, acc, 1, false); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		workers int
		pureGo  bool
	}{{"scalar", 1, true}, {"avx2/workers=1", 1, false}, {"avx2/workers=2", 2, false}} {
		b.Run(c.name, func(b *testing.B) {
			next := md.Clone()
			for b.Loop() {
				if c.pureGo {
					// Commit's arithmetic in the scalar loop, row by row.
					for i := range sz.n {
						fs := [1]float64{1 / acc.X[0][i]}
						commitEntries(next.D[0][i*32:i*32+32], acc.Dh[0][i*32:i*32+32], fs[:], 0, false, true)
					}
					f := make([]float64, 32)
					for l := range f {
						f[l] = 1 / acc.Y[0][l]
					}
					for j := range sz.n {
						commitEntries(next.KT[0][j*32:j*32+32], acc.KhT[0][j*32:j*32+32], f, 0, true, true)
					}
					continue
				}
				acc.CommitWorkers(next, 1, 0, c.workers)
			}
		})
	}
}

// BenchmarkMerge times the reduce of one pass's partials (computed once)
// into an accumulator: "leftfold" is the order before tree-v1
// (Accumulator.Merge in block order), "tree-G" the canonical order with G
// reduction groups (G = 1: the same adds plus the touched-column
// bookkeeping; larger G: plus the combines of subtree sums). Run with
//
//	go test -run NONE -bench BenchmarkMerge -benchtime 10x ./factor/
func BenchmarkMerge(b *testing.B) {
	const m = 32
	for _, sz := range benchSizes {
		blocks := benchBlocks(sz)
		md := NewRandom(sz.n, m, 1, TieNone, benchSeed)
		parts := make([]Partial, len(blocks))
		for k, bl := range blocks {
			if err := Compute(md, bl, new(Scratch), &parts[k], true); err != nil {
				b.Fatal(err)
			}
		}
		nnz := 0
		for _, bl := range blocks {
			nnz += bl.NNZ()
		}
		acc := NewAccumulator(md)
		b.Run(sz.name+"/leftfold", func(b *testing.B) {
			for b.Loop() {
				acc.Reset()
				for k := range parts {
					if err := acc.Merge(&parts[k]); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
		for _, g := range []int{1, 4, 16} {
			plan := PlanBlocks(blocks, TieNone, (nnz+g-1)/g)
			if got := plan.Trees[0].Groups(); got != g {
				b.Fatalf("plan has %d groups, want %d", got, g)
			}
			var r Reducer
			b.Run(fmt.Sprintf("%s/tree-G%d", sz.name, g), func(b *testing.B) {
				for b.Loop() {
					r.Reset(acc, plan)
					for r.Next() >= 0 {
						if err := r.Merge(&parts[r.Next()]); err != nil {
							b.Fatal(err)
						}
					}
				}
			})
		}
	}
}

// BenchmarkRowPass times whole iterations (Pass + Commit, loglik off)
// with the column pass and with the pass useRows chooses (row by row at
// these sizes: rowpass.go) on the same blocks, alternating one of each
// b.N times, and reports each one's median wall ns per nonzero: an
// in-process A/B that the host's noise moves alike. n = 500 000 (23 %
// of K's rows per shard) is near where the two meet. Run it with
//
//	go test -run NONE -bench BenchmarkRowPass -benchtime 7x ./factor/
func BenchmarkRowPass(b *testing.B) {
	for _, sz := range []benchSize{benchLarge, {"half", 500000, 20}} {
		for _, workers := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/m=32/workers=%d", sz.name, workers), func(b *testing.B) { benchRowPass(b, sz, 32, workers) })
		}
	}
}

func benchRowPass(b *testing.B, sz benchSize, m, workers int) {
	var arms [2]*benchArm
	for k, rows := range []int8{rowsNever, rowsAuto} {
		arms[k] = &benchArm{md: NewRandom(sz.n, m, 1, TieNone, 1), ps: Passer{rows: rows}}
	}
	cols, rows := benchAB(b, benchBlocks(sz), arms, workers, func(a *benchArm, acc *Accumulator, dataTerm float64) {
		acc.CommitWorkers(a.md, 1, dataTerm, workers)
	})
	b.ReportMetric(cols[0], "cols-ns/nnz")
	b.ReportMetric(rows[0], "auto-ns/nnz")
	b.ReportMetric(rows[0]/cols[0], "auto/cols")
}

// benchArm is one side of an in-process A/B benchmark: a model and the
// Passer that runs its passes.
type benchArm struct {
	md *Model
	ps Passer
}

// benchAB times whole iterations (Pass, loglik off, then commit) of two
// arms on blocks, one of each per b.N round, which goes first
// alternating, so that a loaded machine's noise falls on both alike. It
// returns each arm's median wall ns per nonzero and mean CPU ns per
// nonzero (process CPU, all threads; 10 ms ticks).
func benchAB(b *testing.B, blocks []*Block, arms [2]*benchArm, workers int, commit func(a *benchArm, acc *Accumulator, dataTerm float64)) (first, second [2]float64) {
	nnz := 0
	for _, bl := range blocks {
		nnz += bl.NNZ()
	}
	dataTerm := DataTerm(blocks)
	var accs [2]*Accumulator
	var walls [2][]float64
	var cpus [2]time.Duration
	for k, a := range arms {
		accs[k] = NewAccumulator(a.md)
	}
	ctx := context.Background()
	b.ResetTimer()
	for i := range b.N {
		for j := range arms {
			k := (j + i) % 2
			a := arms[k]
			cpu0, _ := processCPU()
			t0 := time.Now()
			if err := a.ps.Pass(ctx, a.md, blocks, accs[k], workers, false); err != nil {
				b.Fatal(err)
			}
			commit(a, accs[k], dataTerm)
			walls[k] = append(walls[k], float64(time.Since(t0).Nanoseconds())/float64(nnz))
			cpu1, _ := processCPU()
			cpus[k] += cpu1 - cpu0
		}
	}
	res := func(k int) [2]float64 {
		slices.Sort(walls[k])
		return [2]float64{walls[k][len(walls[k])/2], float64(cpus[k].Nanoseconds()) / float64(b.N) / float64(nnz)}
	}
	return res(0), res(1)
}
