package factor

import (
	"math"
	"math/bits"
)

// Footprint estimates, from the shape of a fit alone, the bytes that its
// model and statistics take: what a caller checks against a limit before
// anything of that size is allocated (a stray index of 7 405 599 in a
// two-row file asks for a model of 7.4M states: refused with an error,
// not an out-of-memory crash). Each method counts the arrays that
// algorithm allocates (factors, accumulators, dense rows, vectors of n),
// not its input's CSR nor the runtime; every product saturates at
// math.MaxInt64, so that no shape overflows into a small number.
type Footprint struct {
	N, M, U int
	Tie     Tie
	// Float32: a Float32 model also keeps a float32 copy of K.
	Float32 bool
	// NNZ is the number of nonzeros of the counted data (0: unknown).
	NNZ int64
	// GroupNNZ is the fit's reduction groups' target (0: DefaultGroupNNZ).
	GroupNNZ int
	// Seen is the number of rows with data of each action (KLM and MU
	// under the KL loss make the other rows dense: n entries each); nil
	// counts every row as seen.
	Seen []int
	// What a batch EMSF fit keeps beside its model (EMSF): Squarem, the
	// three iterates of SQUAREM's cycle (x0, x1, x2: a model each) and,
	// under a Dirichlet prior, the logarithms of two iterates (of D with
	// PriorD, of K with PriorK); PriorK, the prior's next-state
	// frequencies (n per K block); EarlyStop, the best model so far
	// (EarlyStop: --stop validation).
	Squarem, PriorD, PriorK, EarlyStop bool
}

// ModelBytes is the size of a model's factors: 8·n·m per D block and per
// K block. It is the one estimate of a model's size (emsf serve's
// --max-model-bytes bounds it; Footprint builds on it).
func ModelBytes(n, m, u int, tie Tie) int64 {
	return mulSat(8, int64(n), int64(m), int64(NumD(u, tie)+NumK(u, tie)))
}

// Model is ModelBytes of the footprint's shape.
func (f Footprint) Model() int64 { return ModelBytes(f.N, f.M, f.U, f.Tie) }

// vectors is k vectors of n float64s per action.
func (f Footprint) vectors(k int) int64 { return mulSat(8, int64(k), int64(f.N), int64(max(f.U, 1))) }

// EMSF is a batch EMSF fit (factor.Fit, Passer): the model, its
// accumulator (D̂, K̂ and x: about a second model), the reduction tree's
// pending K̂ buffers (log2 G per K block, G groups of GroupNNZ nonzeros),
// the float32 copy of K, with restarts > 1 the best model kept beside
// the one being fitted, and what SQUAREM, the prior and the early stop
// keep (Squarem, PriorD, PriorK, EarlyStop).
func (f Footprint) EMSF(restarts int) int64 {
	model := f.Model()
	k := mulSat(8, int64(f.N), int64(f.M), int64(NumK(f.U, f.Tie)))
	d := mulSat(8, int64(f.N), int64(f.M), int64(NumD(f.U, f.Tie)))
	// A copy of the model: its float32 K too.
	copyBytes := model
	if f.Float32 {
		copyBytes = addSat(copyBytes, k/2)
	}
	total := addSat(model, model, f.vectors(1))
	if g := f.groups(); g > 1 {
		total = addSat(total, mulSat(k, int64(bits.Len(uint(g-1)))))
	}
	if f.Float32 {
		total = addSat(total, k/2)
	}
	if restarts > 1 {
		total = addSat(total, model)
	}
	if f.Squarem {
		total = addSat(total, mulSat(3, copyBytes))
		if f.PriorD {
			total = addSat(total, mulSat(2, d))
		}
		if f.PriorK {
			total = addSat(total, mulSat(2, k))
		}
	}
	if f.PriorK {
		total = addSat(total, mulSat(8, int64(f.N), int64(NumK(f.U, f.Tie))))
	}
	if f.EarlyStop {
		total = addSat(total, copyBytes)
	}
	return total
}

// groups is the number of reduction groups of the largest K block (the
// whole data when actions share nothing is known: NNZ over all).
func (f Footprint) groups() int {
	gnnz := int64(f.GroupNNZ)
	if gnnz < 1 {
		gnnz = DefaultGroupNNZ
	}
	want := (f.NNZ + gnnz - 1) / gnnz
	if want <= 1 {
		return 1
	}
	return min(1<<bits.Len64(uint64(want-1)), MaxGroups)
}

// Incremental is incremental EMSF: the model, its accumulator and the
// buffer of etaMax nonzeros (index, entry: ≈ 48 bytes each).
func (f Footprint) Incremental(etaMax int) int64 {
	model := f.Model()
	return addSat(model, model, f.vectors(1), mulSat(48, int64(max(etaMax, 0))))
}

// OnlineEM is online EM: the model and its sufficient statistics (one
// n×m array per D and K block, and the row sums).
func (f Footprint) OnlineEM() int64 {
	model := f.Model()
	return addSat(model, model, f.vectors(1))
}

// MU is the multiplicative updates under loss: the model and an
// accumulator or, under the Frobenius losses, the four n×m arrays of a
// step and five vectors of n per action; under the KL loss the rows of P̂
// without data are dense (n entries of 12 bytes).
func (f Footprint) MU(loss MULoss) int64 {
	model := f.Model()
	total := addSat(model, model, f.vectors(6))
	switch loss {
	case LossKL:
		total = addSat(total, f.dense())
	case LossFrob, LossWFrob:
		total = addSat(total, mulSat(4*8, int64(f.N), int64(f.M)), f.vectors(5), mulSat(24, f.NNZ))
	}
	return total
}

// KLM is the KLM baseline: the model, one n×m scratch array, and P̂ of
// every action, whose rows without data are dense (n entries of 12 bytes).
func (f Footprint) KLM() int64 {
	return addSat(f.Model(), mulSat(8, int64(f.N), int64(f.M)), f.vectors(2), f.dense())
}

// CNT is the counting estimate: per action, row pointers and row totals
// (two vectors of n) beside the counts.
func (f Footprint) CNT() int64 {
	return addSat(f.vectors(2), mulSat(12, f.NNZ))
}

// dense is the bytes of P̂'s rows without data over all actions, 12 per
// entry, n entries each (an action beyond Seen counts as seen).
func (f Footprint) dense() int64 {
	var unseen int64
	for _, seen := range f.Seen[:min(len(f.Seen), f.U)] {
		unseen += int64(f.N - min(max(seen, 0), f.N))
	}
	return mulSat(12, unseen, int64(f.N))
}

// mulSat is the product of non-negative xs, math.MaxInt64 when it
// overflows.
func mulSat(xs ...int64) int64 {
	p := int64(1)
	for _, x := range xs {
		if x <= 0 {
			return 0
		}
		hi, lo := bits.Mul64(uint64(p), uint64(x))
		if hi != 0 || lo > math.MaxInt64 {
			return math.MaxInt64
		}
		p = int64(lo)
	}
	return p
}

// addSat is the sum of non-negative xs, math.MaxInt64 when it overflows.
func addSat(xs ...int64) int64 {
	var s int64
	for _, x := range xs {
		if s > math.MaxInt64-x {
			return math.MaxInt64
		}
		s += x
	}
	return s
}
