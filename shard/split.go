package shard

import (
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/stat/distuv"

	"github.com/emsf/emsf/factor"
)

// SplitCounts splits count matrices into a training part and a
// validation part that holds about frac of every count: the validation
// split of a count table, whose transitions are counted, not kept (emsf
// fit splits its input's rows instead; the retraining service its
// counts, at each refit). Each entry (i, a, j) with count c is cut unit
// by unit: unit k goes to the validation part when the k-th draw of a
// stream of the entry's own (a PCG seeded by seed and (a, i, j)) is below
// frac, the fractional part of c being one more unit, drawn last. An
// entry of more than SplitUnitsMax units draws its validation share at
// once from the same stream (the binomial, exactly: gonum's
// distuv.Binomial, a rejection method of bounded expected cost; above
// 2^50 units its mean, rounded), so a split costs at most SplitUnitsMax
// draws an entry whatever a client counted. So the split is a function of (seed, entry, count) alone: the
// same whatever the order or the layout of the counts, bitwise the same
// at every retrain of the same counts, and as a count grows between
// retrains the units it had keep their sides (up to SplitUnitsMax). Each
// block of blocks gives one block of each part (possibly empty), of the
// same action; the two parts add up to blocks exactly (the counts of a
// table are below 2^53).
func SplitCounts(blocks []*factor.Block, frac float64, seed uint64) (train, val []*factor.Block) {
	train = make([]*factor.Block, len(blocks))
	val = make([]*factor.Block, len(blocks))
	for k, b := range blocks {
		// The validation parts first, then both parts at their sizes.
		held := make([]float64, len(b.Vals))
		nt, nv := 0, 0
		for r, i := range b.Rows {
			for q := b.Ptr[r]; q < b.Ptr[r+1]; q++ {
				t, v := splitCount(b.Vals[q], frac, seed, b.Action, i, b.Cols[q])
				held[q] = v
				if t > 0 {
					nt++
				}
				if v > 0 {
					nv++
				}
			}
		}
		tr, vr := newEntries(nt), newEntries(nv)
		for r, i := range b.Rows {
			for q := b.Ptr[r]; q < b.Ptr[r+1]; q++ {
				v := held[q]
				tr.add(i, b.Cols[q], b.Vals[q]-v)
				vr.add(i, b.Cols[q], v)
			}
		}
		train[k], val[k] = tr.block(b.Action), vr.block(b.Action)
	}
	return train, val
}

// SplitUnitsMax is the largest count whose units SplitCounts draws one
// by one.
const SplitUnitsMax = 64

// splitBinomialMax is the largest count whose share splitUnits draws from
// the binomial; a larger count gives the binomial's mean.
const splitBinomialMax = 1 << 50

// entries collects the nonzeros of one part of a block, in the block's
// (row, column) order.
type entries struct {
	rows, cols []int32
	vals       []float64
}

func newEntries(n int) entries {
	return entries{make([]int32, 0, n), make([]int32, 0, n), make([]float64, 0, n)}
}

func (e *entries) add(i, j int32, c float64) {
	if c > 0 {
		e.rows, e.cols, e.vals = append(e.rows, i), append(e.cols, j), append(e.vals, c)
	}
}

func (e *entries) block(a int) *factor.Block {
	b, err := factor.NewBlock(a, e.rows, e.cols, e.vals)
	if err != nil {
		// The entries of a valid block, in its order, with parts of its
		// positive counts: nothing NewBlock refuses.
		panic("shard: SplitCounts: " + err.Error())
	}
	return b
}

// splitCount cuts count c of entry (i, a, j) into its training and
// validation parts (SplitCounts).
func splitCount(c, frac float64, seed uint64, a int, i, j int32) (train, val float64) {
	var pcg rand.PCG // on the stack: a table has millions of entries
	pcg.Seed(seed, entryKey(a, i, j))
	val = splitUnits(c, frac, &pcg)
	return c - val, val
}

