package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
)

// incrementalFlags are the flags of `emsf fit --incremental`
// (incremental-emsf Algorithm 1).
type incrementalFlags struct {
	enabled     bool
	etaMax      int
	commitEvery float64
	passes      int
}

// defaultEtaMax is the default η_max of `emsf fit --incremental`.
const defaultEtaMax = 1 << 20

func (f *incrementalFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&f.enabled, "incremental", false, "incremental EMSF: stream the input (never holding all transitions; memory O(u(eta-max + n·m))) and commit every --commit-every transitions with --alpha; --iters, --tol, --time-limit, --workers and --shard-nnz do not apply")
	fs.IntVar(&f.etaMax, "eta-max", defaultEtaMax, "with --incremental: buffered distinct nonzeros before their statistics are accumulated and the buffer freed (0: unlimited); changes memory and time, not the result")
	fs.Float64Var(&f.commitEvery, "commit-every", 0, "with --incremental: commit the accumulated statistics every this many transitions (total count; 0: once per pass)")
	fs.IntVar(&f.passes, "passes", 1, "with --incremental: passes over the input")
}

// validate checks the incremental flags against the rest of fit's flags.
func (f *incrementalFlags) validate(ff *fitFlags) error {
	if !f.enabled {
		return nil
	}
	if f.etaMax < 0 {
		return usagef("--eta-max %d: must be >= 0 (0: unlimited)", f.etaMax)
	}
	if !(f.commitEvery >= 0) || math.IsInf(f.commitEvery, 0) {
		return usagef("--commit-every %v: must be a finite number of transitions >= 0 (0: once per pass)", f.commitEvery)
	}
	if f.passes < 1 {
		return usagef("--passes %d: must be >= 1", f.passes)
	}
	switch {
	case len(ff.orders) > 1 || ff.holdout != 0:
		return usagef("--incremental fits one --order without --holdout")
	case ff.restarts > 1:
		return usagef("--incremental fits from one seed: it cannot be combined with --restarts %d", ff.restarts)
	case ff.cluster.enabled():
		return usagef("--incremental runs in this process: it cannot be combined with cluster mode (--nats, --embedded)")
	}
	if ff.in.input == arrowio.StdinPath {
		reads, why := f.passes, fmt.Sprintf("--passes %d", f.passes)
		if ff.in.states == 0 || ff.in.actions == 0 {
			reads++
			why += " and a first pass that finds n and u (no --states and --actions)"
		} else if ff.in.ids == idsString {
			reads++
			why += " and a first pass that numbers the ids (--ids string)"
		}
		if reads > 1 {
			return usagef("--input -: standard input can be read once, and this incremental fit reads its input %d times (%s): save it to a file, or give --passes 1 with --states and --actions",
				reads, why)
		}
	}
	return nil
}

