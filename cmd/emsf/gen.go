package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"strconv"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
)

// genFlags are the flags of emsf gen.
type genFlags struct {
	states, order, actions int
	rows                   string
	conc                   float64
	sampling               string
	transitions            int
	episodeLen             int
	seed                   uint64
	stringIDs              bool
	out, truth             string
}

func (g *genFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&g.states, "states", 100, "number of states n")
	fs.IntVar(&g.order, "true-order", 20, "order m' of the true factorization P^a = D'^a K'^a")
	fs.IntVar(&g.actions, "actions", 1, "number of actions u")
	fs.StringVar(&g.rows, "rows", "uniform", "how rows of D' and K' are drawn: uniform (entries uniform, then normalised), dirichlet, or local (states on a ring, each hidden state an arc of it: next states are near the state left, as in a local MDP)")
	fs.Float64Var(&g.conc, "conc", 0.5, "Dirichlet concentration for --rows dirichlet")
	fs.StringVar(&g.sampling, "sampling", "uniform", "how start states are drawn: uniform, skewed (90% of the mass on 50% of the states) or trajectory (follow the chain)")
	fs.IntVar(&g.transitions, "transitions", 2000, "number of transitions to sample")
	fs.IntVar(&g.episodeLen, "episode-len", 100, "episode length for --sampling trajectory")
	fs.Uint64Var(&g.seed, "seed", 1, "random seed")
	fs.BoolVar(&g.stringIDs, "string-ids", false, "name states s0001, s0002, ... and actions a1, a2, ... (zero-padded, so that their sorted order is the index order) instead of integers; the true model carries the same ids")
}

func (g *genFlags) validate() error {
	switch {
	case g.states < 1:
		return usagef("--states %d: must be >= 1", g.states)
	case g.order < 1 || g.order > g.states:
		return usagef("--true-order %d: must be in [1, --states=%d]", g.order, g.states)
	case g.actions < 1:
		return usagef("--actions %d: must be >= 1", g.actions)
	case g.rows != "uniform" && g.rows != "dirichlet" && g.rows != "local":
		return usagef("--rows %q: want uniform, dirichlet or local", g.rows)
	case !(g.conc > 0):
		return usagef("--conc %v: must be > 0", g.conc)
	case g.sampling != "uniform" && g.sampling != "skewed" && g.sampling != "trajectory":
		return usagef("--sampling %q: want uniform, skewed or trajectory", g.sampling)
	case g.transitions < 1:
		return usagef("--transitions %d: must be >= 1", g.transitions)
	case g.episodeLen < 1:
		return usagef("--episode-len %d: must be >= 1", g.episodeLen)
	}
	return nil
}

func runGen(ctx context.Context, e *env, args []string) error {
	var g genFlags
	fs := newFlagSet(e, "gen", "gen --out transitions.csv --truth truth.arrow [flags]")
	g.register(fs)
	fs.StringVar(&g.out, "out", "transitions.csv", "where to write the transitions (.csv, .arrow or .parquet)")
	fs.StringVar(&g.truth, "truth", "truth.arrow", "where to write the true model D'K' (empty: do not write)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := g.validate(); err != nil {
		return err
	}
	if arrowio.FormatFromPath(g.out) == "" {
		return usagef("--out %q: the extension must be .csv, .arrow or .parquet", g.out)
	}
	truth, err := g.generate(ctx, g.out)
	if err != nil {
		return err
	}
	if g.truth != "" {
		mf := &arrowio.ModelFile{Model: truth, Params: g.params()}
		if g.stringIDs {
			mf.States, mf.Actions = g.vocabs()
		}
		if err := arrowio.WriteModel(g.truth, mf, "arrow"); err != nil {
			return err
		}
	}
	fmt.Fprintf(e.stdout, "wrote %d transitions of an MDP with n=%d states, u=%d actions, true order %d to %s\n",
		g.transitions, g.states, g.actions, g.order, g.out)
	if g.truth != "" {
		fmt.Fprintf(e.stdout, "wrote the true model to %s\n", g.truth)
	}
	return nil
}

// generate draws the true model and writes sampled transitions to out.
func (g *genFlags) generate(ctx context.Context, out string) (*factor.Model, error) {
	rng := rand.New(rand.NewPCG(g.seed, 0x67656e)) // "gen"
	truth, err := factor.TrueModel(g.states, g.order, g.actions, g.rows, g.conc, rng)
	if err != nil {
		return nil, err
	}
	truth.Seed = g.seed
	var states, actions *shard.Vocab
	if g.stringIDs {
		states, actions = g.vocabs()
	}
	w, err := arrowio.NewTransitionWriterIDs(out, "", states, actions)
	if err != nil {
		return nil, err
	}
	var werr error
	err = factor.Sample(truth, g.transitions, factor.SampleOptions{Mode: g.sampling, EpisodeLen: g.episodeLen}, rng,
		func(t factor.Transition) {
			if werr == nil {
				werr = w.Write(t.State, t.Action, t.Next, 1, int64(t.Episode), int64(t.Step))
			}
		})
	if err == nil {
		err = werr
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		w.Abort()
		return nil, err
	}
	return truth, w.Close()
}

func (g *genFlags) params() map[string]string {
	return map[string]string{
		"generator":   "emsf gen",
		"rows":        g.rows,
		"conc":        strconv.FormatFloat(g.conc, 'g', -1, 64),
		"sampling":    g.sampling,
		"transitions": strconv.Itoa(g.transitions),
		"seed":        strconv.FormatUint(g.seed, 10),
	}
}

// vocabs returns the ids of --string-ids: s and a, then the index,
// zero-padded to the width of the largest, so that the vocabulary a fit
// builds (the sorted ids) numbers them as gen does and the true model can
// be compared with the fitted one.
func (g *genFlags) vocabs() (states, actions *shard.Vocab) {
	named := func(prefix string, n int) *shard.Vocab {
		width := len(strconv.Itoa(n - 1))
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("%s%0*d", prefix, width, i)
		}
		v, err := shard.NewVocab(ids)
		if err != nil {
			panic(err) // distinct, valid ids by construction
		}
		return v
	}
	return named("s", g.states), named("a", g.actions)
}
