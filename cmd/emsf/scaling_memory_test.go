package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/emsf/emsf/coordinator/costmodel"
)

// TestScalingMemory: the memory table by part, and the memory column of
// the main table (owners designs only).
func TestScalingMemory(t *testing.T) {
	out := mustEmsf(t, "scaling", "--nodes", "64,256", "--memory", "--col-cells", "1")
	for _, want := range []string{"| 64 | 3.75 | 3.21 |", "| 256 | 0.938 | 0.803 |", "**9.05**", "**2.53**"} {
		if !strings.Contains(out, want) {
			t.Errorf("emsf scaling --memory: no %q in\n%s", want, out)
		}
	}
	out = mustEmsf(t, "scaling", "--nodes", "64", "--gbit", "10")
	for _, want := range []string{"| 64 | A star | 0.79 | 25.6 / 20.6 | 1.32e+03 / 1.64e+03 | — |", "| 64 | B grouped | 1.00 | 4.32 / 4.32 | 0.00157 / 0.000426 | 9.05 |"} {
		if !strings.Contains(out, want) {
			t.Errorf("emsf scaling: no %q in\n%s", want, out)
		}
	}
}

// memproofTSV writes a summary.tsv like scripts/memproof.sh's with the
// model's worker peaks at P = 1, 3, 6 times scale.
func memproofTSV(t *testing.T, w costmodel.Workload, scale float64) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("run\tprocess\tlimit_bytes\ttarget_bytes\tpeak_rss_bytes\tcgroup_max_bytes\tcgroup_fail\texit\nlocal\tlocal-fit\t0\t0\t1000000000\t-\t-\t0\n")
	for _, p := range []int{1, 3, 6} {
		e, err := costmodel.Memory(w, p, costmodel.MemCalibration{})
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "P%d\tcoordinator\t1\t1\t900000000\t-\t-\t0\n", p)
		for k := 1; k <= p; k++ {
			fmt.Fprintf(&b, "P%d\tworker-%d\t1\t1\t%.0f\t-\t-\t0\n", p, k, e.Worker*scale)
		}
		fmt.Fprintf(&b, "P%d\tstore\t-\t-\t5\t-\t-\tfinal 5\n", p)
	}
	return writeFile(t, t.TempDir(), "summary.tsv", b.String())
}

// TestScalingCheckMemory: the model's own figures pass --check-memory,
// 30 % more fail it, and a bad file is named.
func TestScalingCheckMemory(t *testing.T) {
	w := costmodel.Workload{N: 400000, M: 32, U: 1, NNZ: 8e6, ColCells: 2}
	args := []string{"scaling", "--check-memory", "", "--states", "400000", "--nnz", "8e6", "--actions", "1", "--order", "32", "--col-cells", "2"}
	args[2] = memproofTSV(t, w, 1)
	if out := mustEmsf(t, args...); strings.Count(out, "| yes |") != 3 {
		t.Errorf("the model's own figures do not pass its check:\n%s", out)
	}
	args[2] = memproofTSV(t, w, 1.3)
	if code, out, errs := emsf(t, args...); code != 1 || strings.Count(out, "**no**") != 3 || !strings.Contains(errs, "off the memory model") {
		t.Errorf("30%% above the model: exit %d\n%s%s", code, out, errs)
	}
	args[2] = writeFile(t, t.TempDir(), "bad.tsv", "run\tprocess\tpeak_rss_bytes\nP2\tworker-1\tx\n")
	if code, _, errs := emsf(t, args...); code != 1 || !strings.Contains(errs, `line 2: peak "x"`) {
		t.Errorf("bad peak: exit %d, %s", code, errs)
	}
}

// TestScalingCheckMemoryMeasured: the memory model holds (±20 %) on the
// runs of docs/scaling.md §9 (scripts/memproof.sh's summaries, default
// flags and --col-cells 2).
func TestScalingCheckMemoryMeasured(t *testing.T) {
	for file, cells := range map[string]string{"memory-nogrid-summary.tsv": "1", "memory-grid-summary.tsv": "2"} {
		out := mustEmsf(t, "scaling", "--check-memory", "../../docs/scaling/"+file, "--states", "400000", "--nnz", "7999785",
			"--actions", "1", "--order", "32", "--col-cells", cells)
		if strings.Contains(out, "**no**") {
			t.Errorf("%s:\n%s", file, out)
		}
	}
}
