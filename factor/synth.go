package factor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"gonum.org/v1/gonum/stat/distuv"
)

// Row distributions of TrueModel.
const (
	// RowsDirichlet draws every row of D' and K' from a symmetric Dirichlet
	// distribution (incremental-emsf Figs. 2 and 3 use concentration 0.5).
	RowsDirichlet = "dirichlet"
	// RowsUniform draws every entry uniformly from [0, 1) and normalises
	// the rows (emsf-ijcai2015 Fig. 2).
	RowsUniform = "uniform"
	// RowsLocal is an MDP of local dynamics: the states lie on a ring cut
	// into mTrue arcs, hidden state l stands for arc l, D'_i splits its
	// mass between the two arcs nearest to i (by distance to their
	// centres) and K'_l spreads over a window of 2n/mTrue states around
	// arc l, with exponentially distributed weights (some next states more
	// visited than others, as in logged data). Next states are near the
	// state left, and a fitted D row puts its mass on a few hidden states:
	// the structured data of the top-k benchmark (spec ask-the-model §1).
	RowsLocal = "local"
)

// TrueModel returns a random "true" factorization P^a = D'^a K'^a with n
// states, mTrue hidden states and u actions (TieNone): the synthetic MDPs
// of the papers' experiments. rows is RowsDirichlet (with concentration
// conc > 0) or RowsUniform (conc is ignored). All randomness comes from
// rng, in a fixed order, so a seeded rng gives the same model everywhere.
func TrueModel(n, mTrue, u int, rows string, conc float64, rng *rand.Rand) (*Model, error) {
	if n < 1 || mTrue < 1 || u < 1 {
		return nil, fmt.Errorf("factor: bad true model shape n=%d m=%d u=%d", n, mTrue, u)
	}
	var draw func(dst []float64)
	switch rows {
	case RowsDirichlet:
		if !(conc > 0) || math.IsInf(conc, 0) {
			return nil, fmt.Errorf("factor: Dirichlet concentration %v must be finite and > 0", conc)
		}
		draw = func(dst []float64) { Dirichlet(dst, conc, rng) }
	case RowsUniform:
		draw = func(dst []float64) { uniformRow(dst, rng) }
	case RowsLocal:
		return localModel(n, mTrue, u, rng), nil
	default:
		return nil, fmt.Errorf("factor: unknown row distribution %q (want %s, %s or %s)", rows, RowsDirichlet, RowsUniform, RowsLocal)
	}
	md := NewModel(n, mTrue, u, TieNone)
	for a := range u {
		d := md.D[a]
		for i := 0; i < n; i++ {
			draw(d[i*mTrue : (i+1)*mTrue])
		}
		// Rows of K are columns of KT: draw each row contiguously, then
		// scatter it.
		row := make([]float64, n)
		kt := md.KT[a]
		for l := 0; l < mTrue; l++ {
			draw(row)
			for j, v := range row {
				kt[j*mTrue+l] = v
			}
		}
	}
	return md, nil
}

// localModel is TrueModel's RowsLocal.
func localModel(n, m, u int, rng *rand.Rand) *Model {
	md := NewModel(n, m, u, TieNone)
	arc := float64(n) / float64(m)
	width := max(1, 2*n/m)
	row := make([]float64, n)
	for a := range u {
		d, kt := md.D[a], md.KT[a]
		for i := range n {
			// Position in arcs, measured from the first arc's centre.
			x := (float64(i)+0.5)/arc - 0.5
			l0 := int(math.Floor(x))
			f := x - float64(l0)
			r := d[i*m : (i+1)*m]
			r[((l0%m)+m)%m] += 1 - f
			r[(((l0+1)%m)+m)%m] += f
		}
		for l := range m {
			clear(row)
			lo := int(float64(l)*arc+arc/2) - width/2
			for x := range width {
				row[((lo+x)%n+n)%n] = rng.ExpFloat64()
			}
			s := 0.0
			for _, v := range row {
				s += v
			}
			for j, v := range row {
				kt[j*m+l] = v / s
			}
		}
	}
	return md
}

func uniformRow(dst []float64, rng *rand.Rand) {
	for {
		s := 0.0
		for k := range dst {
			dst[k] = rng.Float64()
			s += dst[k]
		}
		if s > 0 {
			for k := range dst {
				dst[k] /= s
			}
			return
		}
	}
}

