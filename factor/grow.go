package factor

import "fmt"

// Grow returns a copy of md resized to n states and u actions (n >= md.N,
// u >= md.U), for data that reaches states or actions the model has not
// seen. What is learnt is kept and the new parts start neutral:
//
//   - a new state's row of every existing D block is uniform (1/m): nothing
//     is known about where it leads;
//   - every row of an existing K block keeps its shape on the old states,
//     scaled by md.N/n, and gives 1/n to each new state, so rows stay
//     stochastic, entries that were zero (masks) stay zero, and a new state
//     is reachable (a zero column would make its transitions impossible,
//     g = 0, for EM);
//   - the blocks of a new action (its D or K, whichever the tie mode gives
//     it) are those of NewRandom(n, md.M, u, md.Tie, md.Seed), so they are
//     what a fresh fit of that size would start from.
//
// Iteration and Seed are kept; LogLik and WKL become NaN (no pass has
// computed them for the new shape). The grown model carries no smoothing
// rule (the rule's counts are the old data's: a fit chooses its own).
// Grow with the same size returns a copy of the factors (CloneFactors).
func (md *Model) Grow(n, u int) (*Model, error) {
	if n < md.N || u < md.U {
		return nil, fmt.Errorf("factor: grow %dx%d model to n=%d u=%d: a model never shrinks", md.N, md.U, n, u)
	}
	if n == md.N && u == md.U {
		return md.CloneFactors(), nil
	}
	m := md.M
	out := NewModel(n, m, u, md.Tie)
	out.Iteration, out.Seed = md.Iteration, md.Seed
	var fresh *Model
	if NumD(u, md.Tie) > len(md.D) || NumK(u, md.Tie) > len(md.KT) {
		fresh = NewRandom(n, m, u, md.Tie, md.Seed)
	}
	for b := range out.D {
		if b >= len(md.D) {
			copy(out.D[b], fresh.D[b])
			continue
		}
		copy(out.D[b], md.D[b])
		for i := md.N; i < n; i++ {
			r := out.D[b][i*m : (i+1)*m]
			for l := range r {
				r[l] = 1 / float64(m)
			}
		}
	}
	scale := float64(md.N) / float64(n)
	for b := range out.KT {
		if b >= len(md.KT) {
			copy(out.KT[b], fresh.KT[b])
			continue
		}
		for x, v := range md.KT[b] {
			out.KT[b][x] = v * scale
		}
		for x := md.N * m; x < n*m; x++ {
			out.KT[b][x] = 1 / float64(n)
		}
	}
	return out, nil
}

// Smooth mixes every row of D and of K with the uniform distribution:
// D ← (1−eps)·D + eps/m, K ← (1−eps)·K + eps/n. Rows stay stochastic and
// every entry becomes positive, so every transition has probability at
// least eps²/n. A warm start needs it when new data may contain
// transitions the model gives probability 0 (a next state never seen
// before has a zero column of K after EM, and EM can never move an entry
// away from 0: the transition would be an error). It removes sparsity
// masks. eps must be in [0, 1).
func (md *Model) Smooth(eps float64) error {
	if !(eps >= 0 && eps < 1) {
		return fmt.Errorf("factor: smoothing weight %v must be in [0, 1)", eps)
	}
	if eps == 0 {
		return nil
	}
	mix := func(x []float64, u float64) {
		for k, v := range x {
			x[k] = (1-eps)*v + eps*u
		}
	}
	for _, d := range md.D {
		mix(d, 1/float64(md.M))
	}
	for _, kt := range md.KT {
		mix(kt, 1/float64(md.N))
	}
	// A Float32 model stays float32, its copy of K^T current.
	if md.Precision == Float32 {
		md.RoundFactors()
	}
	return nil
}
