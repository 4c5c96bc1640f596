package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/emsf/emsf/coordinator/costmodel"
)

func TestScalingTable(t *testing.T) {
	out := mustEmsf(t, "scaling")
	for _, want := range []string{
		"| 64 | A star | 0.79 | 25.6 / 20.6 | 1.32e+03 / 1.64e+03 |",
		"| 64 | B grouped | 1.00 | 4.32 / 4.32 |",
		"| 256 | C 2D spread 16×16 |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("emsf scaling: no line with %q in\n%s", want, out)
		}
	}
	// Design B as built at the target scale: emsf's default column blocks
	// (611) and shards (η / 2^17), the exchange serial.
	out = mustEmsf(t, "scaling", "--nodes", "64", "--col-blocks", "-1", "--shards", "76294", "--serial")
	for _, want := range []string{"611 column blocks", "| 64 | B spread | 0.01 | 78.2 / 78.2 | 0.0448 / 0.0448 |"} {
		if !strings.Contains(out, want) {
			t.Errorf("emsf scaling, B as built: no line with %q in\n%s", want, out)
		}
	}
	for _, bad := range [][]string{{"--nodes", "8,x"}, {"--gbit", "0"}, {"--states", "0"}, {"--check", "x.csv", "--skip", "-1"}, {"--cores", "0"}, {"--check", "x.csv", "--ns-per-nnz", "-1"},
		{"--col-blocks", "-2"}, {"--shards", "-1"}, {"--check", "x.csv", "--col-blocks", "-1"}} {
		if code, _, errs := emsf(t, append([]string{"scaling"}, bad...)...); code != 2 {
			t.Errorf("emsf scaling %v: exit %d (%s), want 2", bad, code, errs)
		}
	}
}

// harnessCSV writes an iterations.csv like scripts/netns-cluster.sh's,
// with the figures the model predicts for design A at P = 1, 2, 4 times
// scale (1 for exact agreement) on every node figure.
func harnessCSV(t *testing.T, scale float64) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("design,P,n,u,m,nnz,shards,rate_mbit,iter,wall_s,emsf_bytes,coord_tx,coord_rx,node_tx_mean,node_tx_max,node_rx_mean,node_rx_max,coord_retx,node_retx_mean,load1\n")
	const n, u, m, nnz, rate = 2000, 2, 32, 160000.0, 50.0
	for _, p := range []int{1, 2, 4} {
		w := costmodel.Workload{N: n, M: m, U: u, NNZ: nnz, RowExtra: 12, ColExtra: 4}
		c := costmodel.Calibration{NsPerNNZ: 100, Cores: min(float64(p), 2) / float64(p), LinkBytesPerSec: rate * 1e6 / 8}
		e, err := costmodel.Evaluate(w, costmodel.StarA, p, c)
		if err != nil {
			t.Fatal(err)
		}
		for it := 1; it <= 4; it++ {
			fmt.Fprintf(&b, "A,%d,%d,%d,%d,%g,%d,%g,%d,%g,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,0,1000,3.5\n", p, n, u, m, nnz, u*p, rate, it,
				e.TIter, e.CoordIn+e.CoordOut, e.CoordOut, e.CoordIn, e.NodeOut*scale+1000, e.NodeOut*scale+1000, e.NodeIn*scale, e.NodeIn*scale)
		}
	}
	return writeFile(t, t.TempDir(), "iterations.csv", b.String())
}

func TestScalingCheck(t *testing.T) {
	out := mustEmsf(t, "scaling", "--check", harnessCSV(t, 1), "--ns-per-nnz", "100")
	if strings.Count(out, "yes / yes") != 3 {
		t.Errorf("the model's own figures do not pass its check:\n%s", out)
	}
	code, out, errs := emsf(t, "scaling", "--check", harnessCSV(t, 1.08), "--ns-per-nnz", "100")
	if code != 1 || !strings.Contains(errs, "outside the tolerance") || !strings.Contains(out, "**no**") {
		t.Errorf("8%% more bytes than the model: exit %d\n%s%s", code, out, errs)
	}
	bad := writeFile(t, t.TempDir(), "bad.csv", "design,P,n,u,m,nnz,rate_mbit,iter,wall_s,emsf_bytes,coord_tx,coord_rx,node_tx_mean,node_rx_mean\nA,1,10,1,2,100,50,3,x,1,1,1,1,1\n")
	if code, _, errs := emsf(t, "scaling", "--check", bad); code != 1 || !strings.Contains(errs, `line 2 column wall_s: "x"`) {
		t.Errorf("bad number: exit %d, %s", code, errs)
	}
	noCol := writeFile(t, t.TempDir(), "nocol.csv", "design,P\nA,1\n")
	if code, _, errs := emsf(t, "scaling", "--check", noCol); code != 1 || !strings.Contains(errs, `no column "n"`) {
		t.Errorf("missing column: exit %d, %s", code, errs)
	}
}

// TestScalingCheckOwners: design B runs are checked against the owners
// model (grouped, serial, the protocol's coordinator bytes), their last
// iteration left out (the final checkpoint starts there).
func TestScalingCheckOwners(t *testing.T) {
	csvOf := func(scale float64) string {
		var b strings.Builder
		b.WriteString("design,P,n,u,m,nnz,shards,rate_mbit,iter,wall_s,emsf_bytes,coord_tx,coord_rx,node_tx_mean,node_tx_max,node_rx_mean,node_rx_max,coord_retx,node_retx_mean,load1\n")
		const n, u, m, nnz, rate = 2000, 2, 32, 160000.0, 50.0
		for _, p := range []int{1, 4, 8} {
			shards := u * max(1, p/u)
			w := costmodel.Workload{N: n, M: m, U: u, NNZ: nnz, ColExtra: 4, Shards: shards, ColBlocks: 8}
			c := costmodel.Calibration{NsPerNNZ: 100, Cores: min(float64(p), 2) / float64(p), LinkBytesPerSec: rate * 1e6 / 8, Serial: true}
			e, err := costmodel.Evaluate(w, costmodel.OwnersGrouped, p, c)
			if err != nil {
				t.Fatal(err)
			}
			for it := 1; it <= 5; it++ {
				extra := 0.0
				if it == 5 {
					extra = 1e6 // the final checkpoint: left out
				}
				fmt.Fprintf(&b, "B,%d,%d,%d,%d,%g,%d,%g,%d,%g,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,%.0f,0,0,3.5\n", p, n, u, m, nnz, shards, rate, it,
					e.TIter, e.CoordIn+e.CoordOut, e.CoordOut, e.CoordIn, e.NodeOut*scale+extra, e.NodeOut*scale+extra, e.NodeIn*scale+extra, e.NodeIn*scale+extra)
			}
		}
		return writeFile(t, t.TempDir(), "iterations.csv", b.String())
	}
	args := []string{"scaling", "--check", "", "--ns-per-nnz", "100", "--wire-overhead", "1"}
	args[2] = csvOf(1)
	out := mustEmsf(t, args...)
	if strings.Count(out, "yes / yes / yes") != 3 {
		t.Errorf("the model's own figures do not pass its check:\n%s", out)
	}
	args[2] = csvOf(1.08)
	code, out, errs := emsf(t, args...)
	if code != 1 || !strings.Contains(errs, "outside the tolerance") || strings.Count(out, "**no** / yes / yes") != 2 {
		t.Errorf("8%% more bytes than the model: exit %d (want the P = 4 and 8 runs to fail, P = 1's few kB to pass)\n%s%s", code, out, errs)
	}
}
