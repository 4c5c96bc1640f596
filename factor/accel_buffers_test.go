package factor

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
)

// holeyData is a problem with every case a commit keeps entries in: rows
// i%7 == 3 have no data (their rows of D are kept), the last tenth of the
// states is never a next state, and hidden state m−1 of every K puts
// all its mass there, so it gets no weight (y = 0: without a prior on K
// its row of K is kept) while its entries of D may live.
func holeyData(n, u, m int, seed uint64) (*Model, []*Block) {
	return holeyDataTie(n, u, m, seed, TieNone)
}

// holeyDataTie is holeyData with the model's tie mode.
func holeyDataTie(n, u, m int, seed uint64, tie Tie) (*Model, []*Block) {
	unseen := n - n/10
	var blocks []*Block
	for _, b := range RandomCounts(n, u, 5, 7, seed) {
		var rows, cols []int32
		var vals []float64
		for r, i := range b.Rows {
			if i%7 == 3 {
				continue
			}
			for k := b.Ptr[r]; k < b.Ptr[r+1]; k++ {
				if int(b.Cols[k]) < unseen {
					rows, cols, vals = append(rows, i), append(cols, b.Cols[k]), append(vals, b.Vals[k])
				}
			}
		}
		nb, err := NewBlock(b.Action, rows, cols, vals)
		if err != nil {
			panic(err)
		}
		blocks = append(blocks, nb)
	}
	md := NewRandom(n, m, u, tie, seed+1)
	for _, kt := range md.KT {
		for j := range unseen {
			kt[j*m+m-1] = 0
		}
		normalizeCols(kt, n, m)
	}
	return md, blocks
}

// fitCopies is the SQUAREM loop as it was before its points traded
// buffers (squaremLoop): every point copied (copyFactors), every commit
// in place. The oracle of TestSquaremBuffersBitwise; it returns the
// objective of each pass the converger saw too.
func fitCopies(md *Model, blocks []*Block, opts FitOptions) (FitResult, []float64, error) {
	ctx := context.Background()
	step := &localStepper{blocks: blocks, workers: opts.Workers}
	conv := opts.Converger
	dataTerm := DataTerm(blocks)
	if md.Precision == Float32 {
		md.RoundFactors()
	}
	acc := NewAccumulator(md)
	var priorQs [][]float64
	if opts.Prior.Active() {
		priorQs = priorQ(md, blocks)
	}
	var early *earlyState
	if opts.EarlyStop != nil {
		early = &earlyState{es: opts.EarlyStop}
	}
	x0, x1, x2 := md.Clone(), md.Clone(), md.Clone()
	stepMax := squaremStepMax0
	phase, pending := 0, false
	var l1 float64
	var seenAll []float64
	prev := math.NaN()
	res := FitResult{LogLik: math.NaN()}
	for iter := 1; ; iter++ {
		if err := step.Step(ctx, iter, md, acc, true); err != nil {
			return res, nil, err
		}
		ll := acc.LogLik
		if priorQs != nil && (phase != 2 || conv.MaxIter > 0 && iter >= conv.MaxIter) {
			ll += opts.Prior.Penalty(md, priorQs)
		}
		commit := func() {
			if priorQs != nil {
				mapCommit(md, md, acc, opts.Prior, priorQs, dataTerm, opts.Workers)
			} else {
				acc.CommitWorkers(md, 1, dataTerm, opts.Workers)
			}
		}
		seen, stop := ll, false
		switch phase {
		case 0:
			if pending && ll < l1 {
				copyFactors(md, x2)
				stepMax = max(squaremStepMax0, stepMax/squaremGrow)
				res.Rejected++
				seen, pending = math.NaN(), false
				break
			}
			pending = false
			if early != nil && iter > 1 {
				stop = early.observe(md, iter-1)
			}
			copyFactors(x0, md)
			commit()
			phase = 1
		case 1:
			l1 = ll
			copyFactors(x1, md)
			commit()
			copyFactors(x2, md)
			t := max(1, min(squaremLength(x0, x1, x2, opts.Workers), stepMax))
			if t == stepMax {
				stepMax *= squaremGrow
			}
			if t > 1 {
				extrapolate(md, x0, x1, x2, t, opts.Workers, nil, nil)
			}
			phase = 2
		case 2:
			seen = math.NaN()
			commit()
			pending, phase = true, 0
		}
		md.Iteration = iter
		md.LogLik = acc.LogLik
		md.WKL = (dataTerm - acc.LogLik) / acc.SumX
		if !math.IsNaN(seen) {
			prev = seen
			res.LogLik = seen
		}
		seenAll = append(seenAll, seen)
		res.Iterations = iter
		status := conv.Check(iter, seen, 0)
		if stop && status == NotTerminated {
			status = HeldOutOptimum
		}
		if status != NotTerminated && pending && ll < l1 {
			copyFactors(md, x2)
		}
		if status != NotTerminated {
			_ = prev
			res.Status = status
			early.finish(md, &res)
			return res, seenAll, nil
		}
	}
}