// fitIncremental is `emsf fit --incremental`: incremental EMSF over the
// input, streamed (scanPipelined) once per pass, so that only
// one batch of rows, the η_max buffer, the model and its accumulator are in
// memory. The number of states n and of actions u come from --states and
// --actions; when either is missing, a first streaming pass only finds the
// largest indices (with the same limits as a batch fit). Ids (--ids) are
// numbered by that pass too: it interns them and sorts the vocabulary
// (after the --init model's ids), so that the fit passes, which read with
// that vocabulary, see the final indices.
func fitIncremental(ctx context.Context, e *env, f *fitFlags, log hclog.Logger) error {
	in := &f.in
	opts := in.readOptions()
	n, u := in.states, in.actions
	src, err := in.open(ctx)
	if err != nil {
		return err
	}
	defer src.close()
	fingerprint := ""
	rowsKnown := 0 // transitions of one pass, when a sizing pass counted them
	var warm *arrowio.ModelFile
	if f.initModel != "" {
		if warm, err = readModel(ctx, &f.cluster.natsFlags, f.initModel); err != nil {
			return fmt.Errorf("--init: %w", err)
		}
	}
	var ids vocabs
	sparse := func() error { return nil }
	if n == 0 || u == 0 || in.ids == idsString || warm != nil && vocabsOf(warm).any() {
		t0 := time.Now()
		var maxS, maxA int
		rows := 0
		var seen map[int32]bool // actions with transitions
		var h *fingerprintHash
		base, policy := vocabs{}, idsFresh
		if warm != nil && vocabsOf(warm).any() {
			base, policy = vocabsOf(warm), idsGrow
		}
		ids, err = in.scanWithIDs(base, policy, func(o arrowio.ReadOptions) error {
			maxS, maxA, rows, seen, h = 0, 0, 0, map[int32]bool{}, newFingerprint()
			return scanPipelined(ctx, src, o, func(b *arrowio.TransitionBatch) error {
				h.addBatch(b)
				for k := range b.State {
					maxS = max(maxS, int(b.State[k])+1, int(b.Next[k])+1)
					maxA = max(maxA, int(b.Action[k])+1)
					if len(seen) <= maxInferredActions {
						seen[b.Action[k]] = true
					}
				}
				rows += b.Len()
				return nil
			})
		})
		if err == nil && ids.any() {
			if ids.states != nil {
				ids.states.SortFrom(base.states.Len())
				maxS = ids.states.Len()
				if in.states > 0 {
					return usagef("--states %d: the states are named by ids, so n is the number of distinct ids (%d): drop --states", in.states, maxS)
				}
				n = 0
			}
			if ids.actions != nil {
				ids.actions.SortFrom(base.actions.Len())
				maxA = ids.actions.Len()
				if in.actions > 0 {
					return usagef("--actions %d: the actions are named by ids, so u is the number of distinct ids (%d): drop --actions", in.actions, maxA)
				}
				u = 0
			}
			opts.StateIDs, opts.ActionIDs = ids.states, ids.actions
		}
		if err != nil && ctx.Err() != nil {
			return fmt.Errorf("interrupted during the sizing pass, before any commit: no model written: %w", err)
		}
		if err != nil {
			return err
		}
		if rows == 0 {
			return fmt.Errorf("%s: no transitions: the input has no data rows", in.name())
		}
		fingerprint = h.sum()
		rowsKnown = rows
		if n == 0 {
			if maxS > maxInferredStates && ids.states == nil {
				return usagef("%s: the largest state index is %d, so n would be %d states (over %d): pass --states N if that is right", in.name(), maxS-1, maxS, maxInferredStates)
			}
			n = maxS
		}
		if u == 0 {
			if maxA > maxInferredActions && ids.actions == nil {
				return usagef("%s: the largest action index is %d, so u would be %d actions (over %d): pass --actions N if that is right", in.name(), maxA-1, maxA, maxInferredActions)
			}
			u = maxA
		}
		sparse = func() error { // a vocabulary's size is no guess: every id is in the data
			if in.states == 0 && ids.states == nil {
				if err := checkInferredStates(in.input, n, rows); err != nil {
					return err
				}
			}
			if in.actions == 0 && ids.actions == nil {
				return checkInferredActions(in.input, u, len(seen))
			}
			return nil
		}
		log.Info("sizing pass", "transitions", rows, "states", n, "actions", u, "elapsed", time.Since(t0).Round(time.Millisecond))
	}
	// Bound the indices in the fit passes: the reader rejects larger ones.
	opts.States, opts.Actions = n, u
	m := f.orders[0]
	if m > n {
		return usagef("--order %d: must be at most the number of states n = %d", m, n)
	}
	fp := factor.Footprint{N: n, M: m, U: u, Tie: f.tieV}
	alg, need := "--incremental", fp.Incremental(f.inc.etaMax)
	if f.onlineEM.enabled {
		alg, need = "--online-em", fp.OnlineEM()
	}
	if err := f.limits.check(alg, fp, need); err != nil {
		return err
	}
	if err := sparse(); err != nil {
		return err
	}

	var md *factor.Model
	if warm != nil {
		if err := growWarm(log, warm, ids); err != nil {
			return err
		}
		if err := warm.Model.CheckCompatible(n, m, u, f.tieV); err != nil {
			return fmt.Errorf("--init %s: %w", f.initModel, err)
		}
		md = warm.Model
		f.initIters = md.Iteration
	} else {
		md = factor.NewRandom(n, m, u, f.tieV, f.seed)
	}
	inc, err := f.newStreamFit(md)
	if err != nil {
		return err
	}

	// total is the number of transitions of every pass, once known (from
	// the sizing pass or the first pass): the status line's ETA.
	total := int64(0)
	if rowsKnown > 0 {
		total = int64(rowsKnown) * int64(f.inc.passes)
	}
	var read int64 // transitions read in all passes so far
	f.report.restart()
	start := time.Now()
	passesDone := 0
	for pass := 1; pass <= f.inc.passes; pass++ {
		t0 := time.Now()
		var h *fingerprintHash
		if fingerprint == "" {
			h = newFingerprint()
		}
		rows := 0
		err := scanPipelined(ctx, src, opts, func(b *arrowio.TransitionBatch) error {
			if h != nil {
				h.addBatch(b)
			}
			for k := range b.State {
				s, a, s2, c := int(b.State[k]), int(b.Action[k]), int(b.Next[k]), b.Count[k]
				if err := inc.Add(s, a, s2, c); err != nil {
					return fmt.Errorf("%s: row %d: %w", in.name(), b.FirstRow+k, err)
				}
			}
			rows += b.Len()
			read += int64(b.Len())
			f.report.stream(pass, f.inc.passes, read, total, inc.Stats().Commits)
			return nil
		})
		if err != nil && ctx.Err() != nil {
			f.report.done()
			return f.writeInterrupted(e, inc, ids, fingerprint, pass, passesDone, err)
		}
		if se := (*arrowio.StringIDsError)(nil); errors.As(err, &se) {
			err = fmt.Errorf("%w (--states and --actions with --incremental read integer indices: drop them, or give --ids string, to read ids)", err)
		}
		if err != nil {
			f.report.done()
			return err
		}
		if rows == 0 {
			return fmt.Errorf("%s: no transitions: the input has no data rows", in.name())
		}
		if h != nil {
			fingerprint = h.sum()
		}
		if total == 0 {
			total = int64(rows) * int64(f.inc.passes)
		}
		if err := inc.EndPass(); err != nil {
			return err
		}
		passesDone = pass
		st := inc.Stats()
		f.report.done()
		log.Info("pass", "pass", pass, "transitions", rows, "commits", st.Commits, "flushes", st.Flushes,
			"peak_buffered", st.PeakBuffered, "loglik", fmt.Sprintf("%.8g", md.LogLik),
			"elapsed", time.Since(t0).Round(time.Millisecond))
	}
	st := inc.Stats()
	log.Info("fit done", append([]any{"order", m, "seed", md.Seed, "passes", f.inc.passes, "commits", st.Commits},
		append(f.warmFields(md.Iteration), "elapsed", time.Since(start).Round(time.Millisecond))...)...)

	mf := &arrowio.ModelFile{Model: md, Fingerprint: fingerprint, Params: f.incrementalParams(m, passesDone), Status: statusPasses,
		States: ids.states, Actions: ids.actions}
	if err := writeModelOut(ctx, &f.cluster.natsFlags, f.out, mf, f.format); err != nil {
		return err
	}
	note := ""
	if f.initModel != "" {
		note = fmt.Sprintf(" (after the %d of --init %s)", f.initIters, f.initModel)
	}
	fmt.Fprintf(e.stdout, "model n=%d m=%d u=%d tie=%s: %d passes, %d commits, %d iterations%s, log-likelihood %.6g (of the last commit's counts, before it); peak buffered nonzeros %d\nwrote %s\n",
		md.N, md.M, md.U, md.Tie, f.inc.passes, st.Commits, md.Iteration, note, md.LogLik, st.PeakBuffered, f.out)
	return nil
}