// Dirichlet fills dst with a draw from the symmetric Dirichlet distribution
// of concentration conc > 0: independent Gamma(conc, 1) variates,
// normalised. The gamma variates are gonum's distuv.Gamma (Marsaglia-Tsang,
// with the log-space method of Liu, Martin and Syring for conc < 0.2),
// which takes a math/rand/v2 Source, so rng is used directly. When conc is
// so small that every variate underflows to zero, the draw is the limit
// distribution: all mass on one entry chosen uniformly.
func Dirichlet(dst []float64, conc float64, rng *rand.Rand) {
	if !(conc > 0) {
		panic(fmt.Sprintf("factor: Dirichlet concentration %v must be > 0", conc))
	}
	if len(dst) == 0 {
		return
	}
	g := distuv.Gamma{Alpha: conc, Beta: 1, Src: rng}
	s := 0.0
	for k := range dst {
		dst[k] = g.Rand()
		s += dst[k]
	}
	if !(s > 0) {
		clear(dst)
		dst[rng.IntN(len(dst))] = 1
		return
	}
	for k := range dst {
		dst[k] /= s
	}
}

// Sampling modes of Sample.
const (
	// SampleUniform draws the state uniformly from all n states and the
	// action uniformly (incremental-emsf §5, first regime).
	SampleUniform = "uniform"
	// SampleSkewed puts SkewMass (0.9) of the state distribution on a
	// random SkewFrac (50%) of the states, uniformly within each part;
	// actions uniform (incremental-emsf §5, second regime).
	SampleSkewed = "skewed"
	// SampleTrajectory follows the chain: a uniform random start, actions
	// uniform, each next state the start of the next step, a new episode
	// every EpisodeLen transitions (incremental-emsf Fig. 3 samples
	// "through direct interaction with P").
	SampleTrajectory = "trajectory"
)

// SampleOptions configures Sample.
type SampleOptions struct {
	// Mode is SampleUniform, SampleSkewed or SampleTrajectory.
	Mode string
	// EpisodeLen is the number of transitions per episode in trajectory
	// mode; 0 means 100.
	EpisodeLen int
	// SkewMass is the share of the state distribution on the favoured
	// states in skewed mode; 0 means 0.9.
	SkewMass float64
	// SkewFrac is the share of states favoured in skewed mode; 0 means 0.5.
	SkewFrac float64
}

// Transition is one sampled transition State --Action--> Next. In
// trajectory mode Episode numbers the episode (from 0) and Step the
// transition within it (from 0), so consecutive steps chain
// (Next of step t is State of step t+1). In the other modes every
// transition is an episode of its own: Episode is its index, Step 0.
type Transition struct {
	State, Action, Next int
	Episode, Step       int
}

// Sampler draws next states from the rows of P^a = D^a K^a of a model
// without forming P: first a hidden state l from row i of D^a, then the
// next state from row l of K^a, each by binary search in precomputed
// cumulative sums (O(log m) + O(log n) per draw, n·m words per block). It
// is read-only after NewSampler and safe for concurrent use.
type Sampler struct {
	md *Model
	// dc[b][i*m+l] = Σ_{l'≤l} D_b[i,l'];  kc[b][l*n+j] = Σ_{j'≤j} K_b[l,j'].
	dc, kc [][]float64
}

// NewSampler precomputes the cumulative sums of md's rows. md must be a
// valid model (non-negative, rows summing to one); it is not copied.
func NewSampler(md *Model) *Sampler {
	n, m := md.N, md.M
	s := &Sampler{md: md}
	for _, d := range md.D {
		c := make([]float64, n*m)
		for i := 0; i < n; i++ {
			acc := 0.0
			for l := 0; l < m; l++ {
				acc += d[i*m+l]
				c[i*m+l] = acc
			}
		}
		s.dc = append(s.dc, c)
	}
	for _, kt := range md.KT {
		c := make([]float64, m*n)
		for l := 0; l < m; l++ {
			acc := 0.0
			for j := 0; j < n; j++ {
				acc += kt[j*m+l]
				c[l*n+j] = acc
			}
		}
		s.kc = append(s.kc, c)
	}
	return s
}

// Next draws a next state j with probability (D^a K^a)_ij.
func (s *Sampler) Next(i, a int, rng *rand.Rand) int {
	md := s.md
	n, m := md.N, md.M
	l := drawCum(s.dc[md.DBlock(a)][i*m:(i+1)*m], rng)
	return drawCum(s.kc[md.KBlock(a)][l*n:(l+1)*n], rng)
}

