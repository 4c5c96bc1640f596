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
// ones: a blocked scan at half the bytes of float64, eight rows at a
// time, for comparing a query's cost with a float32 scan of K. Its
// scores are not exact (float32 sums): the index never answers with it.
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
	j := 0
	for ; j+8 <= n; j += 8 {
		var acc [8]float32
		rows := items[j*m : (j+8)*m : (j+8)*m]
		for l, wl := range w[:m] {
			acc[0] += wl * rows[l]
			acc[1] += wl * rows[m+l]
			acc[2] += wl * rows[2*m+l]
			acc[3] += wl * rows[3*m+l]
			acc[4] += wl * rows[4*m+l]
			acc[5] += wl * rows[5*m+l]
			acc[6] += wl * rows[6*m+l]
			acc[7] += wl * rows[7*m+l]
		}
		for r, v := range acc {
			offer(j+r, v)
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
