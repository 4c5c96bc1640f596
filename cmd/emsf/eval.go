package main

import (
	"context"
	"encoding/csv"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/factor/experiment"
	"github.com/emsf/emsf/shard"
)

func runEval(ctx context.Context, e *env, args []string) error {
	var in inputFlags
	var modelPath, truthPath, trainPath, baselines string
	var cnt bool
	var rhoFlag string
	var mix, validation float64
	var seed uint64
	var nf natsFlags
	fs := newFlagSet(e, "eval", "eval --model FILE|DATASET [--input TRANSITIONS] [--train TRAINING_TRANSITIONS] [--truth TRUE_MODEL] [--cnt]")
	in.register(fs)
	fs.StringVar(&modelPath, "model", "", "model to evaluate (required unless --cnt or --train): "+modelPathUsage)
	fs.StringVar(&truthPath, "truth", "", "true model D'K' (from emsf gen): report ‖P − DK‖_F and KL_ρ against it; any form --model takes")
	nf.register(fs)
	fs.StringVar(&trainPath, "train", "", "training transitions: score counting baselines trained on this file beside the model on --input (their parameters chosen on a --validation split of it, never on --input)")
	fs.StringVar(&baselines, "baselines", "cnt,add,jm,kn", "with --train: the counting baselines to score: cnt (counting), add (add-β), jm (Jelinek–Mercer with the next-state frequencies), kn (interpolated Kneser–Ney: discount d, continuation frequencies with δ pseudo-counts, both per action); comma-separated, or none")
	fs.Float64Var(&mix, "mix", factor.DefaultHeldOutMix, "the held-out scoring rule, applied to every estimate alike: its probabilities mixed with the uniform distribution over the scored states at this weight, in [0, 1) (recorded in the output)")
	fs.Float64Var(&validation, "validation", 0.1, "with --train: the fraction of its transitions held out to choose the baselines' β, λ, and d and δ")
	fs.Uint64Var(&seed, "seed", 1, "seed of the --validation split")
	fs.BoolVar(&cnt, "cnt", false, "also evaluate the counting estimate (CNT) against --truth: of --train when given, else of --input (in-sample)")
	fs.StringVar(&rhoFlag, "rho", "", "weights ρ of the rows (state, action) in KL_ρ and the ρ-weighted Frobenius norm: empirical (the start-state frequencies of --input, as the papers do), uniform, or a CSV FILE with columns state, weight and optionally action (default: empirical with --input, else uniform)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if modelPath == "" && !cnt && trainPath == "" {
		return usagef("--model is required (or --cnt with --input, or --train)")
	}
	if in.input == "" && truthPath == "" {
		return usagef("nothing to evaluate against: give --input, --truth or both")
	}
	if cnt && in.input == "" && trainPath == "" {
		return usagef("--cnt needs --input or --train: the counts come from the transitions")
	}
	if trainPath != "" && in.input == "" {
		return usagef("--train scores baselines on held-out data: give --input TEST_FILE")
	}
	if !(mix >= 0 && mix < 1) {
		return usagef("--mix %v: must be in [0, 1)", mix)
	}
	if !(validation > 0 && validation < 1) {
		return usagef("--validation %v: must be in (0, 1)", validation)
	}
	bases, err := parseBaselines(baselines)
	if err != nil {
		return err
	}
	if err := nf.validate(); err != nil {
		return err
	}
	if rhoFlag == "" {
		rhoFlag = "uniform"
		if in.input != "" {
			rhoFlag = "empirical"
		}
	}
	if rhoFlag == "empirical" && in.input == "" {
		return usagef("--rho empirical weighs rows by the start states of --input: give --input, or --rho uniform")
	}

	var ests []namedEstimate
	var md *factor.Model
	var ids vocabs // of the model (or, without one, of the truth)
	if modelPath != "" {
		mf, err := readModel(ctx, &nf, modelPath)
		if err != nil {
			return err
		}
		md, ids = mf.Model, vocabsOf(mf)
		ests = append(ests, namedEstimate{"model " + modelPath, md, ""})
	}
	var truth *factor.Model
	if truthPath != "" {
		tf, err := readModel(ctx, &nf, truthPath)
		if err != nil {
			return fmt.Errorf("--truth: %w", err)
		}
		truth = tf.Model
		if md != nil && (truth.N != md.N || truth.U != md.U) {
			return fmt.Errorf("--truth %s has n=%d u=%d but the model has n=%d u=%d", truthPath, truth.N, truth.U, md.N, md.U)
		}
		if md != nil && !sameVocabs(vocabsOf(tf), ids) {
			return fmt.Errorf("--truth %s names its states and actions otherwise than the model (ids or their order differ): they cannot be compared", truthPath)
		}
		if md == nil {
			ids = vocabsOf(tf)
		}
	}
	// The baselines, trained on --train (never on the scored file). Its
	// ids and the scored file's are one vocabulary: the model's (or the
	// truth's), or without either, --train's own.
	var train *dataset
	loadTrain := func(base vocabs, policy idPolicy) error {
		tin := in
		tin.input = trainPath
		tin.format = ""
		var err error
		if train, err = loadDataIDs(ctx, &tin, 0, validation, seed, base, policy); err == nil {
			err = train.checkValidation(validation)
		}
		if err != nil {
			return fmt.Errorf("--train: %w", err)
		}
		if train.unseen > 0 {
			fmt.Fprintf(e.stdout, "--train %s: %d rows name states or actions the model does not have (unseen ids): not used\n", trainPath, train.unseen)
		}
		return nil
	}
	if trainPath != "" && md == nil && truth == nil {
		if err := loadTrain(vocabs{}, idsFresh); err != nil {
			return err
		}
		ids = train.ids
	}
	var data *dataset
	if in.input != "" {
		if truth != nil && md == nil && trainPath == "" {
			in.states, in.actions = truth.N, truth.U
			if ids.states != nil {
				in.states = 0
			}
			if ids.actions != nil {
				in.actions = 0
			}
		}
		// Against a model (or truth, or --train) the data's ids are its:
		// a row naming one it lacks is an unseen row, set aside.
		policy := idsKnown
		if md == nil && truth == nil && train == nil {
			policy = idsFresh // --cnt alone: the data's own ids
		}
		if data, err = loadDataIDs(ctx, &in, 0, 0, 0, ids, policy); err != nil {
			return err
		}
		if data.unseen > 0 {
			fmt.Fprintf(e.stdout, "data %s: %d rows name states or actions the model does not have (unseen ids): not scored\n", in.name(), data.unseen)
		}
	}
	if trainPath != "" && train == nil {
		if err := loadTrain(ids, idsKnown); err != nil {
			return err
		}
	}
	// The states and actions every estimate and data cover.
	n, u := 0, 0
	for _, d := range []*dataset{data, train} {
		if d != nil {
			n, u = max(n, d.n), max(u, d.u)
		}
	}
	if md != nil {
		n, u = max(n, md.N), max(u, md.U)
	}
	if truth != nil {
		n, u = max(n, truth.N), max(u, truth.U)
	}
	rule := factor.HeldOutRule{Mix: mix}
	if train != nil {
		bs, err := trainBaselines(n, u, train, bases, rule)
		if err != nil {
			return err
		}
		ests = append(ests, bs...)
	} else if cnt && data != nil {
		c, err := factor.NewCNT(data.n, data.u, data.train, 0)
		if err != nil {
			return err
		}
		ests = append(ests, namedEstimate{"CNT (counting, in-sample: of --input itself)", c, ""})
	}
	if data != nil {
		if err := scoreHeldOut(e, in.name(), data, n, md, ests, rule); err != nil {
			return err
		}
	}
	if truth != nil {
		fmt.Fprintf(e.stdout, "against the true model %s (n=%d, u=%d, true order %d):\n", truthPath, truth.N, truth.U, truth.M)
		rho, what, err := evalRho(rhoFlag, truth.N, truth.U, data, ids)
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "  ρ, the weight of each row (state, action) in KL_ρ and ‖·‖_F,ρ: %s\n", what)
		tw := tabwriter.NewWriter(e.stdout, 0, 0, 3, ' ', 0)
		fmt.Fprintln(tw, "  estimate\t‖P − P̃‖_F\t‖P − P̃‖_F,ρ\tKL_ρ(P ‖ P̃)\t")
		var notes []string
		for _, est := range ests {
			if est.est.States() != truth.N || est.est.Actions() != truth.U {
				continue // trained on data of another shape
			}
			fro := factor.FrobeniusError(truth, est.est)
			kl := factor.KLRho(truth, est.est, rho)
			fmt.Fprintf(tw, "  %s\t%.6f\t%.6f\t%.6f\t\n", est.name, fro, experiment.FrobeniusRho(truth, est.est, rho), kl)
			if math.IsInf(kl, 1) {
				rows, weighted := zeroRows(truth, est.est, rho)
				notes = append(notes, fmt.Sprintf("  %s: KL_ρ is +Inf: in %d of the %d rows ρ weighs, it gives probability 0 to a next state the true P allows"+
					" (for CNT: a transition never seen in a row that was seen); ‖·‖_F stays finite", est.name, rows, weighted))
			}
		}
		tw.Flush()
		for _, n := range notes {
			fmt.Fprintln(e.stdout, n)
		}
	}
	return nil
}