// statusPasses is the model status of an incremental fit that ran all its
// --passes: it has no convergence test, so it neither converged nor hit a
// limit.
const statusPasses = "passes done"

// incrementalParams are the parameters recorded in an incremental fit's
// model: passesDone of the --passes completed.
func (f *fitFlags) incrementalParams(m, passesDone int) map[string]string {
	params := f.params(m)
	params["incremental"] = "true"
	params["eta_max"] = strconv.Itoa(f.inc.etaMax)
	params["commit_every"] = strconv.FormatFloat(f.inc.commitEvery, 'g', -1, 64)
	params["passes"] = strconv.Itoa(f.inc.passes)
	params["passes_done"] = strconv.Itoa(passesDone)
	f.onlineEMParams(params)
	return params
}

// writeInterrupted writes the model of an incremental fit stopped by a
// signal in pass pass (passesDone complete): that of its last completed
// commit (for online EM, its last M-step), status "interrupted", the
// commit count in emsf.iteration and passes_done in the parameters; then
// it returns an error so that emsf exits non-zero. With no commit and no
// --init model there is nothing to keep, and nothing is written. The
// fingerprint is that of the whole input, or empty when the signal came
// before one pass read all of it.
func (f *fitFlags) writeInterrupted(e *env, inc streamFit, ids vocabs, fingerprint string, pass, passesDone int, cause error) error {
	commits := inc.Stats().Commits
	if commits == 0 && f.initModel == "" {
		return fmt.Errorf("interrupted in pass %d before the first commit: no model written: %w", pass, cause)
	}
	md := inc.Model()
	mf := &arrowio.ModelFile{Model: md, Fingerprint: fingerprint, Params: f.incrementalParams(md.M, passesDone), Status: statusInterrupted,
		States: ids.states, Actions: ids.actions}
	// The model is written even after a signal cancelled the fit's context.
	if err := writeModelOut(context.Background(), &f.cluster.natsFlags, f.out, mf, f.format); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "model n=%d m=%d u=%d tie=%s: %d of %d passes complete, %d commits (%s), log-likelihood %.6g (of the last commit's counts, before it)\nwrote %s\n",
		md.N, md.M, md.U, md.Tie, passesDone, f.inc.passes, commits, statusInterrupted, md.LogLik, f.out)
	return fmt.Errorf("interrupted in pass %d of %d: wrote the model of the last completed commit (%d) to %s", pass, f.inc.passes, commits, f.out)
}

