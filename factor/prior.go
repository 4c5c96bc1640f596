package factor

import (
	"fmt"
	"math"
	"sync"
)

// Prior is a Dirichlet prior on the rows of D and K that turns EM into
// MAP-EM (spec quality-and-acceleration §1.1; Asuncion et al., UAI 2009,
// on smoothing in topic models): a row i of D gets Dir(1 + D·1) and a
// row l of K gets Dir(1 + K·q), with q the next-state frequencies of the
// K block's actions (NewQ), so that the M-step adds pseudo-counts before
// it normalizes:
//
//	D_il = (D̂_il + D) / (x_i + m·D)        rows with x_i > 0
//	K_lj = (K̂_lj + K·q_j) / (y_l + K)
//
// A row with few counts is pulled towards the uniform mixture of
// hidden states, a hidden state with little weight towards the next-state
// frequencies: the shrinkage that counting gets from backoff, inside EM.
// The objective MAP-EM never decreases is the penalized log-likelihood
// L + D·Σ log D_il + K·Σ q_j log K_lj (Penalty), which SQUAREM's
// safeguard and the relative-change rule then watch. With D, K > 0 an
// entry that is 0 does not stay 0: not for models with sparsity masks.
// Elementwise given the global y, so bitwise the same for any workers.
type Prior struct {
	D, K float64
}

// The default prior of emsf fit and emsf serve (measured in
// docs/quality.md).
const (
	DefaultPriorD = 0.3
	DefaultPriorK = 30
)

// Active reports whether the prior adds anything.
func (p *Prior) Active() bool { return p != nil && (p.D > 0 || p.K > 0) }

// priorQ returns q per K block: the next-state frequencies of the
// block's actions (NewQ pooled over the actions sharing a K).
func priorQ(md *Model, blocks []*Block) [][]float64 {
	nk := len(md.KT)
	q := make([][]float64, nk)
	tot := make([]float64, nk)
	for b := range q {
		q[b] = make([]float64, md.N)
	}
	for _, bl := range blocks {
		kb := md.KBlock(bl.Action)
		for k, j := range bl.Cols {
			q[kb][j] += bl.Vals[k]
			tot[kb] += bl.Vals[k]
		}
	}
	for b, qb := range q {
		den := tot[b] + QHalf*float64(md.N)
		for j := range qb {
			qb[j] = (qb[j] + QHalf) / den
		}
	}
	return q
}

// mapCommit is Commit with α = 1 under the prior p (q per K block), for
// a pass on src whose commit goes to dst (dst == src: in place); as
// Accumulator.commitFrom, the entries the commit keeps (rows of D without
// data, entries of K whose denominator is 0) are copied from src, and
// dst is bitwise what copying src into it and committing in place
// writes.
func mapCommit(dst, src *Model, a *Accumulator, p *Prior, q [][]float64, dataTerm float64, workers int) {
	mapCommitWith(dst, src, a, p, q, dataTerm, workers, useAVX512())
}