// scoreHeldOut prints the score of every estimate on data under rule:
// the log-likelihood, per transition, and for a model its WKL.
func scoreHeldOut(e *env, file string, data *dataset, n int, md *factor.Model, ests []namedEstimate, rule factor.HeldOutRule) error {
	total := factor.TotalCount(data.train)
	fmt.Fprintf(e.stdout, "data %s: %d transitions, total count %g, %d states and %d actions\n", file, data.transitions, total, data.n, data.u)
	if md != nil && (data.n > md.N || data.u > md.U) {
		beyond := 0.0
		for _, b := range data.train {
			for r, i := range b.Rows {
				if int(i) >= md.N || b.Action >= md.U {
					beyond += float64(b.Ptr[r+1] - b.Ptr[r])
				}
			}
		}
		fmt.Fprintf(e.stdout, "  the model has n=%d u=%d: %g nonzeros come from states or actions beyond it (scored as unseen rows)\n", md.N, md.U, beyond)
	}
	fmt.Fprintf(e.stdout, "scoring rule (--mix): %s, N = %d\n", rule, n)
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 3, ' ', 0)
	fmt.Fprintln(tw, "  estimate\tlog-likelihood\tper transition\tchosen on validation\t")
	for _, est := range ests {
		ll, tot, err := rule.LogLik(est.est, data.train, n)
		if err != nil {
			return fmt.Errorf("%s: %w", est.name, err)
		}
		fmt.Fprintf(tw, "  %s\t%.8g\t%.8g\t%s\t\n", est.name, ll, ll/tot, est.chosen)
	}
	tw.Flush()
	if md != nil && data.n <= md.N && data.u <= md.U {
		if wkl, err := factor.WKL(md, data.train); err == nil {
			fmt.Fprintf(e.stdout, "  weighted KL (WKL) of the model's own probabilities: %.8g\n", wkl)
		}
	}
	return nil
}

