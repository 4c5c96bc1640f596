package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
)

// The multiplicative-update algorithms of emsf fit --algorithm
// (multiplicative-stochastic_002): mu-<rule>.
const (
	algMUNorm = "mu-norm"
	algMURepa = "mu-repa"
	algMURela = "mu-rela"
)

const lossUsage = `objective of --algorithm mu-*: wkl (EMSF's count-weighted KL: mu-norm is then exactly EMSF,
mu-repa/mu-rela a damped EMSF; the only loss that runs on a cluster, --nats/--embedded, on EMSF's partials),
kl (the same on P̂, every row weighted 1, like klm), frob (½ Σ_i ‖P̂_i − (DK)_i‖², the paper's loss; --tie none),
wfrob (rows weighted by their counts; --tie none)`

// muRule returns the rule of a mu-* algorithm name, and whether it is one.
func muRule(alg string) (factor.MURule, bool) {
	name, ok := strings.CutPrefix(alg, "mu-")
	if !ok {
		return 0, false
	}
	r, err := factor.ParseMURule(name)
	return r, err == nil
}

// validateMU checks the flags of --algorithm mu-*.
func (f *fitFlags) validateMU() error {
	loss, err := factor.ParseMULoss(f.loss)
	if err != nil {
		return usagef("--loss %q: want wkl, kl, frob or wfrob", f.loss)
	}
	switch {
	case f.inc.enabled:
		return usagef("--algorithm %s: --incremental is for EMSF only", f.algorithm)
	case f.cluster.enabled() && loss != factor.LossWKL:
		return usagef("--loss %s: --algorithm %s runs on a cluster (--nats/--embedded) only with --loss wkl, whose statistics are the EMSF partials the workers compute (%s needs others): drop --nats/--embedded or use --loss wkl",
			f.loss, f.algorithm, f.loss)
	case f.initModel != "":
		return usagef("--algorithm %s starts from --seed: --init is for EMSF only", f.algorithm)
	case f.alpha != 1:
		return usagef("--algorithm %s has no learning rate: drop --alpha", f.algorithm)
	case f.holdout != 0 || len(f.orders) > 1:
		return usagef("--algorithm %s fits one --order and takes no --holdout", f.algorithm)
	case (loss == factor.LossFrob || loss == factor.LossWFrob) && f.tieV != factor.TieNone:
		return usagef("--algorithm %s --loss %s: --tie must be none", f.algorithm, f.loss)
	}
	return nil
}

// fitMU runs --algorithm mu-* and writes the best restart's model.
func fitMU(ctx context.Context, e *env, f *fitFlags, log hclog.Logger) error {
	rule, _ := muRule(f.algorithm)
	loss, _ := factor.ParseMULoss(f.loss)
	data, err := loadData(ctx, &f.in, 0, f.seed)
	if err != nil {
		return err
	}
	m := f.orders[0]
	if m > data.n {
		return usagef("--order %d: must be at most the number of states n = %d", m, data.n)
	}
	if err := f.checkMemory(data); err != nil {
		return err
	}
	log.Info("data", "file", f.in.name(), "transitions", data.transitions, "states", data.n, "actions", data.u,
		"nonzeros", factor.NNZ(data.train))
	shards, man := shard.SplitGrid(data.train, data.n, f.shardNNZ, f.colCells)
	blocks := shard.Blocks(shards)
	params := f.params(m)
	params["algorithm"] = f.algorithm
	params["loss"] = loss.String()
	var best *factor.Model
	var bestRes factor.MUResult
	for r := range f.restarts {
		seed := f.seed + uint64(r)
		progress := f.report.iterations(f.stop.iters, "order", m, "seed", seed)
		var md *factor.Model
		var res factor.MUResult
		if f.cluster.enabled() {
			f.cluster.params = params
			md, res, err = fitMUCluster(ctx, f, log, shards, man, rule, m, seed, progress)
		} else {
			md, res, err = factor.MU(ctx, data.n, m, data.u, blocks, seed, factor.MUOptions{
				Rule: rule, Loss: loss, Tie: f.tieV, Workers: f.workers, GroupNNZ: f.groupNNZ,
				Converger: f.stop.converger(), Progress: progress,
			})
		}
		f.report.done()
		if err != nil && ctx.Err() != nil {
			return f.interruptedUnfinished(err)
		}
		if err != nil {
			return err
		}
		log.Info("mu done", "rule", rule, "loss", loss, "order", m, "seed", seed, "status", res.Status,
			"iterations", res.Iterations, "objective", res.Objective, "loglik", md.LogLik,
			"row_deviation", res.MaxRowDeviation, "elapsed", res.Elapsed.Round(time.Millisecond))
		f.warnEarly(log, res.Status, "order", m, "seed", seed, "iterations", res.Iterations)
		if best == nil || res.Objective > bestRes.Objective {
			best, bestRes = md, res
		}
	}
	mf := &arrowio.ModelFile{Model: best, Fingerprint: data.fingerprint, Params: params, Status: bestRes.Status.String(),
		States: data.ids.states, Actions: data.ids.actions}
	if err := writeModelOut(ctx, &f.cluster.natsFlags, f.out, mf, f.format); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%s (--loss %s) model n=%d m=%d u=%d tie=%s: %d iterations (%s), objective %.8g, log-likelihood %.8g, WKL %.6g, max row deviation before normalizing %.3g\nwrote %s\n",
		f.algorithm, loss, best.N, best.M, best.U, best.Tie, best.Iteration, bestRes.Status, bestRes.Objective, best.LogLik, best.WKL,
		bestRes.MaxRowDeviation, f.out)
	return nil
}

// fitMUCluster runs --algorithm mu-* --loss wkl from seed on a cluster:
// the workers compute EMSF's passes, this process commits by MU's rule
// (factor.MUCommit). The model and result are bitwise those of factor.MU
// on shard.Blocks(shards) with the same --group-nnz.
func fitMUCluster(ctx context.Context, f *fitFlags, log hclog.Logger, shards []*shard.Shard, man *shard.Manifest, rule factor.MURule, m int, seed uint64, progress func(factor.IterStats)) (*factor.Model, factor.MUResult, error) {
	md := factor.NewRandom(man.N, m, man.U, f.tieV, seed)
	blocks := shard.Blocks(shards)
	c, err := factor.NewMUCommit(md, blocks, rule)
	if err != nil {
		return nil, factor.MUResult{}, err
	}
	fr, err := fitCluster(ctx, &f.cluster, log, shards, man, md, factor.FitOptions{Alpha: f.alpha, GroupNNZ: f.groupNNZ,
		Converger: f.stop.converger(), Progress: progress, Commit: c.Commit}, f.workers)
	res := factor.MUResult{Status: fr.Status, Iterations: fr.Iterations, Objective: fr.LogLik, Elapsed: fr.Elapsed}
	if err != nil {
		return nil, res, err
	}
	res.MaxRowDeviation, err = factor.MUFinish(md, blocks)
	return md, res, err
}