// mapCommitWith is mapCommit, with the AVX-512 kernels (divRowAVX512,
// mapKAVX512: eight divisions an instruction; BenchmarkSquaremCycle's
// commit 1.22 → 0.37 ms) where kernels and m is a multiple of 8,
// else the scalar loops: bitwise the same (a test compares them).
func mapCommitWith(dst, src *Model, a *Accumulator, p *Prior, q [][]float64, dataTerm float64, workers int, kernels bool) {
	n, m := dst.N, dst.M
	vec := kernels && m%8 == 0
	if n*m < commitParallelMin {
		workers = 1
	}
	workers = max(1, min(workers, n))
	carry := dst != src
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lo, hi := w*n/workers, (w+1)*n/workers
			for b, d := range dst.D {
				dh, x := a.Dh[b], a.X[b]
				den := float64(m) * p.D
				for i := lo; i < hi; i++ {
					row, h := d[i*m:i*m+m], dh[i*m:i*m+m]
					if x[i] <= 0 {
						if carry {
							copy(row, src.D[b][i*m:i*m+m])
						}
						continue
					}
					s := x[i] + den
					if vec {
						divRowAVX512(&row[0], &h[0], m, p.D, s)
						continue
					}
					for l := range row {
						row[l] = (h[l] + p.D) / s
					}
				}
			}
			for b, kt := range dst.KT {
				kh, y, qb := a.KhT[b], a.Y[b], q[b]
				var old []float64
				if carry {
					old = src.KT[b]
				}
				if vec && hi > lo {
					// y + K per column, as the loop below adds it.
					var dens [64]float64
					den := dens[:0]
					if m > len(dens) {
						den = make([]float64, m)
					}
					den = den[:m]
					for l := range den {
						den[l] = y[l] + p.K
					}
					base := kt
					if carry {
						base = old
					}
					mapKAVX512(&kt[lo*m], &kh[lo*m], &base[lo*m], &den[0], &qb[lo], hi-lo, m, p.K)
					continue
				}
				for j := lo; j < hi; j++ {
					sq := float64(p.K * qb[j])
					for l := range m {
						if den := y[l] + p.K; den > 0 {
							kt[j*m+l] = (kh[j*m+l] + sq) / den
						} else if carry {
							kt[j*m+l] = old[j*m+l]
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	if dst.Precision == Float32 {
		dst.RoundFactors()
	}
	a.RecordPass(dst, dataTerm)
}

// Penalty returns the prior's log-density terms at md,
// D·Σ_il log D_il + K·Σ_lj q_j log K_lj over every entry (q per K
// block, priorQ), summed block by block in row order.
func (p *Prior) Penalty(md *Model, q [][]float64) float64 {
	return p.penaltyLogs(md, q, nil, 1)
}

// penaltyLogs is Penalty that also writes, when logs is not nil, the
// logarithm of every entry it takes into logs.D (where the prior's D >
// 0) and logs.KT (where its K > 0), shaped as md's blocks: SQUAREM's
// extrapolation then need not take them again (newExtrapLogs). With
// logs the logarithms are taken on up to workers goroutines (spans of
// spanRows rows of every block at once), then each block's sum on one
// (the blocks at once), and the blocks' sums are folded in Penalty's
// order: bitwise Penalty's value.
func (p *Prior) penaltyLogs(md *Model, q [][]float64, logs *extrapLogs, workers int) float64 {
	return p.penaltyLogsWith(md, q, logs, workers, useLogAVX512())
}

// penaltyLogsWith is penaltyLogs; with kernels (and m a multiple of 8)
// and logs, each block's logarithms and sum are taken together on one
// goroutine (the blocks at once), a row at a time by logRowSumAVX512:
// the sum's chain of additions runs beside the logarithms of the rows
// that follow instead of after all of them, and the logarithms are
// summed while in cache (BenchmarkSquaremCycle's penalty: about 2x
// cheaper on the AVX-512 machine of issue 28). Bitwise the same either
// way (a test compares them).
func (p *Prior) penaltyLogsWith(md *Model, q [][]float64, logs *extrapLogs, workers int, kernels bool) float64 {
	n, m := md.N, md.M
	// The blocks the penalty sums the logarithms of: D's, then K's.
	type part struct {
		src, lg []float64 // the block; its logarithms (logs) or nil
		k       bool      // a K block: its rows weighted by q
		b       int
	}
	var parts []part
	if p.D > 0 {
		for b, d := range md.D {
			parts = append(parts, part{src: d, lg: logs.block(logs.d(), b), b: b})
		}
	}
	if p.K > 0 {
		for b, kt := range md.KT {
			parts = append(parts, part{src: kt, lg: logs.block(logs.kt(), b), k: true, b: b})
		}
	}
	// sum returns t plus the part's terms of the logarithms lg of its
	// rows from row lo on, added in row order.
	sum := func(pt part, lo int, lg []float64, t float64) float64 {
		if !pt.k {
			for _, x := range lg {
				t += x
			}
			return t
		}
		qb := q[pt.b]
		for r := range len(lg) / m {
			x := 0.0
			for _, v := range lg[r*m : r*m+m] {
				x += v
			}
			t += float64(qb[lo+r] * x)
		}
		return t
	}
	ts := make([]float64, len(parts))
	if logs != nil && kernels && m%8 == 0 {
		spread(len(parts), workers, func(i int) {
			pt := parts[i]
			t := 0.0
			for r := 0; r < n; {
				var qr *float64
				if pt.k {
					qr = &q[pt.b][r]
				}
				r += logRowSumAVX512(&pt.lg[r*m], &pt.src[r*m], qr, n-r, m, &t)
				if r < n {
					// A row with an entry math.Log takes apart.
					lg := pt.lg[r*m : r*m+m]
					logAll(lg, pt.src[r*m:r*m+m])
					t = sum(pt, r, lg, t)
					r++
				}
			}
			ts[i] = t
		})
	} else if logs != nil {
		sp := newBlockRows(n, spanRows)
		spread(len(parts)*sp.per, workers, func(k int) {
			i, lo, hi := sp.task(k)
			logAll(parts[i].lg[lo*m:hi*m], parts[i].src[lo*m:hi*m])
		})
		spread(len(parts), workers, func(i int) {
			ts[i] = sum(parts[i], 0, parts[i].lg, 0)
		})
	} else {
		// A piece of rows at a time: Penalty holds one piece's
		// logarithms, not a copy of a factor.
		buf := make([]float64, min(n, chunkRows)*m)
		for i, pt := range parts {
			for lo := 0; lo < n; lo += chunkRows {
				hi := min(n, lo+chunkRows)
				lg := buf[:(hi-lo)*m]
				logAll(lg, pt.src[lo*m:hi*m])
				ts[i] = sum(pt, lo, lg, ts[i])
			}
		}
	}
	s := 0.0
	for i, pt := range parts {
		w := p.D
		if pt.k {
			w = p.K
		}
		s += float64(w * ts[i])
	}
	return s
}

// newExtrapLogs returns room for the logarithms penaltyLogs takes of a
// model shaped as md: D where the prior's D > 0, K^T where its K > 0.
func (p *Prior) newExtrapLogs(md *Model) *extrapLogs {
	l := &extrapLogs{}
	if p.D > 0 {
		for _, d := range md.D {
			l.D = append(l.D, make([]float64, len(d)))
		}
	}
	if p.K > 0 {
		for _, kt := range md.KT {
			l.KT = append(l.KT, make([]float64, len(kt)))
		}
	}
	return l
}

func (p *Prior) check() error {
	if p == nil {
		return nil
	}
	if !(p.D >= 0) || !(p.K >= 0) || math.IsInf(p.D, 0) || math.IsInf(p.K, 0) {
		return fmt.Errorf("factor: Dirichlet prior pseudo-counts D=%v K=%v must be finite and >= 0", p.D, p.K)
	}
	return nil
}
