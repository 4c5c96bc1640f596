// Command mkmodel writes a small random model file for scripts/crosscheck.sh
// and prints what another Arrow implementation must read back from it, in
// the line format of scripts/read_model.mjs. With DATASET it also writes
// the model as a model dataset (parts of 10 rows and a manifest) there.
//
//	go run ./arrowio/internal/mkmodel OUT.arrow [DATASET]
package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"strings"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/factor"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) != 1 && len(args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: mkmodel OUT.arrow [DATASET]")
		return 2
	}
	const n, m, u = 37, 5, 3
	md := factor.NewRandom(n, m, u, factor.TieSharedK, 7)
	md.Iteration = 3
	mf := &arrowio.ModelFile{Model: md, Fingerprint: "crosscheck", Params: map[string]string{"source": "mkmodel"}}
	if err := arrowio.WriteModel(args[0], mf, arrowio.ModelArrow); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if len(args) == 2 {
		if _, err := arrowio.SplitModel(context.Background(), args[0], arrowio.DirParts{Dir: args[1]}, arrowio.ModelArrow, 10); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	dRows, kRows := len(md.D)*n, len(md.KT)*n
	bits := make([]string, m)
	for l, v := range md.D[0][:m] {
		bits[l] = fmt.Sprintf("%016x", math.Float64bits(v))
	}
	fmt.Printf("n=%d\nm=%d\nu=%d\ntie=%s\n", n, m, u, md.Tie)
	fmt.Printf("d_rows=%d\nk_rows=%d\n", dRows, kRows)
	fmt.Printf("d_shape=%dx%d\nk_shape=%dx%d\n", dRows, m, kRows, m)
	fmt.Printf("d_rows_stochastic=true\n")
	fmt.Printf("d_first_bits=%s\n", strings.Join(bits, ","))
	return 0
}
