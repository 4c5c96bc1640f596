package main

import (
	"context"
	"fmt"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/factor"
)

func runEval(ctx context.Context, e *env, args []string) error {
	var in inputFlags
	var modelPath, truthPath string
	var cnt bool
	fs := newFlagSet(e, "eval", "eval --model FILE [--input TRANSITIONS] [--truth TRUE_MODEL] [--cnt]")
	in.register(fs)
	fs.StringVar(&modelPath, "model", "", "model to evaluate (required unless --cnt)")
	fs.StringVar(&truthPath, "truth", "", "true model D'K' (from emsf gen): report ‖P − DK‖_F and KL_ρ against it")
	fs.BoolVar(&cnt, "cnt", false, "also evaluate the counting estimate (CNT) of --input")
	if err := parse(fs, args); err != nil {
		return err
	}
	if modelPath == "" && !cnt {
		return usagef("--model is required (or --cnt with --input)")
	}
	if in.input == "" && truthPath == "" {
		return usagef("nothing to evaluate against: give --input, --truth or both")
	}
	if cnt && in.input == "" {
		return usagef("--cnt needs --input: the counts come from the transitions")
	}

	var ests []namedEstimate
	var md *factor.Model
	if modelPath != "" {
		mf, err := arrowio.ReadModel(modelPath)
		if err != nil {
			return err
		}
		md = mf.Model
		ests = append(ests, namedEstimate{"model " + modelPath, md})
	}
	var truth *factor.Model
	if truthPath != "" {
		tf, err := arrowio.ReadModel(truthPath)
		if err != nil {
			return fmt.Errorf("--truth: %w", err)
		}
		truth = tf.Model
		if md != nil && (truth.N != md.N || truth.U != md.U) {
			return fmt.Errorf("--truth %s has n=%d u=%d but the model has n=%d u=%d", truthPath, truth.N, truth.U, md.N, md.U)
		}
	}
	if in.input != "" {
		if md != nil {
			if in.states == 0 {
				in.states = md.N
			}
			if in.actions == 0 {
				in.actions = md.U
			}
		} else if truth != nil {
			in.states, in.actions = truth.N, truth.U
		}
		data, err := loadData(ctx, &in, 0, 0)
		if err != nil {
			return err
		}
		if md != nil {
			ll, total, err := factor.LogLikelihood(md, data.train)
			if err != nil {
				return err
			}
			wkl, err := factor.WKL(md, data.train)
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "data %s: %d transitions, total count %g\n", in.input, data.transitions, total)
			fmt.Fprintf(e.stdout, "  log-likelihood        %.8g\n  per transition        %.8g\n  weighted KL (WKL)     %.8g\n", ll, ll/total, wkl)
		}
		if cnt {
			c, err := factor.NewCNT(data.n, data.u, data.train, 0)
			if err != nil {
				return err
			}
			ests = append(ests, namedEstimate{"CNT (counting)", c})
		}
	}
	if truth != nil {
		fmt.Fprintf(e.stdout, "against the true model %s (n=%d, u=%d, true order %d):\n", truthPath, truth.N, truth.U, truth.M)
		rho := uniform(truth.N)
		for _, est := range ests {
			fro := factor.FrobeniusError(truth, est.est)
			kl := factor.KLRho(truth, est.est, rho)
			fmt.Fprintf(e.stdout, "  %-30s ‖P − P̃‖_F %.6f   KL_ρ %.6f\n", est.name, fro, kl)
		}
	}
	return nil
}

type namedEstimate struct {
	name string
	est  factor.Estimate
}

func uniform(n int) []float64 {
	r := make([]float64, n)
	for i := range r {
		r[i] = 1 / float64(n)
	}
	return r
}
