package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
)

// runTrick prints the reduced chains K^a D^a (the SF trick) and the
// stationary distribution of a policy's chain computed through them.
func runTrick(ctx context.Context, e *env, args []string) error {
	var path, policyS, out string
	var top int
	var nf natsFlags
	fs := newFlagSet(e, "trick", "trick --model FILE|DATASET [--policy uniform|A|a0,a1,...] [--top K] [--out mu.csv]")
	fs.StringVar(&path, "model", "", "the model (required): "+modelPathUsage)
	nf.register(fs)
	fs.StringVar(&policyS, "policy", "uniform", "policy whose stationary distribution to compute: uniform (every action equally likely), one action A for every state, or a comma-separated action per state")
	fs.IntVar(&top, "top", 10, "print the K most probable states of the stationary distribution")
	fs.StringVar(&out, "out", "", "also write the whole stationary distribution over states to this CSV (state,probability)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if path == "" {
		return usagef("--model is required")
	}
	if top < 0 {
		return usagef("--top %d: must be >= 0", top)
	}
	if err := nf.validate(); err != nil {
		return err
	}
	mf, err := readModel(ctx, &nf, path)
	if err != nil {
		return err
	}
	md := mf.Model
	if md.Smoothing != nil {
		// The rule's factored part: the background is hidden state m
		// (factor.Model.Augmented); a row's own counts are not low rank.
		fmt.Fprintf(e.stdout, "the model's smoothing rule adds the next-state frequencies as hidden state %d (weight λ per action); its counts term is not part of the reduced chain\n", md.M)
		md = md.Augmented()
	}
	policy, err := parsePolicy(policyS, md.N, md.U, mf.Actions)
	if err != nil {
		return err
	}
	w := e.stdout
	for a, r := range factor.Reduced(md) {
		name := strconv.Itoa(a)
		if mf.Actions != nil {
			name = fmt.Sprintf("%d (action %q)", a, mf.Actions.ID(a))
		}
		fmt.Fprintf(w, "K^%s D^%s (%d×%d, row-stochastic):\n", name, name, md.M, md.M)
		rows, cols := r.Dims()
		for l := 0; l < rows; l++ {
			fmt.Fprint(w, " ")
			for k := 0; k < cols; k++ {
				fmt.Fprintf(w, " %.4f", r.At(l, k))
			}
			fmt.Fprintln(w)
		}
	}
	mu, nu, err := factor.Stationary(md, policy)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "stationary distribution of the reduced chain (%d hidden states) under policy %s:\n ", len(nu), policyS)
	for _, v := range nu {
		fmt.Fprintf(w, " %.4f", v)
	}
	fmt.Fprintln(w)
	idx := make([]int, len(mu))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(x, y int) bool { return mu[idx[x]] > mu[idx[y]] })
	fmt.Fprintf(w, "mapped back to the %d states (μ = ν K), the %d most probable:\n", md.N, min(top, md.N))
	for _, i := range idx[:min(top, md.N)] {
		fmt.Fprintf(w, "  state %-6s %.6f\n", stateName(mf.States, i), mu[i])
	}
	if out != "" {
		var b strings.Builder
		b.WriteString("state,probability\n")
		for i, v := range mu {
			fmt.Fprintf(&b, "%s,%s\n", arrowio.CSVField(stateName(mf.States, i)), strconv.FormatFloat(v, 'g', -1, 64))
		}
		if err := arrowio.WriteFileAtomic(out, []byte(b.String())); err != nil {
			return err
		}
		fmt.Fprintf(w, "wrote %s\n", out)
	}
	return nil
}

// parsePolicy parses --policy: uniform, one action for every state, or
// one action per state, comma-separated; actions are ids when the model
// has an action vocabulary (actions), else indices.
func parsePolicy(s string, n, u int, actions *shard.Vocab) ([][]float64, error) {
	if s == "uniform" {
		p := make([][]float64, n)
		for i := range p {
			p[i] = make([]float64, u)
			for a := range p[i] {
				p[i][a] = 1 / float64(u)
			}
		}
		return p, nil
	}
	var acts []int
	if actions == nil {
		var err error
		if acts, err = intList("policy", s); err != nil {
			return nil, err
		}
	} else {
		for _, id := range strings.Split(s, ",") {
			a, ok := actions.IndexString(strings.TrimSpace(id))
			if !ok {
				return nil, usagef("--policy: %q is not an action of the model (its actions are ids such as %q)", id, actions.ID(0))
			}
			acts = append(acts, a)
		}
	}
	if len(acts) == 1 {
		a := acts[0]
		acts = make([]int, n)
		for i := range acts {
			acts[i] = a
		}
	}
	if len(acts) != n {
		return nil, usagef("--policy lists %d actions; want 1 or one per state (n = %d)", len(acts), n)
	}
	for i, a := range acts {
		if a < 0 || a >= u {
			return nil, usagef("--policy: action %d for state %d is out of range [0, %d)", a, i, u)
		}
	}
	return factor.DeterministicPolicy(acts, u)
}