// fingerprintHash is the training-data fingerprint of a fit (loadData,
// the incremental fit), computed while streaming (shard.FingerprintHash:
// CRC-32C and CRC-32 (IEEE) of the rows, written "crc32c-ieee:" and 16
// hex digits, docs/formats.md). Both run in hardware (SSE 4.2,
// PCLMULQDQ), about 15× the speed of the SHA-256 that models written
// before 2026-11-23 record (16 hex digits, no prefix), which was the
// slowest stage of a first read: Arrow ingest of 10M transitions 0.46 →
// 0.30 s. Rows named by ids are hashed by the ids' bytes (the batch's
// views of the vocabularies, snapshots a consumer on another goroutine
// may read), never by their indices: the fingerprint does not depend on
// how a read numbered them. The fingerprint tells data sets apart;
// nothing compares it to decide anything.
type fingerprintHash struct{ h shard.FingerprintHash }

func newFingerprint() *fingerprintHash { return &fingerprintHash{} }

// addBatch adds every row of b, in order.
func (f *fingerprintHash) addBatch(b *arrowio.TransitionBatch) { f.addRows(b, 0) }

// addRows adds the rows of b from its row from on (a count of 1 each when
// b.Count is nil).
func (f *fingerprintHash) addRows(b *arrowio.TransitionBatch, from int) {
	var counts []float64
	if b.Count != nil {
		counts = b.Count[from:]
	}
	f.h.AddIDRows(b.State[from:], b.Action[from:], b.Next[from:], counts, b.StateIDs, b.ActionIDs)
}

// add is addBatch as a consumer of scanPipelined (on a goroutine of its
// own, beside the reading).
func (f *fingerprintHash) add(b *arrowio.TransitionBatch) error {
	f.addBatch(b)
	return nil
}

func (f *fingerprintHash) sum() string { return f.h.Sum().Fingerprint() }
