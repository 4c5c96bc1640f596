package factor

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Accel names the extrapolation a fit runs between EM passes.
type Accel int

const (
	// AccelNone is plain EM: one commit per pass.
	AccelNone Accel = iota
	// AccelSquarem is SQUAREM (Varadhan & Roland 2008, scheme S3) with
	// steps in log space, lengths in probability space and a
	// monotonicity safeguard (see squaremLoop).
	AccelSquarem
)

// String returns the name used on the command line and in model files.
func (a Accel) String() string {
	switch a {
	case AccelNone:
		return "none"
	case AccelSquarem:
		return "squarem"
	}
	return fmt.Sprintf("Accel(%d)", int(a))
}

// ParseAccel is the inverse of Accel.String.
func ParseAccel(s string) (Accel, error) {
	switch s {
	case "none":
		return AccelNone, nil
	case "squarem":
		return AccelSquarem, nil
	}
	return 0, fmt.Errorf("factor: unknown acceleration %q (want none or squarem)", s)
}

// SQUAREM's step-length bounds (the defaults of the authors' R package
// SQUAREM: step.max0 = 1, mstep = 4): a step is at least plain EM's
// (t = 1) and at most stepMax, which grows by squaremGrow whenever a
// step reaches it and shrinks by it (to at least 1) when a cycle is
// rejected.
const (
	squaremStepMax0 = 1.0
	squaremGrow     = 4.0
)

// EarlyStop is the held-out stopping rule of a fit (FitOptions): every
// accepted iterate (every pass of plain EM, every cycle of SQUAREM),
// never the start, is scored by Score, higher is better (emsf fit: the validation
// log-likelihood per transition under the tuned smoothing rule,
// Validation.Tune); the fit keeps the best-scoring iterate and stops
// once Patience scores in a row rose at most MinGain (in Score's units)
// over the score of the last gain (Prechelt's patience criterion; Keras'
// EarlyStopping min_delta): the best iterate is kept whatever it gained. Whatever stops the fit, the model it
// returns is the best-scoring iterate. Score must be deterministic (a
// function of the model only) for the fit to be.
type EarlyStop struct {
	Score func(md *Model) float64
	// Confirm, when set, rescores an iterate whose Score did not gain
	// (a dearer score, at least Score's for the same model: emsf fit
	// re-tunes every parameter of the rule, Validation.TuneLocal, where
	// Score re-tunes λ only); the iterate counts against the patience
	// only when Confirm does not gain either.
	Confirm func(md *Model) float64
	// ScoreOf and ConfirmOf, when set with Counted and Share, are Score
	// and Confirm of one action's validation transitions (its
	// log-likelihood per transition) under md's factors of that action:
	// a SQUAREM fit of a model without ties then stops each action at
	// its own optimum (squaremLoop's components). Counted reports
	// whether an action has validation counts; Share is its share of
	// them (the weight of its score in Score's).
	ScoreOf, ConfirmOf func(md *Model, action int) float64
	Counted            func(action int) bool
	Share              func(action int) float64
	Patience           int
	MinGain            float64
	// SaveRules and LoadRules, when set, take and put back the state
	// that Score and Confirm carry from one score to the next (the
	// smoothing rule's last choices): a resumed fit's rule goes on from
	// it (LoopState).
	SaveRules func() RuleState
	LoadRules func(RuleState) error
}

// The held-out stopping rule's defaults (emsf fit's and emsf serve's
// --patience and --min-gain; measured in docs/quality.md, rounds 4 and 5).
const (
	DefaultPatience = 5
	DefaultMinGain  = 1e-4
)

// EarlyStop returns the held-out stopping rule that scores each iterate
// on v's split: Score re-tunes λ, the weight of the factors (the cheap
// score), and an iterate that does not gain is rescored with every
// parameter of the rule re-tuned by a local search (Confirm) before it
// counts against the patience (with λ alone fits quit at iterates that a
// re-tuned rule scores better: docs/quality.md, round 3). Functions of
// the scores' count and the model: the fit stays deterministic.
func (v *Validation) EarlyStop(patience int, minGain float64, workers int) *EarlyStop {
	return &EarlyStop{Patience: patience, MinGain: minGain,
		Score:     func(md *Model) float64 { return v.TuneLambda(md, workers) },
		Confirm:   func(md *Model) float64 { return v.TuneLocal(md, workers) },
		ScoreOf:   func(md *Model, a int) float64 { return v.TuneLambdaOf(md, a, workers) },
		ConfirmOf: func(md *Model, a int) float64 { return v.TuneLocalOf(md, a, workers) },
		Counted:   func(a int) bool { return v.tot[a] > 0 },
		Share:     func(a int) float64 { return v.tot[a] / v.total },
		SaveRules: v.RuleState,
		LoadRules: v.SetRuleState,
	}
}

// earlyState follows an EarlyStop through a fit.
type earlyState struct {
	es *EarlyStop
	// one: the rule of action act's component, scored with ScoreOf on
	// the fit's model full (squaremLoop's components).
	one  bool
	act  int
	full *Model

	best  float64 // the best score, kept's
	ref   float64 // the score of the last gain
	bad   int
	evals int
	iter  int
	kept  *Model
	// last is the last score; seen the evaluations already reported.
	last float64
	seen int
}

// observe scores md (the iterate after iteration iter), keeps a copy of
// it when it is the best so far, and reports whether the patience ran
// out.
func (e *earlyState) observe(md *Model, iter int) bool {
	keep, stop := e.judge(md, iter)
	if keep {
		if e.kept == nil {
			e.kept = md.Clone()
		} else {
			copyFactors(e.kept, md)
		}
		e.keepMeta(md)
	}
	return stop
}

