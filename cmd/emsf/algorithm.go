package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/factor"
)

// The algorithms of emsf fit --algorithm.
const (
	algEMSF = "emsf"
	algKLM  = "klm"
	algCNT  = "cnt"
)

const algorithmUsage = `how to estimate P^a:
  emsf: EMSF, the stochastic factorization D^a K^a fitted by EM (writes --out);
  klm:  the baseline KLM of incremental-emsf §5: Lee & Seung's KL-divergence NMF of
        the counted estimate P̂^a, normalised into D^a K^a (writes --out; supports
        --order (one value), --iters, --tol, --time-limit, --seed, --restarts);
  cnt:  the counting estimate P̂^a_ij = C^a_ij / Σ_j C^a_ij. It has n×n entries per
        action and no D K form, so nothing is written: fit prints its evaluation
        (training log-likelihood and, with --holdout, the held-out log-likelihood
        of P̂ with add-one smoothing). --order is not used;
  mu-norm, mu-repa, mu-rela: the multiplicative updates that keep D and K
        stochastic (multiplicative-stochastic_002: normalize, reparametrize, or
        relax with closed-form Lagrange multipliers) on the objective --loss
        (writes --out; --order (one value), --iters, --tol, --time-limit, --seed,
        --restarts, --workers, --tie with --loss wkl or kl, --nats/--embedded with wkl).`

// validateAlgorithm checks --algorithm and the flags a baseline cannot
// honour (run after the EMSF flags were validated).
func (f *fitFlags) validateAlgorithm() error {
	if _, mu := muRule(f.algorithm); !mu && f.loss != "wkl" {
		return usagef("--loss %s is for --algorithm mu-norm, mu-repa or mu-rela", f.loss)
	}
	switch f.algorithm {
	case algEMSF:
		return nil
	case algKLM:
	case algMUNorm, algMURepa, algMURela:
		return f.validateMU()
	default:
		return usagef("--algorithm %q: want %s, %s, %s, %s, %s or %s", f.algorithm, algEMSF, algKLM, algCNT, algMUNorm, algMURepa, algMURela)
	}
	switch {
	case f.inc.enabled:
		return usagef("--algorithm klm: --incremental is for EMSF only")
	case f.cluster.enabled():
		return usagef("--algorithm klm runs on one machine: drop --nats/--embedded")
	case f.initModel != "":
		return usagef("--algorithm klm starts from --seed: --init is for EMSF only")
	case f.tieV != factor.TieNone:
		return usagef("--algorithm klm fits each action on its own: --tie must be none")
	case f.alpha != 1:
		return usagef("--algorithm klm has no learning rate: drop --alpha")
	case f.holdout != 0 || len(f.orders) > 1:
		return usagef("--algorithm klm fits one --order and takes no --holdout")
	}
	return nil
}

// validateCNT checks the flags of --algorithm cnt, which uses only the
// input, --holdout and --seed.
func (f *fitFlags) validateCNT() error {
	if f.loss != "wkl" {
		return usagef("--loss %s is for --algorithm mu-norm, mu-repa or mu-rela", f.loss)
	}
	if f.inc.enabled || f.cluster.enabled() {
		return usagef("--algorithm cnt counts on one machine: drop --incremental and --nats/--embedded")
	}
	if !(f.holdout >= 0 && f.holdout < 1) {
		return usagef("--holdout %v: must be in [0, 1)", f.holdout)
	}
	return nil
}

// fitBaseline runs --algorithm klm or cnt.
func fitBaseline(ctx context.Context, e *env, f *fitFlags, log hclog.Logger) error {
	data, err := loadData(ctx, &f.in, f.holdout, f.seed)
	if err != nil {
		return err
	}
	log.Info("data", "file", f.in.name(), "transitions", data.transitions, "states", data.n, "actions", data.u,
		"nonzeros", factor.NNZ(data.train), "held_out", f.holdout > 0)
	if err := f.checkMemory(data); err != nil {
		return err
	}
	if f.algorithm == algCNT {
		return reportCNT(e, data)
	}
	m := f.orders[0]
	if m > data.n {
		return usagef("--order %d: must be at most the number of states n = %d", m, data.n)
	}
	var best *factor.Model
	var bestDiv float64
	var bestStatus factor.Status
	for r := range f.restarts {
		seed := f.seed + uint64(r)
		md, res, err := factor.KLM(ctx, data.n, m, data.u, data.train, seed,
			factor.KLMOptions{Converger: f.stop.converger()})
		if err != nil && ctx.Err() != nil {
			return f.interruptedUnfinished(err)
		}
		if err != nil {
			return err
		}
		log.Info("klm done", "order", m, "seed", seed, "status", res.Status, "iterations", res.Iterations,
			"divergence", res.Divergence, "loglik", md.LogLik, "elapsed", res.Elapsed.Round(time.Millisecond))
		f.warnEarly(log, res.Status, "order", m, "seed", seed, "iterations", res.Iterations)
		if best == nil || res.Divergence < bestDiv {
			best, bestDiv, bestStatus = md, res.Divergence, res.Status
		}
	}
	params := f.params(m)
	params["algorithm"] = algKLM
	mf := &arrowio.ModelFile{Model: best, Fingerprint: data.fingerprint, Params: params, Status: bestStatus.String(),
		States: data.ids.states, Actions: data.ids.actions}
	if err := writeModelOut(ctx, &f.cluster.natsFlags, f.out, mf, f.format); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "KLM model n=%d m=%d u=%d: %d iterations (%s), KL(P̂‖DK) %.6g, log-likelihood %.6g, WKL %.6g\nwrote %s\n",
		best.N, best.M, best.U, best.Iteration, bestStatus, bestDiv, best.LogLik, best.WKL, f.out)
	return nil
}

// reportCNT prints the evaluation of the counting estimate; it writes no
// file.
func reportCNT(e *env, data *dataset) error {
	cnt, err := factor.NewCNT(data.n, data.u, data.train, 0)
	if err != nil {
		return err
	}
	seen := 0
	for a := range data.u {
		for i := range data.n {
			if cnt.RowTotal(a, i) > 0 {
				seen++
			}
		}
	}
	ll, total, err := factor.LogLikelihood(cnt, data.train)
	if err != nil {
		return err
	}
	w := e.stdout
	fmt.Fprintf(w, "CNT (counting) n=%d u=%d: %d nonzero entries of P̂ from total count %g; %d of %d (state, action) rows seen (unseen rows are uniform)\n",
		data.n, data.u, factor.NNZ(data.train), total, seen, data.n*data.u)
	fmt.Fprintf(w, "  training log-likelihood %.8g, per transition %.8g (WKL 0: P̂ is the maximum-likelihood estimate)\n", ll, ll/total)
	if data.holdout != nil {
		// The rule of every method's held-out score (EMSF orders too).
		ho, err := heldOutRule.PerTransition(cnt, data.holdout, data.n)
		if err != nil {
			return fmt.Errorf("held-out evaluation of CNT: %w", err)
		}
		fmt.Fprintf(w, "  held-out log-likelihood %s per transition (scoring rule: %s)\n",
			strconv.FormatFloat(ho, 'f', 6, 64), heldOutRule)
	}
	fmt.Fprintln(w, "no model written: CNT has no D K form (compare it with a model: emsf eval --model FILE --input FILE --cnt)")
	return nil
}