// baseline names of eval --baselines.
const (
	baseCNT = "cnt"
	baseAdd = "add"
	baseJM  = "jm"
	baseKN  = "kn"
)

func parseBaselines(s string) ([]string, error) {
	if s == "none" || s == "" {
		return nil, nil
	}
	var out []string
	for _, b := range strings.Split(s, ",") {
		switch b = strings.TrimSpace(b); b {
		case baseCNT, baseAdd, baseJM, baseKN:
			out = append(out, b)
		default:
			return nil, usagef("--baselines %q: %q is not cnt, add, jm or kn", s, b)
		}
	}
	return out, nil
}

// trainBaselines returns the counting baselines of train: each
// parameter chosen by the score under rule of the validation split
// (train.val) when counted on the rest (train.train), then counted on
// all of train with it.
func trainBaselines(n, u int, train *dataset, bases []string, rule factor.HeldOutRule) ([]namedEstimate, error) {
	all := mergeBlocks(u, train.train, train.val)
	var out []namedEstimate
	for _, b := range bases {
		switch b {
		case baseCNT:
			c, err := factor.NewCNT(n, u, all, 0)
			if err != nil {
				return nil, err
			}
			out = append(out, namedEstimate{"CNT (counting)", c, ""})
		case baseAdd:
			mk := func(bs []*factor.Block, beta float64) (factor.Estimate, error) { return factor.NewCNT(n, u, bs, beta) }
			beta, c, err := chooseBaseline(n, train, all, rule, factor.AddBetaGrid, mk)
			if err != nil {
				return nil, err
			}
			out = append(out, namedEstimate{"add-β counting", c, fmt.Sprintf("β = %g", beta)})
		case baseJM:
			mk := func(bs []*factor.Block, l float64) (factor.Estimate, error) { return factor.NewJM(n, u, bs, l) }
			lambda, c, err := chooseBaseline(n, train, all, rule, factor.JMGrid, mk)
			if err != nil {
				return nil, err
			}
			out = append(out, namedEstimate{"Jelinek–Mercer counting", c, fmt.Sprintf("λ = %g", lambda)})
		case baseKN:
			rules, err := chooseKN(n, u, train, all, rule)
			if err != nil {
				return nil, err
			}
			c, err := factor.NewRuleCounting(n, u, all, nil, rules)
			if err != nil {
				return nil, err
			}
			out = append(out, namedEstimate{"Kneser–Ney counting", c, knString(rules)})
		}
	}
	return out, nil
}