// judge scores md (the iterate after iteration iter) and reports whether
// it is the best so far, which the caller then keeps in e.kept (observe
// copies it), and whether the patience ran out. A gain is a score above
// MinGain over the last gain's score (ref), so steps below MinGain that
// add up to more within the patience still reset it; the best-scoring
// iterate is kept whatever it gained.
func (e *earlyState) judge(md *Model, iter int) (keep, stop bool) {
	minGain := e.es.MinGain
	if e.one {
		// A component's gain counts where it raises the fit's score
		// (its share of the validation counts times its own) by
		// MinGain, as in one score of every action.
		minGain /= e.es.Share(e.act)
	}
	gains := func(s float64) bool { return e.kept == nil || s > e.ref+minGain }
	var s float64
	if e.one {
		s = e.es.ScoreOf(e.full, e.act)
		if !gains(s) && e.es.ConfirmOf != nil {
			s = e.es.ConfirmOf(e.full, e.act)
		}
	} else {
		s = e.es.Score(md)
		if !gains(s) && e.es.Confirm != nil {
			s = e.es.Confirm(md)
		}
	}
	e.evals++
	e.last = s
	gained := gains(s)
	keep = e.kept == nil || s > e.best
	if keep {
		e.best, e.iter = s, iter
	}
	if gained {
		e.ref, e.bad = s, 0
		return keep, false
	}
	e.bad++
	return keep, e.bad >= e.es.Patience
}

// keepMeta records md's iteration, log-likelihood and WKL with the kept
// iterate.
func (e *earlyState) keepMeta(md *Model) {
	e.kept.Iteration, e.kept.LogLik, e.kept.WKL = md.Iteration, md.LogLik, md.WKL
}

// restore puts the best iterate back into md.
func (e *earlyState) restore(md *Model) {
	if e == nil || e.kept == nil {
		return
	}
	copyFactors(md, e.kept)
	md.Iteration, md.LogLik, md.WKL = e.kept.Iteration, e.kept.LogLik, e.kept.WKL
}

// copyFactors copies src's D and K into dst (same shape) and refreshes a
// Float32 dst's float32 copy of K^T.
func copyFactors(dst, src *Model) {
	for b := range src.D {
		copy(dst.D[b], src.D[b])
	}
	for b := range src.KT {
		copy(dst.KT[b], src.KT[b])
	}
	if dst.Precision == Float32 {
		dst.RoundFactors()
	}
}

// chunkRows is the number of rows of a factor block one piece of the
// extrapolation's sums covers: the pieces' sums are folded in piece
// order, so every sum is the same for any number of goroutines.
const chunkRows = 4096

// spanRows is the number of rows of a factor block one task of
// elementwise work covers (logarithms, exponentials, divisions): at the
// sizes of the real-data benchmark (n = 1000–4546) a block is one piece
// of chunkRows, and the work of a cycle beside its passes ran on one
// goroutine.
const spanRows = 512

// pieces runs f over the pieces [lo, hi) of chunkRows rows of n rows
// on up to workers goroutines, each piece once (spread).
func pieces(n, workers int, f func(p, lo, hi int)) {
	spread((n+chunkRows-1)/chunkRows, workers, func(p int) {
		f(p, p*chunkRows, min(n, (p+1)*chunkRows))
	})
}

// spread runs f(k) for every task k in [0, tasks) on up to workers
// goroutines, the caller's one of them, each task once, in no fixed
// order: tasks write apart, and whatever they sum is folded afterwards
// in a fixed order. The caller works rather than waits: on a loaded
// machine a call of a few microseconds of work (a validation score)
// need not wait for a new goroutine to be scheduled before it starts.
func spread(tasks, workers int, f func(k int)) {
	workers = max(1, min(workers, tasks))
	var next atomic.Int64
	run := func() {
		for k := int(next.Add(1) - 1); k < tasks; k = int(next.Add(1) - 1) {
			f(k)
		}
	}
	var wg sync.WaitGroup
	for range workers - 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run()
		}()
	}
	run()
	wg.Wait()
}

// blockRows splits nb blocks of n rows each into spans of rows of the
// given size: task k is block k/per, rows [lo, hi).
type blockRows struct {
	n, size, per int
}

func newBlockRows(n, size int) blockRows {
	return blockRows{n: n, size: size, per: (n + size - 1) / size}
}

// task returns the block and the rows of task k.
func (s blockRows) task(k int) (b, lo, hi int) {
	b, r := k/s.per, k%s.per
	return b, r * s.size, min(s.n, (r+1)*s.size)
}

// squaremLength returns the step length of a SQUAREM cycle from x0,
// x1 = F(x0) and x2 = F(x1): t = ‖r‖/‖v‖ with r = x1 − x0 and
// v = x2 − 2x1 + x0 over every entry of D and K (scheme S3), in
// probability space: entries on their way to 0, whose logarithms move
// most, would dominate a length measured in log space (spec §3.1).
// Sums run over pieces of rows (of every block at once, on up to
// workers goroutines) folded in order, block by block, D's before K's:
// the same for any workers. It returns 1 when v is 0.
func squaremLength(x0, x1, x2 *Model, workers int) float64 {
	return squaremLengthWith(x0, x1, x2, workers, useAVX512())
}

