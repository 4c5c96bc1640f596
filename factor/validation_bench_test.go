package factor

import (
	"context"
	"math"
	"testing"
)

// BenchmarkValidation times validation scoring on two shapes of the
// real-data benchmark's validation splits (m = 32; go tokens 100 %:
// n = 1000, one action, about 5 000 nonzeros; the dependency graph
// 100 %: n = 4000, three actions, about 12 000 nonzeros each), with 2
// workers: "fit" is a fit's sequence on a fresh Validation (Tune, then
// the held-out stopping rule's scores on factors that change,
// TuneLambda and TuneLocal every fourth, Tune at the end), "score" one
// Score with a fixed rule (the factors' products and one rule per
// action); cpu-ms/op is the CPU time of both workers. It uses the
// exported API (and processCPU) only, so that the file runs as it is on
// an older tree (docs/quality.md, round 6, compares main 0da5eb0):
//
//	go test ./factor/ -run '^$' -bench BenchmarkValidation -count 5
func BenchmarkValidation(b *testing.B) {
	for _, sz := range []struct {
		name                 string
		n, u, perFit, perVal int
		scores               int
	}{{"gotokens", 1000, 1, 30, 5, 4}, {"depgraph", 4000, 3, 12, 3, 40}} {
		fit := RandomCounts(sz.n, sz.u, sz.perFit, 4, 1)
		val := RandomCounts(sz.n, sz.u, sz.perVal, 2, 2)
		mds := []*Model{NewRandom(sz.n, 32, sz.u, TieNone, 1)}
		for range 2 {
			md := mds[len(mds)-1].Clone()
			if _, err := Fit(context.Background(), md, fit, FitOptions{Converger: Converger{MaxIter: 2}}); err != nil {
				b.Fatal(err)
			}
			mds = append(mds, md)
		}
		newV := func(b *testing.B) *Validation {
			v, err := NewValidation(sz.n, sz.u, TieNone, fit, val)
			if err != nil {
				b.Fatal(err)
			}
			return v
		}
		b.Run(sz.name+"/fit", func(b *testing.B) {
			vs := make([]*Validation, b.N)
			for k := range vs {
				vs[k] = newV(b)
			}
			defer reportCPU(b)()
			for _, v := range vs {
				v.Tune(mds[1], 2)
				for k := range sz.scores {
					if k%4 == 3 {
						v.TuneLocal(mds[k%3], 2)
					} else {
						v.TuneLambda(mds[k%3], 2)
					}
				}
				v.Tune(mds[2], 2)
			}
		})
		b.Run(sz.name+"/score", func(b *testing.B) {
			v := newV(b)
			rules := make([]RuleParams, sz.u)
			for a := range rules {
				rules[a] = RuleParams{Lambda: 0.3, Kappa: 30, Delta: 0.5, Mu: 0.1, Discount: 0.7, Rho: 0.5}
			}
			var s float64
			defer reportCPU(b)()
			for k := range b.N {
				s += v.Score(mds[1+k%2], rules, 2)
			}
			if math.IsNaN(s) {
				b.Fatal("NaN")
			}
		})
	}
}

// reportCPU resets b's timer and returns a function that reports the
// process's CPU time per iteration since (cpu-ms/op; ticks of 10 ms): on
// a shared machine, what the work cost beside how long it waited.
func reportCPU(b *testing.B) func() {
	cpu0, ok := processCPU()
	b.ResetTimer()
	return func() {
		if cpu1, ok1 := processCPU(); ok && ok1 {
			b.ReportMetric((cpu1-cpu0).Seconds()*1000/float64(b.N), "cpu-ms/op")
		}
	}
}