// chooseKN returns the rule of interpolated Kneser–Ney counting per
// action (factor.KNRule over factor.DiscountGrid × factor.DeltaGrid, the
// grids of the model's rule): for each action the d and δ whose counting
// on train's fit part (train.train) scores best under rule on the
// action's validation transitions (train.val; ties to the earlier
// value), and for an action without validation transitions the best on
// all of them. Per action, as the model's rule is chosen (an action's
// counts and q are its own). The test file is never seen.
func chooseKN(n, u int, train *dataset, all []*factor.Block, rule factor.HeldOutRule) ([]factor.RuleParams, error) {
	// The fit part is counted once for the whole grid.
	fitCnt, err := factor.NewCNT(n, u, train.train, 0)
	if err != nil {
		return nil, err
	}
	var grid []factor.RuleParams
	for _, d := range factor.DiscountGrid {
		for _, delta := range factor.DeltaGrid {
			grid = append(grid, factor.KNRule(d, delta))
		}
	}
	best := slices.Repeat([]float64{math.Inf(-1)}, u+1) // per action, then pooled
	choice := slices.Repeat(grid[:1], u+1)
	seen := make([]bool, u)
	for _, p := range grid {
		est, err := factor.NewRuleCounting(n, u, train.train, fitCnt, slices.Repeat([]factor.RuleParams{p}, u))
		if err != nil {
			return nil, err
		}
		ll := make([]float64, u+1)
		for _, vb := range train.val {
			l, _, err := rule.LogLik(est, []*factor.Block{vb}, n)
			if err != nil {
				l = math.Inf(-1) // under a rule without mixture
			}
			ll[vb.Action] += l
			ll[u] += l
			seen[vb.Action] = true
		}
		for a, l := range ll {
			if l > best[a] {
				best[a], choice[a] = l, p
			}
		}
	}
	for a := range u {
		if !seen[a] {
			choice[a] = choice[u]
		}
	}
	return choice[:u], nil
}

// knString describes the Kneser–Ney rules chosen per action.
func knString(rules []factor.RuleParams) string {
	if !slices.ContainsFunc(rules, func(r factor.RuleParams) bool { return r != rules[0] }) {
		return fmt.Sprintf("d = %g, δ = %g", rules[0].Discount, rules[0].Delta)
	}
	parts := make([]string, len(rules))
	for a, r := range rules {
		parts[a] = fmt.Sprintf("a%d: d = %g, δ = %g", a, r.Discount, r.Delta)
	}
	return strings.Join(parts, "; ")
}

// chooseBaseline returns the value of grid whose estimate, made by mk
// from train's fit part (train.train), scores best under rule on its
// validation split (train.val; ties to the earlier value), and the
// estimate made with it from all of train (all): the test file is never
// seen.
func chooseBaseline[T any](n int, train *dataset, all []*factor.Block, rule factor.HeldOutRule, grid []T,
	mk func(bs []*factor.Block, v T) (factor.Estimate, error)) (T, factor.Estimate, error) {
	best, bestV := math.Inf(-1), grid[0]
	for _, v := range grid {
		est, err := mk(train.train, v)
		if err != nil {
			return bestV, nil, err
		}
		s, err := rule.PerTransition(est, train.val, n)
		if err != nil {
			continue // −Inf under a rule without mixture
		}
		if s > best {
			best, bestV = s, v
		}
	}
	est, err := mk(all, bestV)
	return bestV, est, err
}