// squaremLengthWith is squaremLength, with kernels the sums of each
// piece's entries but the last few (fewer than 8) by lengthSumsAVX512:
// the same additions in the same order (a test compares them).
func squaremLengthWith(x0, x1, x2 *Model, workers int, kernels bool) float64 {
	n, m := x0.N, x0.M
	parts := func(md *Model) [][]float64 { return slices.Concat(md.D, md.KT) }
	a0, a1, a2 := parts(x0), parts(x1), parts(x2)
	sp := newBlockRows(n, chunkRows)
	sr, sv := make([]float64, len(a0)*sp.per), make([]float64, len(a0)*sp.per)
	spread(len(sr), workers, func(k int) {
		b, lo, hi := sp.task(k)
		a0, a1, a2 := a0[b], a1[b], a2[b]
		var r2, v2 float64
		q := lo * m
		if vec := (hi*m - q) &^ 7; kernels && vec > 0 {
			sums := [2]float64{}
			lengthSumsAVX512(&a0[q], &a1[q], &a2[q], vec, &sums[0])
			r2, v2 = sums[0], sums[1]
			q += vec
		}
		for ; q < hi*m; q++ {
			r := a1[q] - a0[q]
			v := float64(a2[q]-2*a1[q]) + a0[q]
			r2 += float64(r * r)
			v2 += float64(v * v)
		}
		sr[k], sv[k] = r2, v2
	})
	var rr, vv float64
	for k := range sr {
		rr += sr[k]
		vv += sv[k]
	}
	if !(vv > 0) {
		return 1
	}
	return math.Sqrt(rr / vv)
}

// extrapolate sets dst to the SQUAREM proposal of step length t from
// x0, x1, x2, taken in log space and renormalized per row (a softmax):
//
//	log x' = (1−t)²·log x0 + 2t(1−t)·log x1 + t²·log x2,
//
// which is x0 + 2t·r + t²·v in the coordinates log x (t = 1 gives x2).
// Entries that are 0 in x2 stay 0 (EM's support only shrinks, so the
// logarithms are defined on it); positive entries are floored at
// EntryFloor after normalizing. A row of D equal in x0 and x2 (no data)
// is copied. Rows of K are columns of K^T: their sums run over pieces
// of chunkRows rows folded in order, so dst is bitwise the same for any
// workers. The elementwise work (the rows of D, the logarithms,
// exponentials and divisions of K) runs on spans of spanRows rows of
// every block at once, on up to workers goroutines.
//
// lg0 and lg1, when not nil, hold log x0 and log x1 already taken (the
// prior's penalty takes them, penaltyLogs): the same values, not taken
// again.
func extrapolate(dst, x0, x1, x2 *Model, t float64, workers int, lg0, lg1 *extrapLogs) {
	extrap(dst, x0, x1, x2, t, workers, lg0, lg1, useExtrapAVX512())
}

