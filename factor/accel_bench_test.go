package factor

import (
	"context"
	"testing"
)

// BenchmarkSquaremCycle times the parts of a SQUAREM cycle under the
// prior beside its three passes, at the size of the real-data benchmark's
// dependency graph (docs/quality.md: n = 4000, u = 3, order 32, about 10
// nonzeros per state), on 2 goroutines: one pass for scale, the prior's
// penalty with its logarithms (twice a cycle), a commit (three times),
// the step length and the extrapolation (once each).
func BenchmarkSquaremCycle(b *testing.B) {
	const n, u, m, workers = 4000, 3, 32, 2
	blocks := RandomCounts(n, u, 10, 5, 1)
	ctx := context.Background()
	p := &Prior{D: 0.5, K: 20}
	x0 := NewRandom(n, m, u, TieNone, 2)
	q := priorQ(x0, blocks)
	acc := NewAccumulator(x0)
	var ps Passer
	pass := func(md *Model) {
		if err := ps.Pass(ctx, md, blocks, acc, workers, true); err != nil {
			b.Fatal(err)
		}
	}
	pass(x0)
	x1 := x0.Clone()
	mapCommit(x1, x0, acc, p, q, 0, workers)
	pass(x1)
	x2 := x0.Clone()
	mapCommit(x2, x1, acc, p, q, 0, workers)
	dst := x0.Clone()
	lg0, lg1 := p.newExtrapLogs(x0), p.newExtrapLogs(x1)
	p.penaltyLogs(x0, q, lg0, workers)
	p.penaltyLogs(x1, q, lg1, workers)
	b.Run("pass", func(b *testing.B) {
		for b.Loop() {
			pass(x1)
		}
	})
	b.Run("penalty", func(b *testing.B) {
		for b.Loop() {
			p.penaltyLogs(x0, q, lg0, workers)
		}
	})
	b.Run("commit", func(b *testing.B) {
		for b.Loop() {
			mapCommit(dst, x1, acc, p, q, 0, workers)
		}
	})
	b.Run("length", func(b *testing.B) {
		for b.Loop() {
			squaremLength(x0, x1, x2, workers)
		}
	})
	b.Run("extrapolate", func(b *testing.B) {
		for b.Loop() {
			extrapolate(dst, x0, x1, x2, 2.5, workers, lg0, lg1)
		}
	})
}