// evalRho returns the row weights of eval's --rho (length u·n, row a·n+i
// for state i and action a, summing to 1) and a sentence saying what they
// are.
func evalRho(flagValue string, n, u int, data *dataset, ids vocabs) ([]float64, string, error) {
	rho := make([]float64, u*n)
	switch flagValue {
	case "uniform":
		for k := range rho {
			rho[k] = 1 / float64(u*n)
		}
		return rho, fmt.Sprintf("uniform (1/(n·u) = 1/%d each; --rho empirical weighs them by the data)", u*n), nil
	case "empirical":
		total := 0.0
		for _, b := range data.train {
			for r, i := range b.Rows {
				for q := b.Ptr[r]; q < b.Ptr[r+1]; q++ {
					if int(i) < n && b.Action < u {
						rho[b.Action*n+int(i)] += b.Vals[q]
						total += b.Vals[q]
					}
				}
			}
		}
		seen := 0
		for k := range rho {
			rho[k] /= total
			if rho[k] > 0 {
				seen++
			}
		}
		return rho, fmt.Sprintf("empirical, the start-state frequencies of %s (%d of %d rows have weight; as in the papers)", data.file, seen, u*n), nil
	}
	f, err := os.Open(flagValue)
	if err != nil {
		return nil, "", usagef("--rho %q: want empirical, uniform or a CSV file (%v)", flagValue, err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, "", fmt.Errorf("--rho %s: %w", flagValue, err)
	}
	if len(recs) < 2 {
		return nil, "", fmt.Errorf("--rho %s: want a header (state, weight[, action]) and rows", flagValue)
	}
	col := map[string]int{}
	for k, h := range recs[0] {
		col[strings.TrimSpace(h)] = k
	}
	si, okS := col["state"]
	wi, okW := col["weight"]
	ai, okA := col["action"]
	if !okS || !okW {
		return nil, "", fmt.Errorf("--rho %s: the header %v has no state or no weight column", flagValue, recs[0])
	}
	total := 0.0
	for r, rec := range recs[1:] {
		row := r + 2
		i, err1 := indexOf(ids.states, rec[si])
		w, err2 := strconv.ParseFloat(strings.TrimSpace(rec[wi]), 64)
		a, err3 := 0, error(nil)
		if okA {
			a, err3 = indexOf(ids.actions, rec[ai])
		}
		switch {
		case err1 != nil || i < 0 || i >= n:
			return nil, "", fmt.Errorf("--rho %s: row %d, column \"state\": %q is not a state in [0, %d)", flagValue, row, rec[si], n)
		case err3 != nil || a < 0 || a >= u:
			return nil, "", fmt.Errorf("--rho %s: row %d, column \"action\": %q is not an action in [0, %d)", flagValue, row, rec[ai], u)
		case err2 != nil || !(w >= 0) || math.IsInf(w, 0):
			return nil, "", fmt.Errorf("--rho %s: row %d, column \"weight\": %q is not a finite weight >= 0", flagValue, row, rec[wi])
		}
		if okA {
			rho[a*n+i] += w
		} else {
			for b := range u {
				rho[b*n+i] += w / float64(u)
			}
		}
		total += w
	}
	if !(total > 0) {
		return nil, "", fmt.Errorf("--rho %s: the weights sum to %v; want > 0", flagValue, total)
	}
	for k := range rho {
		rho[k] /= total
	}
	return rho, fmt.Sprintf("from %s (normalised to sum 1)", flagValue), nil
}

// indexOf returns the index a field names: its id in v, or without a
// vocabulary the integer it holds.
func indexOf(v *shard.Vocab, field string) (int, error) {
	if v == nil {
		return strconv.Atoi(strings.TrimSpace(field))
	}
	if i, ok := v.IndexString(strings.TrimSpace(field)); ok {
		return i, nil
	}
	return 0, fmt.Errorf("no such id")
}

// zeroRows counts the rows with weight in rho (length u·n) and, of them,
// those where est gives probability 0 to a next state that truth allows:
// the rows that make KL_ρ infinite.
func zeroRows(truth, est factor.Estimate, rho []float64) (zero, weighted int) {
	n, u := truth.States(), truth.Actions()
	p, q := make([]float64, n), make([]float64, n)
	for a := range u {
		for i := range n {
			if rho[a*n+i] == 0 {
				continue
			}
			weighted++
			truth.Row(a, i, p)
			est.Row(a, i, q)
			for j := range p {
				if p[j] > 0 && !(q[j] > 0) {
					zero++
					break
				}
			}
		}
	}
	return zero, weighted
}

type namedEstimate struct {
	name   string
	est    factor.Estimate
	chosen string // the parameters chosen on validation, for output
}
