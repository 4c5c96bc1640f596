package main

import (
	"context"
	"encoding/csv"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/factor/experiment"
	"github.com/emsf/emsf/shard"
)

func runEval(ctx context.Context, e *env, args []string) error {
	var in inputFlags
	var modelPath, truthPath string
	var cnt bool
	var rhoFlag string
	fs := newFlagSet(e, "eval", "eval --model FILE [--input TRANSITIONS] [--truth TRUE_MODEL] [--cnt]")
	in.register(fs)
	fs.StringVar(&modelPath, "model", "", "model to evaluate (required unless --cnt)")
	fs.StringVar(&truthPath, "truth", "", "true model D'K' (from emsf gen): report ‖P − DK‖_F and KL_ρ against it")
	fs.BoolVar(&cnt, "cnt", false, "also evaluate the counting estimate (CNT) of --input")
	fs.StringVar(&rhoFlag, "rho", "", "weights ρ of the rows (state, action) in KL_ρ and the ρ-weighted Frobenius norm: empirical (the start-state frequencies of --input, as the papers do), uniform, or a CSV FILE with columns state, weight and optionally action (default: empirical with --input, else uniform)")
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
		mf, err := arrowio.ReadModel(modelPath)
		if err != nil {
			return err
		}
		md, ids = mf.Model, vocabsOf(mf)
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
		if md != nil && !sameVocabs(vocabsOf(tf), ids) {
			return fmt.Errorf("--truth %s names its states and actions otherwise than the model (ids or their order differ): they cannot be compared", truthPath)
		}
		if md == nil {
			ids = vocabsOf(tf)
		}
	}
	var data *dataset
	if in.input != "" {
		if md != nil {
			if in.states == 0 && ids.states == nil {
				in.states = md.N
			}
			if in.actions == 0 && ids.actions == nil {
				in.actions = md.U
			}
		} else if truth != nil {
			in.states, in.actions = truth.N, truth.U
			if ids.states != nil {
				in.states = 0
			}
			if ids.actions != nil {
				in.actions = 0
			}
		}
		var err error
		// Against a model (or truth) the data's ids are the model's: a row
		// naming one it lacks is an unseen row, set aside.
		policy := idsKnown
		if md == nil && truth == nil {
			policy = idsFresh // --cnt alone: the data's own ids
		}
		if data, err = loadDataIDs(ctx, &in, 0, 0, ids, policy); err != nil {
			return err
		}
		if data.unseen > 0 {
			fmt.Fprintf(e.stdout, "data %s: %d rows name states or actions the model does not have (unseen ids): not scored\n", in.input, data.unseen)
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
		rho, what, err := evalRho(rhoFlag, truth.N, truth.U, data, ids)
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "  ρ, the weight of each row (state, action) in KL_ρ and ‖·‖_F,ρ: %s\n", what)
		tw := tabwriter.NewWriter(e.stdout, 0, 0, 3, ' ', 0)
		fmt.Fprintln(tw, "  estimate\t‖P − P̃‖_F\t‖P − P̃‖_F,ρ\tKL_ρ(P ‖ P̃)\t")
		var notes []string
		for _, est := range ests {
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
	name string
	est  factor.Estimate
}
