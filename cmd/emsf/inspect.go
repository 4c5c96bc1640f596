package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/emsf/emsf/shard"
)

func runInspect(ctx context.Context, e *env, args []string) error {
	var path string
	var nf natsFlags
	fs := newFlagSet(e, "inspect", "inspect --model FILE|DATASET")
	fs.StringVar(&path, "model", "", "the model (required): "+modelPathUsage)
	nf.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if path == "" {
		return usagef("--model is required")
	}
	if err := nf.validate(); err != nil {
		return err
	}
	mf, err := readModel(ctx, &nf, path)
	if err != nil {
		return err
	}
	md := mf.Model
	w := e.stdout
	fmt.Fprintf(w, "model %s\n", path)
	fmt.Fprintf(w, "  states n     %d\n  order m      %d\n  actions u    %d\n  tie          %s\n", md.N, md.M, md.U, md.Tie)
	fmt.Fprintf(w, "  iterations   %d\n  loglik       %.10g\n  WKL          %.10g\n  seed         %d\n", md.Iteration, md.LogLik, md.WKL, md.Seed)
	if mf.Status != "" {
		fmt.Fprintf(w, "  fit ended    %s\n", mf.Status)
	}
	if mf.Fingerprint != "" {
		fmt.Fprintf(w, "  data         %s\n", mf.Fingerprint)
	}
	for _, g := range []struct {
		what string
		v    *shard.Vocab
	}{{"state ids", mf.States}, {"action ids", mf.Actions}} {
		if g.v != nil {
			fmt.Fprintf(w, "  %-12s %s\n", g.what, vocabSummary(g.v))
		}
	}
	zeros, total := 0, 0
	for _, blocks := range [][][]float64{md.D, md.KT} {
		for _, b := range blocks {
			for _, v := range b {
				if v == 0 {
					zeros++
				}
			}
			total += len(b)
		}
	}
	fmt.Fprintf(w, "  blocks       %d D, %d K (%d entries, %d exactly zero)\n", len(md.D), len(md.KT), total, zeros)
	if err := md.Validate(); err != nil {
		fmt.Fprintf(w, "  stochastic   NO: %v\n", err)
	} else {
		fmt.Fprintf(w, "  stochastic   yes (every row of D and K sums to 1)\n")
	}
	if sm := md.Smoothing; sm != nil {
		counts := 0
		if sm.Counts != nil {
			counts = sm.Counts.NNZ()
		}
		fmt.Fprintf(w, "  smoothing    λ %v, κ %v, δ %v", sm.Lambda, sm.Kappa, sm.Delta)
		if sm.Mu != nil || sm.Discount != nil || sm.Rho != nil {
			fmt.Fprintf(w, ", μ %v, discount %v, ρ %v", sm.Mu, sm.Discount, sm.Rho)
		}
		fmt.Fprintf(w, " per action; %d counts stored (factor.Smoothing)\n", counts)
	} else {
		fmt.Fprintf(w, "  smoothing    none (the model predicts D·K)\n")
	}
	if len(mf.Params) > 0 {
		keys := make([]string, 0, len(mf.Params))
		for k := range mf.Params {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		fmt.Fprintln(w, "  parameters")
		for _, k := range keys {
			fmt.Fprintf(w, "    %-12s %s\n", k, mf.Params[k])
		}
	}
	return nil
}

// vocabSummary is a vocabulary in one line: its size and its first and
// last ids.
func vocabSummary(v *shard.Vocab) string {
	const show = 3
	var ids []string
	for i := range min(show, v.Len()) {
		ids = append(ids, strconv.Quote(v.String(i)))
	}
	if v.Len() > show {
		ids = append(ids, "…", strconv.Quote(v.String(v.Len()-1)))
	}
	return fmt.Sprintf("%d (%s; %d bytes in memory)", v.Len(), strings.Join(ids, ", "), v.Bytes())
}