// TestSquaremBuffersBitwise: SQUAREM's loop, whose points trade buffers,
// writes bitwise the model, the metadata and the results of the loop that
// copied them (fitCopies), on data with rows without data and a hidden
// state without weight, with and without each part of the prior, with
// the held-out rule (which keeps its best iterate in a buffer) and
// without, ending on each phase of a cycle, for float64 and float32 and
// 1, 2 and 3 workers; and the runs together reject proposals and take
// steps of length 1.
func TestSquaremBuffersBitwise(t *testing.T) {
	priors := []*Prior{nil, {D: 0.5, K: 20}, {D: 0.5}, {K: 20}}
	rejected := 0
	for _, size := range []struct{ n, u, m int }{{150, 2, 6}, {2*chunkRows + 100, 1, 8}} {
		for _, p := range priors {
			for _, prec := range []Precision{Float64, Float32} {
				for _, early := range []bool{false, true} {
					iters := []int{36, 37, 38}
					if size.n > chunkRows {
						iters = []int{10}
					}
					for _, maxIter := range iters {
						for _, w := range []int{1, 2, 3} {
							if size.n < chunkRows && w != 1+maxIter%3 || size.n > chunkRows && (w != 3 || early || p != nil && p.K > 0) {
								// 1, 2 and 3 workers across the iterations;
								// several pieces of rows and several
								// goroutines on the larger model, with
								// hidden states without weight.
								continue
							}
							name := fmt.Sprintf("n=%d prior=%+v %s early=%v iters=%d workers=%d", size.n, p, prec, early, maxIter, w)
							opts := func() FitOptions {
								o := FitOptions{Accel: AccelSquarem, Workers: w, Prior: p, Converger: Converger{MaxIter: maxIter}}
								if early {
									// A score of the model alone that rises
									// by 1 a pass up to iteration 15, then by
									// less than MinGain up to 21 (the best
									// iterate moves without a gain), then
									// falls (it stays) until the patience
									// runs out, unless the iterations do
									// first.
									o.EarlyStop = &EarlyStop{Patience: 4, MinGain: 0.5, Score: func(md *Model) float64 {
										it := float64(md.Iteration)
										return min(it, 15) + 0.01*max(0, min(it, 21)-15) - 0.1*max(0, it-21) + 1e-3*md.D[0][1]
									}}
								}
								return o
							}
							// K shared: one cycle over the whole model (a
							// model without ties runs a cycle per action,
							// TestSquaremComponents).
							want, blocks := holeyDataTie(size.n, size.u, size.m, 4, TieSharedK)
							want.SetPrecision(prec)
							wres, wseen, err := fitCopies(want, blocks, opts())
							if err != nil {
								t.Fatal(err)
							}
							got, _ := holeyDataTie(size.n, size.u, size.m, 4, TieSharedK)
							got.SetPrecision(prec)
							var gseen []float64
							o := opts()
							o.Progress = func(st IterStats) { gseen = append(gseen, st.LogLik) }
							gres, err := Fit(context.Background(), got, blocks, o)
							if err != nil {
								t.Fatal(err)
							}
							if !got.Equal(want) || !same32(got, want) {
								t.Fatalf("%s: the model differs from the copying loop's", name)
							}
							if got.Iteration != want.Iteration || !sameFloat(got.LogLik, want.LogLik) || !sameFloat(got.WKL, want.WKL) {
								t.Fatalf("%s: iteration, loglik, WKL %d %v %v, the copying loop's %d %v %v", name,
									got.Iteration, got.LogLik, got.WKL, want.Iteration, want.LogLik, want.WKL)
							}
							gres.Elapsed = 0
							if gres != wres || !slices.EqualFunc(gseen, wseen, sameFloat) {
								t.Fatalf("%s: result %+v, the copying loop's %+v; objectives seen %v, %v", name, gres, wres, gseen, wseen)
							}
							if err := got.Validate(); err != nil {
								t.Fatalf("%s: %v", name, err)
							}
							rejected += gres.Rejected
						}
					}
				}
			}
		}
	}
	t.Logf("%d proposals rejected", rejected)
	if rejected == 0 {
		t.Fatal("no fit rejected a proposal: the test does not test the way back")
	}
}

// same32 reports whether two models hold bitwise the same float32 copy
// of K^T (none for a Float64 model).
func same32(a, b *Model) bool {
	return slices.EqualFunc(a.kt32, b.kt32, func(x, y []float32) bool {
		return slices.EqualFunc(x, y, func(u, v float32) bool { return math.Float32bits(u) == math.Float32bits(v) })
	})
}

// TestCommitIntoAnother: a commit of a pass on src into another model
// (commitFrom, mapCommit: SQUAREM's buffers) writes bitwise what copying
// src into it and committing in place writes, whatever it held before,
// on data with rows without data and a hidden state without weight.
func TestCommitIntoAnother(t *testing.T) {
	for _, p := range []*Prior{nil, {D: 0.5, K: 20}, {D: 0.5}, {K: 20}} {
		for _, prec := range []Precision{Float64, Float32} {
			for _, w := range []int{1, 3} {
				if w == 1 && prec == Float32 {
					continue
				}
				src, blocks := holeyData(2*chunkRows+100, 2, 8, 5)
				src.SetPrecision(prec)
				acc := NewAccumulator(src)
				if err := Pass(context.Background(), src, blocks, acc, 1, true); err != nil {
					t.Fatal(err)
				}
				kept := 0 // entries the commit keeps
				for b := range acc.X {
					for _, x := range acc.X[b] {
						if x <= 0 {
							kept++
						}
					}
					for _, y := range acc.Y[b] {
						if y <= 0 && (p == nil || p.K == 0) {
							kept++
						}
					}
				}
				if kept == 0 {
					t.Fatal("the data leave no entry to keep")
				}
				q := priorQ(src, blocks)
				commit := func(dst, from *Model) {
					if p != nil {
						mapCommit(dst, from, acc, p, q, 0, w)
					} else {
						acc.commitFrom(dst, from, 1, 0, w)
					}
				}
				want := src.Clone()
				commit(want, want) // in place, in a copy of src
				got, _ := holeyData(2*chunkRows+100, 2, 8, 6)
				got.SetPrecision(prec) // another model altogether
				commit(got, src)
				if !got.Equal(want) || !same32(got, want) {
					t.Fatalf("prior %+v %s workers %d: the commit into another model differs", p, prec, w)
				}
			}
		}
	}
}
