package factor

// runTwoPass is runColumns (float64 model, every row of K in place) in
// the two-pass layout of issue 13 item 3, bitwise the same sums:
//
//  1. row-major over the block's nonzeros whose columns lie in the span
//     [cols[c0], cols[c1-1]]: gather row j of K, g = Σ_l d_il·k_jl (kept
//     per nonzero, in CSR order), and add the D̂ terms row by row, each
//     row's in column order as runColumns adds them;
//  2. column-major over the span (the column index): for each column j,
//     K̂ row j += Σ_i (c/g)·(d_i ⊙ k_j) with the rows i ascending, and g
//     stored in column order for finishBlock's loglik.
//
// Every product and sum is the one runColumns computes, in the same
// order, so the partial is bitwise the same (TestTwoPassMatchesKernel).
// The K rows of pass 1 are prefetched 8 nonzeros ahead (in the AVX2
// kernel within a row, here the first ones of the next row); pass 2
// prefetches as runColumns does.
func runTwoPass(md *Model, ci *colIndex, s *Scratch, p *Partial, c0, c1 int, kt []float64, fast bool, dst *kSum) error {
	if c0 >= c1 {
		return nil
	}
	m := md.M
	b := s.blk
	nnz := len(b.Cols)
	if cap(s.gr) < nnz {
		s.gr = make([]float64, nnz, nnz+nnz/4)
		s.sc = make([]float64, nnz, nnz+nnz/4)
	}
	gr, sc := s.gr[:nnz], s.sc[:nnz]
	jlo, jhi := ci.cols[c0], ci.cols[c1-1]
	whole := c0 == 0 && c1 == len(ci.cols)

	// Pass 1: g and D̂, row-major.
	for r := range b.Rows {
		lo, hi := b.Ptr[r], b.Ptr[r+1]
		if !whole {
			for lo < hi && b.Cols[lo] < jlo {
				lo++
			}
			for hi > lo && b.Cols[hi-1] > jhi {
				hi--
			}
		}
		if fast {
			for q := b.Ptr[r+1]; q < min(b.Ptr[r+1]+prefetchAhead, int64(nnz)); q++ {
				prefetchR(&kt[int(b.Cols[q])*m], m*8)
			}
		}
		if lo == hi {
			continue
		}
		dr, dh := s.dl[r*m:r*m+m], p.Dh[r*m:r*m+m]
		if fast {
			runRowAVX2(&dr[0], &dh[0], &kt[0], &s.t[0], &b.Cols[lo], &b.Vals[lo], &gr[lo], int(hi-lo), m*8)
			continue
		}
		for q := lo; q < hi; q++ {
			j := int(b.Cols[q])
			g := prodSum(s.t, dr, kt[j*m:j*m+m])
			gr[q] = g
			w := b.Vals[q] / g
			for l, v := range s.t {
				dh[l] += float64(w * v)
			}
		}
	}

	// Pass 2: K̂, column-major.
	cols := ci.cols[:c1]
	for c := c0; c < c1; c++ {
		j := cols[c]
		if a := c + prefetchAhead; a < c1 {
			ja := int(cols[a]) * m
			if dst == nil {
				prefetchR(&kt[ja], m*8)
			} else {
				prefetchRW(&kt[ja], &dst.kh[ja], m*8)
			}
		}
		lo, hi := ci.ptr[c], ci.ptr[c+1]
		for q := lo; q < hi; q++ {
			g := gr[ci.csr[q]]
			s.gs[q] = g
			sc[q] = ci.vals[q] / g
		}
		krow := kt[int(j)*m : int(j)*m+m]
		var kh []float64
		switch {
		case dst == nil:
			kh = p.KhT[c*m : c*m+m]
		case hi-lo == 1:
			dst.touch(j)
			kh = dst.kh[int(j)*m : int(j)*m+m]
		default:
			clear(s.col)
			kh = s.col
		}
		if fast {
			runKAVX2(&krow[0], &kh[0], &s.dl[0], &ci.rows[lo], &sc[lo], int(hi-lo), m*8)
		} else {
			for q := lo; q < hi; q++ {
				d := s.dl[int(ci.rows[q])*m : int(ci.rows[q])*m+m]
				w := sc[q]
				for l, k := range krow {
					kh[l] += float64(w * float64(d[l]*k))
				}
			}
		}
		if dst != nil && hi-lo > 1 {
			dst.touch(j)
			addTo(dst.kh[int(j)*m:int(j)*m+m], s.col)
		}
	}
	return nil
}
