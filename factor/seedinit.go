package factor

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
)

// The constants of NewSeeded's start (docs/quality.md, round 7).
const (
	// seedKappa is the pseudo-counts, spread as the next-state
	// frequencies q (priorQ), that smooth a drawn row into a row of K:
	// the default prior's (emsf fit's --prior-k 30).
	seedKappa = 30
	// seedMixD is the weight of the uniform distribution in a row of D.
	seedMixD = 0.1
	// seedJitter is the relative size of the seeded noise on K's entries
	// that keeps two rows drawn with the same counts apart (EM never
	// separates two identical components).
	seedJitter = 0.01
)

// NewSeeded returns a start for EM drawn from the data, as k-means++
// seeds k-means from its points (without the distance weighting): for
// each action a, the rows of K^a are m rows of a's training counts,
// drawn without replacement with probability proportional to their
// totals (rows never drawn twice; with fewer rows than m, the rest of K
// keeps NewRandom's rows), each smoothed by seedKappa pseudo-counts
// spread as the next-state frequencies (priorQ) and multiplied entry by
// entry by 1 + seedJitter·(r − ½), r uniform; row i of D^a is the
// posterior of row i's counts under those rows, tempered to one
// transition (the mean log-likelihood per count, exponentiated and
// normalized), mixed with the uniform distribution at weight seedMixD.
// Rows of D without counts keep NewRandom's rows (a fit replaces them
// by SetUnseenRows). Everything is drawn from seed, and the rows of D
// are computed each on its own (on up to workers goroutines), so the
// start is the same for any workers. Only TieNone: other tie modes get
// NewRandom(n, m, u, tie, seed).
//
// From NewRandom's start, SQUAREM under the prior spent its first tens
// of passes finding what the data already say (which next states go
// together); from this one, on the real-data benchmark, the held-out
// rule stops after 55–85 passes instead of 148–179 on the dependency
// graph at 20 % and 100 %, with test scores 0.005–0.046 nats higher, and
// higher too in the other rows measured (docs/quality.md, round 7).
func NewSeeded(n, m, u int, tie Tie, blocks []*Block, seed uint64, workers int) *Model {
	md := NewRandom(n, m, u, tie, seed)
	if tie != TieNone {
		return md
	}
	q := priorQ(md, blocks)
	rng := rand.New(rand.NewPCG(seed, 0x73656564)) // "seed"
	for a := range u {
		rows := seedRows(blocks, a)
		if len(rows) == 0 {
			continue
		}
		kt := md.KT[a]
		seedK(kt, n, m, rows, q[a], rng)
		seedD(md.D[a], kt, n, m, rows, workers)
	}
	return md
}

// seedRow is one row of an action's counts: its state, its pieces (a
// row may lie in several blocks; a subslice of one array for all rows)
// and its total count.
type seedRow struct {
	i      int32
	pieces []seedPiece
	x      float64
}

// seedPiece is the part of a row that one block holds.
type seedPiece struct {
	i    int32
	cols []int32
	vals []float64
	x    float64 // the piece's total count
}

// seedRows returns the rows of action a's counts in blocks, in state
// order, their pieces in block order.
func seedRows(blocks []*Block, a int) []seedRow {
	var ps []seedPiece
	for _, b := range blocks {
		if b.Action != a {
			continue
		}
		for r, i := range b.Rows {
			p := seedPiece{i: i, cols: b.Cols[b.Ptr[r]:b.Ptr[r+1]], vals: b.Vals[b.Ptr[r]:b.Ptr[r+1]]}
			for _, c := range p.vals {
				p.x += c
			}
			ps = append(ps, p)
		}
	}
	slices.SortStableFunc(ps, func(p, q seedPiece) int { return cmp.Compare(p.i, q.i) })
	var rows []seedRow
	for lo := 0; lo < len(ps); {
		hi, x := lo, 0.0
		for ; hi < len(ps) && ps[hi].i == ps[lo].i; hi++ {
			x += ps[hi].x
		}
		rows = append(rows, seedRow{i: ps[lo].i, pieces: ps[lo:hi], x: x})
		lo = hi
	}
	return rows
}

// seedK sets the rows of K (columns of kt, n×m) to rows drawn from rows
// (see NewSeeded), smoothed by q.
func seedK(kt []float64, n, m int, rows []seedRow, q []float64, rng *rand.Rand) {
	w := make([]float64, len(rows))
	for k, r := range rows {
		w[k] = r.x
	}
	for l := range min(m, len(rows)) {
		// The weights left, summed in row order (the same sum for any
		// workers), and the row where a uniform draw in [0, sum) falls.
		left := 0.0
		for _, x := range w {
			left += x
		}
		t := rng.Float64() * left
		pick := -1
		for k, x := range w {
			if x == 0 {
				continue
			}
			pick = k
			if t < x {
				break
			}
			t -= x
		}
		r := rows[pick]
		w[pick] = 0
		den := r.x + seedKappa
		for j := range n {
			kt[j*m+l] = seedKappa * q[j] / den
		}
		for _, p := range r.pieces {
			for k, j := range p.cols {
				kt[int(j)*m+l] += p.vals[k] / den
			}
		}
		s := 0.0
		for j := range n {
			kt[j*m+l] *= 1 + seedJitter*(rng.Float64()-0.5)
			s += kt[j*m+l]
		}
		for j := range n {
			kt[j*m+l] /= s
		}
	}
}

// seedD sets the rows of D with counts to their tempered posterior under
// K (kt), mixed with the uniform distribution (see NewSeeded).
func seedD(d, kt []float64, n, m int, rows []seedRow, workers int) {
	logk := make([]float64, len(kt))
	logAll(logk, kt)
	pieces(len(rows), workers, func(_, lo, hi int) {
		sc := make([]float64, m)
		for _, r := range rows[lo:hi] {
			clear(sc)
			for _, p := range r.pieces {
				for k, j := range p.cols {
					c, lk := p.vals[k], logk[int(j)*m:int(j)*m+m]
					for l := range sc {
						sc[l] += c * lk[l]
					}
				}
			}
			mx := math.Inf(-1)
			for _, s := range sc {
				mx = max(mx, s)
			}
			for l := range sc {
				sc[l] = (sc[l] - mx) / r.x
			}
			expAll(sc, sc)
			s := 0.0
			for _, v := range sc {
				s += v
			}
			di := d[int(r.i)*m : int(r.i)*m+m]
			for l := range di {
				di[l] = (1-seedMixD)*sc[l]/s + seedMixD/float64(m)
			}
		}
	})
}