// extrap is extrapolate, with the AVX-512 kernels where kernels (and m
// a multiple of 8) or the scalar loops: bitwise the same dst (a test
// compares them).
func extrap(dst, x0, x1, x2 *Model, t float64, workers int, lg0, lg1 *extrapLogs, kernels bool) {
	c0, c1, c2 := (1-t)*(1-t), 2*t*(1-t), t*t
	n, m := x0.N, x0.M
	cs := [3]float64{c0, c1, c2}
	// vec: the kernels of kernel_amd64.s (AVX-512, eight entries an
	// instruction) take the loops below, bitwise.
	vec := kernels && m%8 == 0
	// combine sets out[q] (log x2, taken) to the proposal's logarithm
	// where x2 is positive and x0 or x1 differs from it (where all three
	// agree the entry's own logarithm stays): from l0 and l1, log x0 and
	// log x1 taken by the penalty, or else taken here into scratch
	// (room for two of out). It returns the number of entries where x0 or
	// x1 differs from x2 (with vec; else -1).
	combine := func(out, a0, a1, a2, l0, l1 []float64, scratch *[]float64) int {
		if (l0 == nil || l1 == nil) && len(*scratch) < 2*len(out) {
			*scratch = make([]float64, 2*len(out))
		}
		if l0 == nil {
			l0 = (*scratch)[:len(out)]
			logAll(l0, a0)
		}
		if l1 == nil {
			l1 = (*scratch)[len(out) : 2*len(out)]
			logAll(l1, a1)
		}
		if vec {
			l0, l1, a0, a1, a2 = l0[:len(out)], l1[:len(out)], a0[:len(out)], a1[:len(out)], a2[:len(out)]
			return combineAVX512(&out[0], &a0[0], &a1[0], &a2[0], &l0[0], &l1[0], len(out), &cs[0])
		}
		for q := range out {
			if a2[q] > 0 && (a0[q] != a2[q] || a1[q] != a2[q]) {
				out[q] = float64(float64(c0*l0[q])+float64(c1*l1[q])) + float64(c2*out[q])
			}
		}
		return -1
	}
	span := func(l []float64, lo, hi int) []float64 {
		if l == nil {
			return nil
		}
		return l[lo:hi]
	}
	// finish turns a row of D's logarithms d (of x2's row a2) into the
	// proposal's row: less their maximum, exponentiated, normalized.
	finish := func(d, a2 []float64) {
		mx := math.Inf(-1)
		for l := range m {
			if a2[l] > 0 {
				mx = max(mx, d[l])
			}
		}
		for l := range m {
			if a2[l] > 0 {
				d[l] -= mx
			} else {
				d[l] = 0 // any finite value: set to 0 below
			}
		}
		expAll(d, d)
		s := 0.0
		for l := range m {
			if a2[l] > 0 {
				s += d[l]
			} else {
				d[l] = 0
			}
		}
		for l := range m {
			if a2[l] > 0 {
				d[l] = max(d[l]/s, EntryFloor)
			}
		}
	}
	// row sets row i of D block b.
	row := func(b, i int, scratch *[]float64) {
		r := i * m
		a0, a1, a2, d := x0.D[b][r:r+m], x1.D[b][r:r+m], x2.D[b][r:r+m], dst.D[b][r:r+m]
		l0, l1 := lg0.block(lg0.d(), b), lg1.block(lg1.d(), b)
		if vec {
			// The row is equal in x0, x1 and x2 where combine counts
			// no entry that differs: the logarithms were taken for
			// nothing (rows without data, a few).
			logAll(d, a2)
			if combine(d, a0, a1, a2, span(l0, r, r+m), span(l1, r, r+m), scratch) == 0 {
				copy(d, a2)
				return
			}
			rowMaxSubAVX512(&d[0], &a2[0], m)
			expAll(d, d)
			rowSumDivAVX512(&d[0], &a2[0], m)
			return
		}
		if slices.Equal(a0, a2) && slices.Equal(a1, a2) {
			copy(d, a2)
			return
		}
		logAll(d, a2)
		combine(d, a0, a1, a2, span(l0, r, r+m), span(l1, r, r+m), scratch)
		finish(d, a2)
	}
	nd, nk := len(x0.D), len(x0.KT)
	sp := newBlockRows(n, spanRows)
	// The rows of D, and the logarithms of K's proposal with their
	// maxima per span and hidden state.
	mxs := make([]float64, nk*sp.per*m)
	spread((nd+nk)*sp.per, workers, func(k int) {
		b, lo, hi := sp.task(k)
		var scratch []float64
		if b < nd {
			for i := lo; i < hi; i++ {
				row(b, i, &scratch)
			}
			return
		}
		b -= nd
		l0, l1 := lg0.block(lg0.kt(), b), lg1.block(lg1.kt(), b)
		a0, a1, a2, kt := x0.KT[b], x1.KT[b], x2.KT[b], dst.KT[b]
		q0, q1 := lo*m, hi*m
		logAll(kt[q0:q1], a2[q0:q1])
		combine(kt[q0:q1], a0[q0:q1], a1[q0:q1], a2[q0:q1], span(l0, q0, q1), span(l1, q0, q1), &scratch)
		mx := mxs[(k-nd*sp.per)*m:][:m]
		for l := range mx {
			mx[l] = math.Inf(-1)
		}
		if vec {
			colMaxAVX512(&mx[0], &kt[q0], &a2[q0], hi-lo, m)
			return
		}
		for j := lo; j < hi; j++ {
			for l := range m {
				if q := j*m + l; a2[q] > 0 {
					mx[l] = max(mx[l], kt[q])
				}
			}
		}
	})
	// Each hidden state's maximum (a maximum is the same in any order).
	mx := make([]float64, nk*m)
	for b := range nk {
		for l := range m {
			mx[b*m+l] = math.Inf(-1)
			for r := range sp.per {
				mx[b*m+l] = max(mx[b*m+l], mxs[(b*sp.per+r)*m+l])
			}
		}
	}
	spread(nk*sp.per, workers, func(k int) {
		b, lo, hi := sp.task(k)
		a2, kt, mx := x2.KT[b], dst.KT[b], mx[b*m:b*m+m]
		if vec {
			colSubAVX512(&kt[lo*m], &a2[lo*m], &mx[0], hi-lo, m)
			expAll(kt[lo*m:hi*m], kt[lo*m:hi*m])
			return
		}
		for j := lo; j < hi; j++ {
			for l := range m {
				if q := j*m + l; a2[q] > 0 {
					kt[q] -= mx[l]
				} else {
					kt[q] = 0 // any finite value: set to 0 below
				}
			}
		}
		expAll(kt[lo*m:hi*m], kt[lo*m:hi*m])
	})
	// The sums per hidden state, per piece of chunkRows rows in row
	// order, folded in piece order.
	pc := newBlockRows(n, chunkRows)
	sums := make([]float64, nk*pc.per*m)
	spread(nk*pc.per, workers, func(k int) {
		b, lo, hi := pc.task(k)
		a2, kt, s := x2.KT[b], dst.KT[b], sums[k*m:k*m+m]
		if vec {
			colSumAVX512(&s[0], &kt[lo*m], &a2[lo*m], hi-lo, m)
			return
		}
		for j := lo; j < hi; j++ {
			for l := range m {
				q := j*m + l
				if a2[q] > 0 {
					s[l] += kt[q]
				} else {
					kt[q] = 0
				}
			}
		}
	})
	tot := make([]float64, nk*m)
	for b := range nk {
		for p := range pc.per {
			addTo(tot[b*m:b*m+m], sums[(b*pc.per+p)*m:][:m])
		}
	}
	spread(nk*sp.per, workers, func(k int) {
		b, lo, hi := sp.task(k)
		a2, kt, s := x2.KT[b], dst.KT[b], tot[b*m:b*m+m]
		if vec {
			colDivAVX512(&kt[lo*m], &a2[lo*m], &s[0], hi-lo, m)
			return
		}
		for j := lo; j < hi; j++ {
			for l := range m {
				if q := j*m + l; a2[q] > 0 {
					kt[q] = max(kt[q]/s[l], EntryFloor)
				}
			}
		}
	})
	if dst.Precision == Float32 {
		dst.RoundFactors()
	}
}

// extrapLogs are the logarithms of a point's entries that the prior's
// penalty took (penaltyLogs): of D, of K^T, or nil for a part not taken.
type extrapLogs struct {
	D, KT [][]float64
}

func (l *extrapLogs) d() [][]float64 {
	if l == nil {
		return nil
	}
	return l.D
}

