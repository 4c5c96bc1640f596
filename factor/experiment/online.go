package experiment

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/mat"

	"github.com/emsf/emsf/factor"
)

// OnlineRecord is KL_ρ(P ‖ DK) of one run of one (t_c, α) setting after
// some transitions of the stream: a row of online.csv.
type OnlineRecord struct {
	Run         int
	Seed        uint64
	CommitEvery int
	Alpha       float64
	Transitions int
	Commits     int
	KLRho       float64
}

// OnlineSetting is one curve: commit every t_c transitions with learning
// rate α.
type OnlineSetting struct {
	CommitEvery int
	Alpha       float64
}

// Label names the setting in a legend.
func (s OnlineSetting) Label() string {
	return fmt.Sprintf("commit every %d, α = %g", s.CommitEvery, s.Alpha)
}

// The true P of Online: OnlineStates states, every row from
// Dirichlet(OnlineConc).
const (
	OnlineStates = 100
	OnlineConc   = 0.5
)

// Online is incremental-emsf Fig. 3: the online behaviour of incremental
// EMSF (Algorithm 1, factor.Incremental). For each run r (seed Seed + r):
// a true P (OnlineStates states, every row drawn from Dirichlet(0.5): full
// rank, not a factorization) and ρ its stationary distribution; one
// trajectory that follows P from a uniform start ("transitions sampled
// through direct interaction with P", i.e. under ρ); and for each setting
// (t_c, α) an incremental EMSF fit of order M from the run's random start,
// fed the trajectory one transition at a time, committing every t_c
// transitions with learning rate α. KL_ρ(P ‖ DK) (incremental-emsf eq. 12)
// of the committed model is recorded after each number of transitions in
// Sizes (increasing). Every setting of a run sees the same trajectory and
// starts from the same model.
//
// With α = 1 a commit replaces K by the statistics of the last t_c
// transitions only, so (DK)_ij = 0 for every next state j not seen in
// that window and KL_ρ = +Inf: small t_c needs α < 1 (the paper's point
// that larger t_c affords larger α). Such points are rows with +Inf.
//
// Job k is run k / len(Settings), setting Settings[k % len(Settings)].
type Online struct {
	M        int
	Settings []OnlineSetting
	Sizes    []int
	Seed     uint64
}

// Jobs returns the number of jobs of runs runs.
func (x *Online) Jobs(runs int) int { return runs * len(x.Settings) }

// Rows returns the number of rows of a job: one per size.
func (x *Online) Rows() int { return len(x.Sizes) }

// Run runs job k.
func (x *Online) Run(ctx context.Context, k int) ([]OnlineRecord, error) {
	r, st := k/len(x.Settings), x.Settings[k%len(x.Settings)]
	seed := x.Seed + uint64(r)
	out := make([]OnlineRecord, len(x.Sizes))
	if err := x.run(ctx, x.M, st, seed, x.Sizes, out); err != nil {
		return nil, fmt.Errorf("run %d (seed %d), %s: %w", r, seed, st.Label(), err)
	}
	for q := range out {
		out[q].Run = r
	}
	return out, nil
}

// run is one run of one setting: it fills out[q] with KL_ρ after
// sizes[q] transitions.
func (x *Online) run(ctx context.Context, m int, st OnlineSetting, seed uint64, sizes []int, out []OnlineRecord) error {
	n := OnlineStates
	chain, truth, rho, err := OnlineTruth(n, OnlineConc, rand.New(rand.NewPCG(seed, 1)))
	if err != nil {
		return err
	}
	md := factor.NewRandom(n, m, 1, factor.TieNone, seed)
	inc, err := factor.NewIncremental(md, factor.IncrementalOptions{CommitEvery: float64(st.CommitEvery), Alpha: st.Alpha})
	if err != nil {
		return err
	}
	klAt := func(q int) OnlineRecord {
		return OnlineRecord{Seed: seed, CommitEvery: st.CommitEvery, Alpha: st.Alpha, Transitions: sizes[q],
			Commits: inc.Stats().Commits, KLRho: factor.KLRho(truth, md, rho)}
	}
	// Some (DK)_ij can reach 0 (with α = 1 a commit zeroes what its window
	// does not show; with α < 1 entries stop at factor.EntryFloor) and then
	// i → j is observed: EM cannot go on. P_ij > 0, so KL_ρ(P ‖ DK) is +Inf
	// from there on; the remaining points say so.
	infAt := func(q int) OnlineRecord {
		return OnlineRecord{Seed: seed, CommitEvery: st.CommitEvery, Alpha: st.Alpha, Transitions: sizes[q],
			Commits: inc.Stats().Commits, KLRho: math.Inf(1)}
	}
	return streamTrajectory(ctx, chain, seed, sizes, inc.Add, func(q int) { out[q] = klAt(q) }, func(q int) { out[q] = infAt(q) })
}

// streamTrajectory feeds one trajectory of sizes[len(sizes)-1] steps of
// chain (seeded by seed) to add, calling at(q) once sizes[q] transitions
// are in. When add fails with a factor.TransitionError (a transition the
// model gives probability 0: EM cannot go on) it calls inf(q) for every
// point not reached and returns nil; any other error is returned.
func streamTrajectory(ctx context.Context, chain *factor.Model, seed uint64, sizes []int,
	add func(i, a, j int, c float64) error, at, inf func(q int)) error {
	total := sizes[len(sizes)-1]
	seen, q := 0, 0
	var addErr error
	// One trajectory of total steps: EpisodeLen = total never restarts it.
	err := factor.Sample(chain, total, factor.SampleOptions{Mode: factor.SampleTrajectory, EpisodeLen: total},
		rand.New(rand.NewPCG(seed, 2)), func(t factor.Transition) {
			if addErr != nil {
				return
			}
			if addErr = add(t.State, t.Action, t.Next, 1); addErr != nil {
				return
			}
			seen++
			if seen == sizes[q] {
				if addErr = ctx.Err(); addErr != nil {
					return
				}
				at(q)
				q++
			}
		})
	if err != nil {
		return err
	}
	var te *factor.TransitionError
	if errors.As(addErr, &te) {
		for ; q < len(sizes); q++ {
			inf(q)
		}
		return nil
	}
	return addErr
}

// OnlineTruth draws the true P of incremental-emsf Fig. 3: n×n, each row
// from Dirichlet(conc). It returns P twice, as a Model to sample from (D
// the identity, K = P, so the hidden state is the state itself) and as a
// Dense for KL_ρ, and ρ, the stationary distribution of P.
func OnlineTruth(n int, conc float64, rng *rand.Rand) (*factor.Model, *factor.Dense, []float64, error) {
	p := make([]float64, n*n)
	for i := range n {
		factor.Dirichlet(p[i*n:(i+1)*n], conc, rng)
	}
	rho, err := factor.StationaryOf(mat.NewDense(n, n, p))
	if err != nil {
		return nil, nil, nil, err
	}
	chain := factor.NewModel(n, n, 1, factor.TieNone)
	d, kt := chain.D[0], chain.KT[0]
	for i := range n {
		d[i*n+i] = 1
		for j := range n {
			kt[j*n+i] = p[i*n+j] // KT is K transposed: KT[j, l] = K[l, j] = P[l, j]
		}
	}
	return chain, &factor.Dense{N: n, P: [][]float64{p}}, rho, nil
}