// drawCum returns the first index k with cum[k] > r·cum[last], r uniform
// in [0, 1): index k with probability (cum[k]-cum[k-1])/cum[last]. Entries
// of probability zero are never drawn (their cum equals the previous one).
func drawCum(cum []float64, rng *rand.Rand) int {
	r := rng.Float64() * cum[len(cum)-1]
	k, _ := slices.BinarySearchFunc(cum, r, func(c, t float64) int {
		if c <= t {
			return -1
		}
		return 1
	})
	if k == len(cum) { // r rounded up to cum[last]: take the last positive entry
		k--
		for k > 0 && cum[k] == cum[k-1] {
			k--
		}
	}
	return k
}

// Sample draws count transitions from truth as opts.Mode says and calls fn
// for each, in order. All randomness comes from rng (states, actions, next
// states, the favoured states of skewed mode), so a seeded rng gives the
// same sequence everywhere.
func Sample(truth *Model, count int, opts SampleOptions, rng *rand.Rand, fn func(Transition)) error {
	if count < 0 {
		return fmt.Errorf("factor: sample count %d must be >= 0", count)
	}
	n, u := truth.N, truth.U
	smp := NewSampler(truth)
	switch opts.Mode {
	case SampleUniform:
		for k := range count {
			i, a := rng.IntN(n), rng.IntN(u)
			fn(Transition{State: i, Action: a, Next: smp.Next(i, a, rng), Episode: k})
		}
	case SampleSkewed:
		mass, frac := opts.SkewMass, opts.SkewFrac
		if mass == 0 {
			mass = 0.9
		}
		if frac == 0 {
			frac = 0.5
		}
		if !(mass >= 0 && mass <= 1) || !(frac > 0 && frac <= 1) {
			return fmt.Errorf("factor: skewed sampling needs mass in [0, 1] and fraction in (0, 1], have %v and %v", mass, frac)
		}
		perm := rng.Perm(n)
		h := min(n, max(1, int(math.Round(frac*float64(n)))))
		hot, cold := perm[:h], perm[h:]
		for k := range count {
			var i int
			if len(cold) == 0 || rng.Float64() < mass {
				i = hot[rng.IntN(len(hot))]
			} else {
				i = cold[rng.IntN(len(cold))]
			}
			a := rng.IntN(u)
			fn(Transition{State: i, Action: a, Next: smp.Next(i, a, rng), Episode: k})
		}
	case SampleTrajectory:
		L := opts.EpisodeLen
		if L == 0 {
			L = 100
		}
		if L < 1 {
			return fmt.Errorf("factor: episode length %d must be >= 1", L)
		}
		var i int
		for k := range count {
			step := k % L
			if step == 0 {
				i = rng.IntN(n)
			}
			a := rng.IntN(u)
			j := smp.Next(i, a, rng)
			fn(Transition{State: i, Action: a, Next: j, Episode: k / L, Step: step})
			i = j
		}
	default:
		return fmt.Errorf("factor: unknown sampling mode %q (want %s, %s or %s)", opts.Mode, SampleUniform, SampleSkewed, SampleTrajectory)
	}
	return nil
}

// SampleEpisodes draws count transitions in trajectory mode (episodes of
// episodeLen transitions, the last one possibly shorter) and returns them
// as episodes, e.g. for ReferenceIteration.
func SampleEpisodes(truth *Model, count, episodeLen int, rng *rand.Rand) ([]Episode, error) {
	var eps []Episode
	err := Sample(truth, count, SampleOptions{Mode: SampleTrajectory, EpisodeLen: episodeLen}, rng, func(t Transition) {
		if t.Step == 0 {
			eps = append(eps, Episode{States: []int{t.State}})
		}
		e := &eps[len(eps)-1]
		e.Actions = append(e.Actions, t.Action)
		e.States = append(e.States, t.Next)
	})
	return eps, err
}

// EpisodeBlocks counts the transitions of episodes into one Block per
// action (u blocks; an action without data gives an empty block): the
// count matrices C^a the simplified EMSF works on. Duplicate transitions
// are summed.
func EpisodeBlocks(episodes []Episode, n, u int) ([]*Block, error) {
	var t Tally
	for e, ep := range episodes {
		if err := checkEpisode(ep, n, u); err != nil {
			return nil, fmt.Errorf("factor: episode %d: %w", e, err)
		}
		for s, a := range ep.Actions {
			if err := t.Add(ep.States[s], a, ep.States[s+1], 1); err != nil {
				return nil, fmt.Errorf("factor: episode %d: %w", e, err)
			}
		}
	}
	return t.Blocks(u)
}