func (l *extrapLogs) kt() [][]float64 {
	if l == nil {
		return nil
	}
	return l.KT
}

// block returns part's block b, or nil.
func (*extrapLogs) block(part [][]float64, b int) []float64 {
	if part == nil {
		return nil
	}
	return part[b]
}

// swapFactors exchanges the factors of a and b (D, K^T and a Float32
// model's float32 copy of K^T), two models of one shape and precision:
// SQUAREM's cycle passes its points between buffers instead of copying
// them (squaremLoop).
func swapFactors(a, b *Model) {
	a.D, b.D = b.D, a.D
	a.KT, b.KT = b.KT, a.KT
	a.kt32, b.kt32 = b.kt32, a.kt32
}

// blockView returns a one-action model of action a's blocks of md, a
// model without ties: the same D and K^T blocks (and float32 copy), not
// copied, in slices of its own (a view's factors can be swapped without
// touching md's; setBlock puts them back).
func (md *Model) blockView(a int) *Model {
	v := *md
	v.U, v.Tie, v.Smoothing = 1, TieNone, nil
	v.D, v.KT = [][]float64{md.D[a]}, [][]float64{md.KT[a]}
	v.kt32 = nil
	if len(md.kt32) == len(md.KT) {
		v.kt32 = [][]float32{md.kt32[a]}
	}
	return &v
}

// setBlock makes action a's blocks of md those of v (a blockView's).
func (md *Model) setBlock(a int, v *Model) {
	md.D[a], md.KT[a] = v.D[0], v.KT[0]
	if v.kt32 != nil {
		if len(md.kt32) != len(md.KT) {
			md.kt32 = make([][]float32, len(md.KT))
		}
		md.kt32[a] = v.kt32[0]
	}
}

// squaremBufs are the models that hold SQUAREM's points besides the fit's
// own: made as the cycle first needs them (clones of the fit's model, so
// of its shape and precision), reused afterwards.
type squaremBufs struct {
	md  *Model
	all []*Model
}

// take returns a buffer that is none of live (the points the loop still
// needs).
func (s *squaremBufs) take(live ...*Model) *Model {
	for _, b := range s.all {
		if !slices.Contains(live, b) {
			return b
		}
	}
	b := s.md.Clone()
	b.Smoothing = nil
	s.all = append(s.all, b)
	return b
}

