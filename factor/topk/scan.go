package topk

// scan answers a query by scoring every item, in index order: four rows
// at a time, each summed in Dot's order (four independent chains of adds,
// so that the scan runs at the speed of reading the items, not of one
// chain's add latency). A custom score (not nil) is called for every item.
func (ix *Index) scan(w []float64, custom func(int) float64, k int, s *Searcher, dst []Hit, st *Stats) []Hit {
	s.heap = s.heap[:0]
	n, m := ix.n, ix.m
	st.Scored += n
	offer := func(j int, v float64) {
		if len(s.heap) < k || worse(s.heap[0], Hit{j, v}) {
			s.push(Hit{j, v}, k)
		}
	}
	if custom != nil {
		for j := range n {
			offer(j, custom(j))
		}
		return s.sorted(dst)
	}
	items, wm := ix.items, w[:m]
	j := 0
	for ; j+4 <= n; j += 4 {
		r0 := items[j*m : j*m+m : j*m+m]
		r1 := items[(j+1)*m : (j+1)*m+m : (j+1)*m+m]
		r2 := items[(j+2)*m : (j+2)*m+m : (j+2)*m+m]
		r3 := items[(j+3)*m : (j+3)*m+m : (j+3)*m+m]
		var s0, s1, s2, s3 float64
		for l, wl := range wm {
			s0 += float64(wl * r0[l])
			s1 += float64(wl * r1[l])
			s2 += float64(wl * r2[l])
			s3 += float64(wl * r3[l])
		}
		if ix.extra != nil {
			x := ix.extra[j : j+4 : j+4]
			s0 += float64(w[m] * x[0])
			s1 += float64(w[m] * x[1])
			s2 += float64(w[m] * x[2])
			s3 += float64(w[m] * x[3])
		}
		offer(j, s0)
		offer(j+1, s1)
		offer(j+2, s2)
		offer(j+3, s3)
	}
	for ; j < n; j++ {
		v := Dot(wm, items[j*m:(j+1)*m])
		if ix.extra != nil {
			v += float64(w[m] * ix.extra[j])
		}
		offer(j, v)
	}
	return s.sorted(dst)
}

// Scan answers q by scoring every item (the exact scan TopK falls back
// to), whatever the lists would do: the yardstick of a query's cost.
func (ix *Index) Scan(q Query, s *Searcher, dst []Hit) []Hit {
	if s == nil {
		s = &Searcher{}
	}
	var st Stats
	return ix.scan(q.W, q.Score, min(q.K, ix.n), s, dst, &st)
}

// ScanFloat32 returns the k largest approximate scores of float32 items
// (n rows of m, row-major) against w, in no particular order among equal
// ones: a blocked scan at half the bytes of float64, for comparing a
// query's cost with a float32 SIMD scan of K: the shadow scan's kernel,
// eight rows at a time (AVX2 with fused multiply-add where the CPU has
// them and m is a multiple of 8, else in Go). Its scores are not exact (float32 sums): the index never answers
// with them.
func ScanFloat32(items []float32, n, m int, w []float32, k int, dst []Hit) []Hit {
	var s Searcher
	s.reset()
	k = min(k, n)
	offer := func(j int, v float32) {
		h := Hit{j, float64(v)}
		if len(s.heap) < k || worse(s.heap[0], h) {
			s.push(h, k)
		}
	}
	kernel := dots32Go
	if m%8 == 0 {
		kernel = dots32
	}
	var out [shadowBlock]float32
	j := 0
	for ; j+8 <= n; j += shadowBlock {
		rows := min(shadowBlock, (n-j)&^7)
		kernel(out[:rows], w[:m], items[j*m:(j+rows)*m], rows, m)
		for r, v := range out[:rows] {
			offer(j+r, v)
		}
		if rows < shadowBlock {
			j += rows
			break
		}
	}
	for ; j < n; j++ {
		var v float32
		for l, wl := range w[:m] {
			v += wl * items[j*m+l]
		}
		offer(j, v)
	}
	return s.sorted(dst)
}

// dots32Go is the pure-Go float32 kernel: out[r] = Σ_c w[c]·rows[r·stride+c]
// for r < nrows, eight rows at a time; it returns the largest out[r] (0
// when all are 0 or less: the scores of non-negative w and rows are >= 0).
func dots32Go(out, w, rows []float32, nrows, stride int) float32 {
	w = w[:stride]
	var top float32
	for r := 0; r < nrows; r += 8 {
		var acc [8]float32
		rs := rows[r*stride : (r+8)*stride : (r+8)*stride]
		for c, wc := range w {
			acc[0] += wc * rs[c]
			acc[1] += wc * rs[stride+c]
			acc[2] += wc * rs[2*stride+c]
			acc[3] += wc * rs[3*stride+c]
			acc[4] += wc * rs[4*stride+c]
			acc[5] += wc * rs[5*stride+c]
			acc[6] += wc * rs[6*stride+c]
			acc[7] += wc * rs[7*stride+c]
		}
		copy(out[r:r+8], acc[:])
		for _, v := range acc {
			top = max(top, v)
		}
	}
	return top
}
