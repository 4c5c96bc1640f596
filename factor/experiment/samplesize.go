package experiment

import (
	"context"
	"math/rand/v2"

	"github.com/emsf/emsf/factor"
)

// SampleSize is emsf-ijcai2015 Fig. 2: P = DK with D n×TrueOrder and K
// TrueOrder×n, entries uniform then rows normalised (factor.RowsUniform);
// for each run a new P, and for each sample size τ a new uniform sample
// (start state and action uniform); ‖P − P̃‖_F for EMSF of each order and
// CNT. Job k is run k / len(Sizes) (seed Seed + run) at size
// Sizes[k % len(Sizes)].
type SampleSize struct {
	States, TrueOrder int
	Orders, Sizes     []int
	Seed              uint64
	Converger         factor.Converger
}

// Jobs returns the number of jobs of runs runs.
func (x *SampleSize) Jobs(runs int) int { return runs * len(x.Sizes) }

// Rows returns the number of rows of a job: one per order and CNT's.
func (x *SampleSize) Rows() int { return len(x.Orders) + 1 }

// Run runs job k.
func (x *SampleSize) Run(ctx context.Context, k int) ([]Record, error) {
	r, si := k/len(x.Sizes), k%len(x.Sizes)
	seed, size, n := x.Seed+uint64(r), x.Sizes[si], x.States
	truth, err := factor.TrueModel(n, x.TrueOrder, 1, factor.RowsUniform, 0, rand.New(rand.NewPCG(seed, 1)))
	if err != nil {
		return nil, err
	}
	blocks, _, err := SampleBlocks(truth, size, factor.SampleUniform, rand.New(rand.NewPCG(seed, 2+uint64(si))))
	if err != nil {
		return nil, err
	}
	out := make([]Record, 0, x.Rows())
	for _, m := range x.Orders {
		md, err := FitEMSF(ctx, n, m, 1, blocks, seed, x.Converger)
		if err != nil {
			return nil, err
		}
		out = append(out, Record{"uniform", "EMSF", m, size, seed, "frobenius", factor.FrobeniusError(truth, md)})
	}
	cnt, err := factor.NewCNT(n, 1, blocks, 0)
	if err != nil {
		return nil, err
	}
	return append(out, Record{"uniform", "CNT", 0, size, seed, "frobenius", factor.FrobeniusError(truth, cnt)}), nil
}