// squaremLoop is Loop with SQUAREM (opts.Accel, checked by checkAccel).
// A cycle from an accepted point x0 costs three passes:
//
//	pass on x0 → L(x0), x1 = F(x0)
//	pass on x1 → L(x1), x2 = F(x1); t = clamp(‖r‖/‖v‖, 1, stepMax);
//	             x' = extrapolate(x0, x1, x2, t)
//	pass on x' → x_new = F(x')
//
// and the next cycle's first pass, on x_new, decides (deferred check):
// x_new is accepted when L(x_new) ≥ L(x1), else the cycle is rejected
// (two passes lost), the fit goes on from x2 (L(x2) ≥ L(x1) since EM
// never decreases it) and stepMax shrinks. So every accepted point's
// log-likelihood is at least that of the EM step F(x0) of the cycle it
// replaced, and the values the converger and the progress see (those
// of accepted points and of F(x0); NaN for x' and rejected points) never
// decrease. Every pass computes the log-likelihood. Iterations count
// passes; md.Iteration too. The held-out score (EarlyStop) is taken at
// every accepted x0. Extrapolation is elementwise with sums over pieces
// of rows folded in order, so the fit is bitwise the same for any
// number of workers.
//
// md always holds the point of the next pass; the points the cycle keeps
// (x0, x1, x2, the best iterate of the held-out rule) are buffers
// (squaremBufs) that trade factors with md (swapFactors): each commit
// writes F(p) into md from the statistics of the pass on p, with p in a
// buffer (commitFrom, mapCommit), so no point is copied. x2 is the
// buffer back; with t = 1 the proposal is x2 itself, and the buffer that
// keeps the proposal through its pass is back.
//
// Components. A model whose actions share no factor (TieNone, u > 1) is
// u independent fits: the likelihood, the prior and the validation score
// are sums over the actions, and each action's EM step reads and writes
// its own blocks only. Each action is then a component with its own
// cycle (its step length, its safeguard, its rejections) and its own
// held-out rule (EarlyStop.ScoreOf: its validation transitions), driven
// by the same passes: an action stops at its own optimum, and once it
// stopped the local stepper leaves its blocks out of the passes. One
// joint cycle would take one step length for all actions and run every
// action until the last one stops (on the dependency graph of issue 28
// the actions' own optima came after 37, 22 and 82 passes; the joint
// fit ran 140 passes of all three). The converger's iteration and time
// limits, and its relative change (of the sum of the components' last
// objectives), stay joint. Each component's point is bitwise what the
// fit of its action alone (a one-action model of its blocks) reaches in
// as many passes, whatever the other components do, so the fit is the
// same with a stepper that computes every block (a cluster's). Tied
// models and one-action models are one component: the cycle above.
func squaremLoop(ctx context.Context, md *Model, blocks []*Block, step Stepper, opts FitOptions, hooks LoopHooks, acc *Accumulator, total, dataTerm float64, priorQs [][]float64) (FitResult, error) {
	conv := opts.Converger
	comps := squaremComps(md, blocks, opts, total, dataTerm, priorQs)
	whole := comps[0].act < 0
	tol := conv.Tol
	if !whole {
		// Each component watches its own change (sqComp.ends); the
		// limits stay the fit's.
		conv.Tol = 0
	}
	setter, _ := step.(ActionFilter)
	active := make([]bool, md.U)
	// The penalty of a proposal x' is used only when the fit may end on
	// its pass (an iteration or time limit).
	proposalPenalty := func(iter int) bool {
		return conv.TimeLimit > 0 || conv.MaxIter > 0 && iter >= conv.MaxIter
	}
	first := max(hooks.Start, 1)
	base := md.Iteration - (first - 1)
	start := time.Now()
	prev := math.NaN()
	res := FitResult{LogLik: math.NaN()}
	if hooks.Resume != nil {
		status, err := resumeLoop(hooks.Resume, first, func(s *loopSave) error {
			return restoreComps(comps, s, hooks.Resume, md, opts.EarlyStop)
		}, &prev, &res, &conv)
		if err != nil {
			return res, err
		}
		if status != NotTerminated {
			// The checkpoint is of the fit's last iteration: its end
			// again.
			for _, c := range comps {
				res.Rejected += c.rejected
			}
			if whole {
				comps[0].early.finish(md, &res)
			} else {
				compsFinish(md, comps, opts.EarlyStop, dataTerm, total, &res)
			}
			return res, nil
		}
		if !whole {
			for _, c := range comps {
				active[c.act] = !c.done
			}
			if setter != nil {
				setter.SetActive(active)
			}
		}
	}
	for iter := first; ; iter++ {
		t0 := time.Now()
		if err := step.Step(ctx, iter, md, acc, true); err != nil {
			return res, err
		}
		if whole {
			if err := CheckSumX(acc.SumX, total); err != nil {
				return res, err
			}
		}
		if math.IsNaN(acc.LogLik) {
			return res, fmt.Errorf("factor: iteration %d: the log-likelihood is NaN", iter)
		}
		seen, stop, anySeen := math.NaN(), false, false
		for _, c := range comps {
			if c.done {
				continue
			}
			av := acc
			if !whole {
				av = acc.blockView(c.act)
				if err := CheckSumX(av.SumX, c.total); err != nil {
					return res, fmt.Errorf("factor: action %d: %w", c.act, err)
				}
			}
			s, st := c.step(iter, av, opts, proposalPenalty(iter))
			if whole {
				seen, stop = s, st
				md.Iteration = base + iter
				md.LogLik = acc.LogLik
				md.WKL = math.NaN()
				if acc.SumX > 0 {
					md.WKL = (dataTerm - acc.LogLik) / acc.SumX
				}
				continue
			}
			c.vm.Iteration = base + iter
			c.seen, c.stop = s, st
			if !math.IsNaN(s) {
				c.last, anySeen = s, true
			}
		}
		now := time.Now()
		if !whole {
			if anySeen {
				seen = 0
				for _, c := range comps {
					seen += c.last
				}
			}
			for _, c := range comps {
				if !c.done && c.ends(tol) {
					// This action's end: its last proposal checked, its
					// best iterate back, its blocks out of the passes
					// from now on.
					c.end()
					c.early.restore(c.vm)
					c.done = true
				}
			}
			// md holds the point of the next pass (what a checkpoint of
			// this iteration stores, hooks.Committed), and the passes
			// leave out the actions that stopped.
			for _, c := range comps {
				md.setBlock(c.act, c.vm)
				active[c.act] = !c.done
			}
			if setter != nil {
				setter.SetActive(active)
			}
			md.Iteration = base + iter
			md.LogLik, md.WKL = compsLogLik(comps, dataTerm, total)
		}
		st := IterStats{Iteration: iter, LogLik: seen, RelChange: math.NaN(),
			IterTime: now.Sub(t0), Elapsed: now.Sub(start), NNZ: acc.NNZ, SumX: acc.SumX}
		if !math.IsNaN(seen) {
			if !math.IsNaN(prev) {
				st.RelChange = (seen - prev) / math.Abs(seen)
			}
			prev = seen
			res.LogLik = seen
		}
		res.Iterations = iter
		res.Elapsed = st.Elapsed
		status := conv.Check(iter, seen, st.Elapsed)
		if !whole {
			stop = compsStopped(comps)
			if status == NotTerminated && stop && compsConverged(comps) {
				status = Converged
			}
		}
		if stop && status == NotTerminated {
			status = HeldOutOptimum
		}
		st.HeldOut = math.NaN()
		if whole {
			comps[0].early.stats(&st)
		} else {
			compsStats(comps, opts.EarlyStop, &st)
			st.Actions = len(comps)
			for _, c := range comps {
				if !c.done {
					st.Running++
				}
			}
		}
		if status != NotTerminated {
			for _, c := range comps {
				if !c.done {
					c.end()
				}
			}
		}
		if status != NotTerminated && !whole {
			for _, c := range comps {
				c.early.restore(c.vm)
				md.setBlock(c.act, c.vm)
			}
			compsFinish(md, comps, opts.EarlyStop, dataTerm, total, &res)
		}
		if hooks.Committed != nil {
			var ls *LoopState
			if hooks.SaveState {
				var err error
				ls, err = saveComps(comps, md, iter, status, prev, res.LogLik, conv, opts.EarlyStop)
				if err != nil {
					return res, err
				}
			}
			if err := hooks.Committed(ctx, st, status, ls); err != nil {
				return res, err
			}
		}
		if opts.Progress != nil {
			opts.Progress(st)
		}
		if status != NotTerminated {
			res.Status = status
			for _, c := range comps {
				res.Rejected += c.rejected
			}
			if whole {
				comps[0].early.finish(md, &res)
			}
			return res, nil
		}
	}
}

// The phases of a SQUAREM cycle: the pass is on an accepted point (or
// on x_new, pending), on x1, on the proposal x'.
const (
	atX0 = iota
	atX1
	atProposal
)

