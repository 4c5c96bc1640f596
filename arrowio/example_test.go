package arrowio_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/factor"
)

func ExampleWriteModel() {
	dir, err := os.MkdirTemp("", "emsf-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "model.arrow")

	md := factor.NewRandom(100, 8, 4, factor.TieSharedK, 1)
	mf := &arrowio.ModelFile{Model: md, Fingerprint: "sha256:0123", Params: map[string]string{"alpha": "1"}}
	if err := arrowio.WriteModel(path, mf, arrowio.ModelArrow); err != nil {
		fmt.Println(err)
		return
	}
	got, err := arrowio.ReadModel(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(got.Model.N, got.Model.M, got.Model.U, got.Model.Tie)
	fmt.Println("same factors:", got.Model.Equal(md))
	fmt.Println(got.Fingerprint, got.Params)
	// Output:
	// 100 8 4 shared-k
	// same factors: true
	// sha256:0123 map[alpha:1]
}

func ExampleScanTransitions() {
	dir, err := os.MkdirTemp("", "emsf-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "data.csv")
	data := "state,action,next_state,count\n0,0,1,2\n1,0,2,1\n2,1,0,1\n"
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		fmt.Println(err)
		return
	}

	err = arrowio.ScanTransitions(context.Background(), path, arrowio.ReadOptions{BatchRows: 2},
		func(b *arrowio.TransitionBatch) error {
			for i := range b.Len() {
				fmt.Printf("row %d: %d --%d--> %d ×%g\n", b.FirstRow+i, b.State[i], b.Action[i], b.Next[i], b.Count[i])
			}
			return nil
		})
	fmt.Println("error:", err)

	// Bad input names the file, row, column and value.
	err = arrowio.ScanTransitionsReader(context.Background(), strings.NewReader("state,action,next_state\n0,0,1\n1.5,0,2\n"),
		"data.csv", "", arrowio.ReadOptions{}, func(*arrowio.TransitionBatch) error { return nil })
	fmt.Println(err)
	// Output:
	// row 1: 0 --0--> 1 ×2
	// row 2: 1 --0--> 2 ×1
	// row 3: 2 --1--> 0 ×1
	// error: <nil>
	// arrowio: data.csv: row 2, column "state": value "1.5" is not a non-negative integer
}
