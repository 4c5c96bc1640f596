package factor_test

import (
	"context"
	"fmt"

	"github.com/emsf/emsf/factor"
)

// counts returns the transitions of a 4-state chain with one action, in
// two blocks: states 0 and 1 move within {0, 1}, states 2 and 3 mostly
// within {2, 3}, so an order-2 factorization fits them well.
func counts() []*factor.Block {
	b0, err := factor.NewBlock(0,
		[]int32{0, 0, 1, 1},
		[]int32{0, 1, 0, 1},
		[]float64{6, 4, 5, 5})
	if err != nil {
		panic(err)
	}
	b1, err := factor.NewBlock(0,
		[]int32{2, 2, 2, 3, 3},
		[]int32{1, 2, 3, 2, 3},
		[]float64{1, 4, 5, 5, 5})
	if err != nil {
		panic(err)
	}
	return []*factor.Block{b0, b1}
}

func ExampleFit() {
	blocks := counts()
	md := factor.NewRandom(4, 2, 1, factor.TieNone, 7)
	res, err := factor.Fit(context.Background(), md, blocks, factor.FitOptions{
		Converger: factor.Converger{Tol: 1e-12, MaxIter: 5000},
	})
	if err != nil {
		panic(err)
	}
	// Rows 0 and 1 share one hidden state, rows 2 and 3 the other: each
	// pair gets the maximum-likelihood estimate of its pooled counts.
	fmt.Println("status:", res.Status)
	p := md.Dense(0)
	for i := 0; i < 4; i++ {
		fmt.Printf("%.2f\n", p[i*4:i*4+4])
	}
	h, err := factor.HeldOut(md, blocks)
	if err != nil {
		panic(err)
	}
	fmt.Printf("log-likelihood per transition %.3f\n", h)
	// Output:
	// status: converged
	// [0.55 0.45 0.00 0.00]
	// [0.55 0.45 0.00 0.00]
	// [0.00 0.05 0.45 0.50]
	// [0.00 0.05 0.45 0.50]
	// log-likelihood per transition -0.772
}

func ExampleNewCNT() {
	c, err := factor.NewCNT(4, 1, counts(), 0)
	if err != nil {
		panic(err)
	}
	row := make([]float64, 4)
	for i := 0; i < 4; i++ {
		c.Row(0, i, row)
		fmt.Printf("%.2f\n", row)
	}
	// Output:
	// [0.60 0.40 0.00 0.00]
	// [0.50 0.50 0.00 0.00]
	// [0.00 0.10 0.40 0.50]
	// [0.00 0.00 0.50 0.50]
}

func ExampleStationary() {
	md := factor.NewModel(3, 2, 1, factor.TieNone)
	copy(md.D[0], []float64{0.5, 0.5, 1, 0, 0.25, 0.75})
	// K is stored transposed: KT[j] = (K[0][j], K[1][j]).
	copy(md.KT[0], []float64{0.5, 0.25, 0.25, 0.25, 0.25, 0.5})
	for _, r := range factor.Reduced(md) {
		fmt.Printf("KD = %.4f\n", r.RawMatrix().Data)
	}
	policy, err := factor.DeterministicPolicy([]int{0, 0, 0}, 1)
	if err != nil {
		panic(err)
	}
	mu, nu, err := factor.Stationary(md, policy)
	if err != nil {
		panic(err)
	}
	fmt.Printf("nu = %.4f\nmu = %.4f\n", nu, mu)
	// Output:
	// KD = [0.5625 0.4375 0.5000 0.5000]
	// nu = [0.5333 0.4667]
	// mu = [0.3833 0.2500 0.3667]
}