// sqComp is a component of a SQUAREM fit (squaremLoop): the whole model
// (act < 0; vm is the fit's model) or one action of a model without ties
// (vm a view of its blocks, Model.blockView), with its cycle's state.
type sqComp struct {
	act   int
	vm    *Model
	bufs  *squaremBufs
	early *earlyState // nil: no held-out rule (none, or no validation counts)
	// lg0 and lg1 hold log x0 and log x1, taken by the penalty; q is
	// the prior's q of the component's K blocks (nil: no prior).
	lg0, lg1        *extrapLogs
	prior           *Prior
	q               [][]float64
	total, dataTerm float64
	workers         int
	stepMax         float64
	phase           int
	pending         bool
	l1, ll          float64 // L(x1) of the pending cycle; the last pass's objective
	x0, x1, back    *Model  // back: x2, where the cycle goes back to
	// last is the last objective of the component the converger saw
	// (components of several); done, status: the component stopped.
	last     float64
	done     bool
	status   Status
	rejected int
	// seen and stop are the last pass's objective and held-out verdict
	// (step's); prevTol the component's last objective that ends
	// compared.
	seen, prevTol float64
	stop          bool
}

// ends reports whether a component of several ends after its pass: its
// held-out rule stopped it, or its objective changed by at most tol
// (relative) from its last accepted point to this one (its own fit's
// rule, between the points a cycle accepts: a pass on x1 moves by one EM
// step, which on these problems is far less than a cycle's progress and
// stopped actions whose held-out score still rose).
func (c *sqComp) ends(tol float64) bool {
	if c.stop {
		c.status = HeldOutOptimum
		return true
	}
	if tol <= 0 || math.IsNaN(c.seen) || c.phase != atX1 {
		return false
	}
	prev := c.prevTol
	c.prevTol = c.seen
	if !math.IsNaN(prev) && math.Abs(c.seen-prev)/math.Max(math.Abs(c.seen), math.SmallestNonzeroFloat64) <= tol {
		c.status = Converged
		return true
	}
	return false
}

// squaremComps returns the components of a SQUAREM fit of md (see
// squaremLoop): one per action where md has no ties, several actions and,
// with a held-out rule, one that scores actions apart (ScoreOf); else
// the whole model.
func squaremComps(md *Model, blocks []*Block, opts FitOptions, total, dataTerm float64, priorQs [][]float64) []*sqComp {
	newComp := func(act int, vm *Model, q [][]float64, total, dataTerm float64) *sqComp {
		c := &sqComp{act: act, vm: vm, bufs: &squaremBufs{md: vm}, prior: opts.Prior, q: q,
			total: total, dataTerm: dataTerm, workers: opts.Workers, stepMax: squaremStepMax0, last: math.NaN(), prevTol: math.NaN()}
		if es := opts.EarlyStop; es != nil && (act < 0 || es.Counted(act)) {
			c.early = &earlyState{es: es, one: act >= 0, act: act, full: md}
		}
		if q != nil {
			c.lg0, c.lg1 = opts.Prior.newExtrapLogs(vm), opts.Prior.newExtrapLogs(vm)
		}
		return c
	}
	es := opts.EarlyStop
	if md.Tie != TieNone || md.U < 2 || es != nil && (es.ScoreOf == nil || es.Counted == nil) {
		return []*sqComp{newComp(-1, md, priorQs, total, dataTerm)}
	}
	totals := make([]float64, md.U)
	byAction := make([][]*Block, md.U)
	for _, b := range blocks {
		byAction[b.Action] = append(byAction[b.Action], b)
	}
	comps := make([]*sqComp, md.U)
	for a := range md.U {
		totals[a] = TotalCount(byAction[a])
		var q [][]float64
		if priorQs != nil {
			q = [][]float64{priorQs[a]}
		}
		comps[a] = newComp(a, md.blockView(a), q, totals[a], DataTerm(byAction[a]))
	}
	return comps
}

