package factor

import (
	"fmt"
	"math/rand/v2"
)

// The random init in pieces: what NewRandom draws, one row of D or one
// range of K^T rows at a time, bit for bit, for a process that holds no
// more of the model than its piece (a worker that owns some row groups of
// D and column blocks of K). NewRandom draws from one PCG stream, D blocks
// first, then K blocks, each row-major n×m, one Uint64 per entry (Float64
// takes one), so entry (block, i, l) is draw initPos(...) of the stream and
// PCGAt jumps there. A row of D is normalized on its own; a column of K
// (a K row stored transposed) needs the sum over all n of its draws, in
// j order, which RandomKSums streams in O(m) memory.

// initStream is the seed pair of NewRandom's stream.
const initStream = 0x656d7366 // "emsf"

// initRNG returns a generator at draw pos of the init stream of seed.
func initRNG(seed, pos uint64) *rand.Rand {
	return rand.New(PCGAt(seed, initStream, pos))
}

// initDPos is the first draw of row i of D block b; initKPos of row j of
// K^T block b.
func initDPos(n, m, b, i int) uint64 { return (uint64(b)*uint64(n) + uint64(i)) * uint64(m) }
func initKPos(n, m, u int, tie Tie, b, j int) uint64 {
	return (uint64(NumD(u, tie)+b)*uint64(n) + uint64(j)) * uint64(m)
}

// checkInitShape panics on a shape NewRandom would refuse.
func checkInitShape(n, m, u int) {
	if n < 1 || m < 1 || u < 1 {
		panic(fmt.Sprintf("factor: bad model shape n=%d m=%d u=%d", n, m, u))
	}
}

// RandomDRows writes into out (len(rows)·m values) the rows of D block
// dblock that NewRandom(n, m, u, tie, seed) draws at the rows listed
// (ascending or not), bitwise. Consecutive rows continue one generator.
func RandomDRows(n, m, u int, tie Tie, seed uint64, dblock int, rows []int32, out []float64) {
	checkInitShape(n, m, u)
	if len(out) != len(rows)*m || dblock < 0 || dblock >= NumD(u, tie) {
		panic(fmt.Sprintf("factor: RandomDRows: %d values for %d rows of m=%d, D block %d", len(out), len(rows), m, dblock))
	}
	var rng *rand.Rand
	next := -1
	for q, i := range rows {
		if int(i) != next {
			rng = initRNG(seed, initDPos(n, m, dblock, int(i)))
		}
		r := out[q*m : q*m+m]
		for l := range r {
			r[l] = 0.01 + rng.Float64()
		}
		normalizeRows(r, 1, m)
		next = int(i) + 1
	}
}

// RandomKSums returns, for each K block of NewRandom(n, m, u, tie, seed),
// the sums over j of its draws per column l, in j order: the divisors of
// normalizeCols, bitwise. It draws every entry of K once (O(u·n·m) time)
// and holds m values per block.
func RandomKSums(n, m, u int, tie Tie, seed uint64) [][]float64 {
	checkInitShape(n, m, u)
	sums := make([][]float64, NumK(u, tie))
	for b := range sums {
		s := make([]float64, m)
		rng := initRNG(seed, initKPos(n, m, u, tie, b, 0))
		for range n {
			for l := range s {
				s[l] += 0.01 + rng.Float64()
			}
		}
		sums[b] = s
	}
	return sums
}

// RandomKRows writes into out ((hi−lo)·m values) rows [lo, hi) of K^T
// block kblock of NewRandom(n, m, u, tie, seed), bitwise, given that
// block's column sums (RandomKSums).
func RandomKRows(n, m, u int, tie Tie, seed uint64, kblock, lo, hi int, sums, out []float64) {
	checkInitShape(n, m, u)
	if lo < 0 || hi > n || lo > hi || len(out) != (hi-lo)*m || len(sums) != m || kblock < 0 || kblock >= NumK(u, tie) {
		panic(fmt.Sprintf("factor: RandomKRows: rows [%d, %d) of n=%d, %d values, %d sums, K block %d", lo, hi, n, len(out), len(sums), kblock))
	}
	rng := initRNG(seed, initKPos(n, m, u, tie, kblock, lo))
	for q := range out {
		v := 0.01 + rng.Float64()
		if s := sums[q%m]; s > 0 {
			v /= s
		}
		out[q] = v
	}
}