// splitUnits draws the part of count c that goes to a split of fraction
// frac from src: unit by unit up to SplitUnitsMax whole units, else the
// binomial at once, then the fractional part as one more unit. The part
// is a whole number of units (and the fraction), so c minus it is exact.
func splitUnits(c, frac float64, src *rand.PCG) float64 {
	whole := math.Floor(c)
	var part float64 // the split's units among the whole ones
	if whole <= SplitUnitsMax {
		for range int(whole) {
			if unit(src) < frac {
				part++
			}
		}
	} else if whole <= splitBinomialMax {
		big := *src // a copy only here, where it escapes
		part = min(distuv.Binomial{N: whole, P: frac, Src: &big}.Rand(), whole)
	} else {
		// Beyond, the binomial's spread is below a part in 10^7 of its
		// mean, and its sampler, in float64, may never end (a count of
		// 1e300 is a count): the mean, in whole units.
		part = min(math.Round(whole*frac), whole)
	}
	if rest := c - whole; rest > 0 && unit(src) < frac {
		part += rest
	}
	return part
}

// SplitRow is the part of a row's count c that goes to a split of
// fraction frac (emsf fit's --holdout and --validation, the distributed
// ingest's holdout), given the row's one draw x from the split's stream:
// one draw a row whatever its count, so that the split of a file's rows
// can start its stream at any row (factor.PCGAt). A count of at most one
// unit goes whole, when x is below frac as a draw in [0, 1) (a row of
// unit count goes as it always went: a file of such rows splits as
// before); a larger count is cut unit by unit, from a stream seeded by x,
// as SplitCounts cuts an entry: a row of count 7 splits as 7 rows of
// count 1 would, not whole (a file of counts held out whole rows, each a
// pair the training part never saw, and chose the rule for unseen pairs:
// docs/quality.md, round 9). A count that is not one (not finite and
// > 0) goes to no split: 0, for the caller's check to refuse.
func SplitRow(c, frac float64, x uint64) float64 {
	if !(c > 0 && c <= math.MaxFloat64) {
		return 0
	}
	if c <= 1 {
		if toUnit(x) < frac {
			return c
		}
		return 0
	}
	var pcg rand.PCG
	pcg.Seed(x, rowUnitsSeed)
	return splitUnits(c, frac, &pcg)
}

// SplitRowSets cuts a row's count c between training, the holdout and
// the validation split, as emsf fit's read and the distributed ingest
// draw them: the holdout's part first (SplitRow with one draw of hold,
// when holdout > 0), then the validation's part of the rest (one draw of
// val, when validation > 0 and something is left); the rest trains. The
// parts add up to c exactly. hold and val may be nil where their
// fraction is 0.
func SplitRowSets(c, holdout float64, hold *rand.PCG, validation float64, val *rand.PCG) (train, held, valid float64) {
	if holdout > 0 {
		held = SplitRow(c, holdout, hold.Uint64())
	}
	if rest := c - held; validation > 0 && rest > 0 {
		valid = SplitRow(rest, validation, val.Uint64())
	}
	return c - held - valid, held, valid
}

// rowUnitsSeed is the second word of a row's units stream (SplitRow).
const rowUnitsSeed = 0x756e697473 // "units"

// unit is a draw in [0, 1) from src (53 random bits: rand.Float64's).
func unit(src *rand.PCG) float64 { return toUnit(src.Uint64()) }

// toUnit is the draw in [0, 1) that rand.Float64 makes of x.
func toUnit(x uint64) float64 { return float64(x<<11>>11) / (1 << 53) }

// entryKey mixes an entry's indices into the second word of its
// stream's seed (splitmix64's finalizer on each step).
func entryKey(a int, i, j int32) uint64 {
	mix := func(x uint64) uint64 {
		x ^= x >> 30
		x *= 0xbf58476d1ce4e5b9
		x ^= x >> 27
		x *= 0x94d049bb133111eb
		return x ^ x>>31
	}
	return mix(mix(mix(uint64(uint32(a)))^uint64(uint32(i))) ^ uint64(uint32(j)))
}