// step moves the component's cycle on after the pass on its point, whose
// statistics are av: it returns the objective the converger sees (NaN
// for points not kept) and whether the held-out rule stops the
// component. withProposal: take the penalty of a proposal too (the fit
// may end on its pass).
func (c *sqComp) step(iter int, av *Accumulator, opts FitOptions, withProposal bool) (seen float64, stop bool) {
	md := c.vm
	ll := av.LogLik // the objective: with a prior, penalized
	if c.q != nil && (c.phase != atProposal || withProposal) {
		// Those of x0 and x1 keep their logarithms for extrapolate.
		var logs *extrapLogs
		switch c.phase {
		case atX0:
			logs = c.lg0
		case atX1:
			logs = c.lg1
		}
		ll += c.prior.penaltyLogs(md, c.q, logs, c.workers)
	}
	c.ll = ll
	kept := func() *Model {
		if c.early == nil {
			return nil
		}
		return c.early.kept
	}
	// commit moves md's point (the pass's) to a buffer that is none of
	// live, commits its pass into md and returns the buffer; with best,
	// the buffer is the held-out rule's best iterate too.
	commit := func(best bool, live ...*Model) *Model {
		p := c.bufs.take(live...)
		swapFactors(md, p)
		if best {
			c.early.kept = p
			c.early.keepMeta(md)
		}
		if c.q != nil {
			mapCommit(md, p, av, c.prior, c.q, c.dataTerm, c.workers)
		} else {
			av.commitFrom(md, p, 1, c.dataTerm, c.workers)
		}
		return p
	}
	seen = ll
	switch c.phase {
	case atX0:
		if c.pending && ll < c.l1 {
			// x_new is worse than the EM step it replaced: back to x2.
			swapFactors(md, c.back)
			c.back = nil
			c.stepMax = max(squaremStepMax0, c.stepMax/squaremGrow)
			c.rejected++
			seen = math.NaN()
			c.pending = false
			break
		}
		c.pending, c.back = false, nil
		keep := false
		if c.early != nil && iter > 1 {
			// Not the start: as in plain EM's loop, the held-out rule
			// chooses among the fit's iterates (a random start kept
			// would make the model a function of the seed).
			keep, stop = c.early.judge(md, iter-1)
		}
		if keep {
			// x0 is the best iterate too: one buffer is both (the one
			// kept before is none of the live points).
			c.x0 = commit(true)
		} else {
			c.x0 = commit(false, kept())
		}
		c.phase = atX1
	case atX1:
		c.l1 = ll
		c.x1 = commit(false, c.x0, kept())
		t := squaremLength(c.x0, c.x1, md, c.workers)
		t = max(1, min(t, c.stepMax))
		if t == c.stepMax {
			c.stepMax *= squaremGrow
		}
		if t > 1 {
			c.back = c.bufs.take(c.x0, c.x1, kept())
			swapFactors(md, c.back)
			extrapolate(md, c.x0, c.x1, c.back, t, c.workers, c.lg0, c.lg1)
		}
		c.x0, c.x1 = nil, nil
		c.phase = atProposal
	case atProposal:
		seen = math.NaN()
		p := commit(false, c.back, kept())
		if c.back == nil {
			c.back = p // x' = x2 (t = 1)
		}
		c.pending, c.phase = true, atX0
	}
	return seen, stop
}

// end is the component's end when the fit stops on a pass that left a
// proposal's x_new = F(x') unchecked: it is kept only when x' itself was
// no worse than x1 (then L(x_new) ≥ L(x') ≥ L(x1)); else the component
// ends on x2.
func (c *sqComp) end() {
	if c.pending && c.ll < c.l1 {
		swapFactors(c.vm, c.back)
	}
}

// compsLogLik returns the log-likelihood and WKL of the components'
// points: the sums of their last passes' (each view's LogLik).
func compsLogLik(comps []*sqComp, dataTerm, total float64) (ll, wkl float64) {
	for _, c := range comps {
		ll += c.vm.LogLik
	}
	return ll, (dataTerm - ll) / total
}

// compsStopped reports whether every component stopped, or every one
// with a held-out rule did while some has one (the others, which have no
// validation counts, then stop with them).
func compsStopped(comps []*sqComp) bool {
	all, scored := true, false
	for _, c := range comps {
		all = all && c.done
		if c.early != nil {
			scored = true
			if !c.done {
				return false
			}
		}
	}
	return all || scored
}

// compsConverged reports whether every component that stopped stopped
// at its relative change (the fit's status then is Converged; else
// HeldOutOptimum).
func compsConverged(comps []*sqComp) bool {
	for _, c := range comps {
		if c.done && c.status != Converged {
			return false
		}
	}
	return true
}

// compsStats records the components' held-out rules in st: the
// validation score of their last scores together (each action's weighed
// by its share of the validation counts) when one scored this pass, the
// most scores without gain of a component still running, and the
// latest best iteration.
func compsStats(comps []*sqComp, es *EarlyStop, st *IterStats) {
	if es == nil {
		return
	}
	scored := false
	st.HeldOutPatience = es.Patience
	for _, c := range comps {
		e := c.early
		if e == nil {
			continue
		}
		if e.evals > e.seen {
			scored, e.seen = true, e.evals
		}
		if !c.done {
			st.HeldOutBad = max(st.HeldOutBad, e.bad)
		}
		st.HeldOutBest = max(st.HeldOutBest, e.iter)
	}
	if scored {
		st.HeldOut = compsScore(comps, es, func(e *earlyState) float64 { return e.last })
	}
}

// compsScore returns the components' scores (score of each held-out
// rule) weighed by their shares of the validation counts.
func compsScore(comps []*sqComp, es *EarlyStop, score func(e *earlyState) float64) float64 {
	s := 0.0
	for _, c := range comps {
		if c.early != nil && c.early.evals > 0 {
			s += es.Share(c.act) * score(c.early)
		}
	}
	return s
}

// compsFinish records the end of a fit of several components in md and
// res: md's iteration is the latest of the components' kept iterates,
// its log-likelihood their sum; the held-out results are those of the
// components together.
func compsFinish(md *Model, comps []*sqComp, es *EarlyStop, dataTerm, total float64, res *FitResult) {
	md.Iteration = 0
	for _, c := range comps {
		md.Iteration = max(md.Iteration, c.vm.Iteration)
	}
	md.LogLik, md.WKL = compsLogLik(comps, dataTerm, total)
	if es == nil {
		return
	}
	res.HeldOut = compsScore(comps, es, func(e *earlyState) float64 { return e.best })
	for _, c := range comps {
		if e := c.early; e != nil {
			res.BestIteration = max(res.BestIteration, e.iter)
			res.Evaluations += e.evals
		}
	}
}

// ActionFilter is a Stepper that can leave the blocks of some actions
// out of its passes: a SQUAREM fit of a model without ties calls
// SetActive after every iteration with active[a] false for each action
// whose component stopped (squaremLoop), and no longer reads those
// actions' statistics. The local stepper and a cluster's coordinator
// leave them out; a stepper that computes them anyway gives the same fit
// (each K block's sums are those of its own reduction tree).
type ActionFilter interface {
	SetActive(active []bool)
}
