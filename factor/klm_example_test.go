package factor_test

import (
	"context"
	"fmt"

	"github.com/emsf/emsf/factor"
)

// KLM fits the baseline of incremental-emsf §5 to the counts of the
// 4-state chain of the other examples: a KL-divergence NMF of order 2 of
// the counted P̂ (rows (6,4,0,0)/10, (5,5,0,0)/10, (0,1,4,5)/10,
// (0,0,5,5)/10), returned as a stochastic factorization. Rows 0 and 1 share
// one hidden state and get their average; so do rows 2 and 3.
func ExampleKLM() {
	md, res, err := factor.KLM(context.Background(), 4, 2, 1, counts(), 1,
		factor.KLMOptions{Converger: factor.Converger{Tol: 1e-10, MaxIter: 5000}})
	if err != nil {
		panic(err)
	}
	fmt.Println("stopped:", res.Status)
	for i := 0; i < 4; i++ {
		fmt.Printf("P(%d → ·) = %.2f %.2f %.2f %.2f\n", i, md.Prob(0, i, 0), md.Prob(0, i, 1), md.Prob(0, i, 2), md.Prob(0, i, 3))
	}
	fmt.Println("valid:", md.Validate() == nil)
	// Output:
	// stopped: converged
	// P(0 → ·) = 0.55 0.45 0.00 0.00
	// P(1 → ·) = 0.55 0.45 0.00 0.00
	// P(2 → ·) = 0.00 0.05 0.45 0.50
	// P(3 → ·) = 0.00 0.05 0.45 0.50
	// valid: true
}
