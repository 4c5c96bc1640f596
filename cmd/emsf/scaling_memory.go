package main

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/emsf/emsf/coordinator/costmodel"
)

// scalingMemory prints the memory model's parts per worker for each P
// (emsf scaling --memory).
func scalingMemory(out io.Writer, w costmodel.Workload, nodes []int, mc costmodel.MemCalibration) error {
	fmt.Fprintf(out, "memory per node of the owners exchange (target design: workers hold their shards, the coordinator metadata): n=%d m=%d u=%d η=%.3g, column cells %d, shard nonzeros %.0f, GOGC %.0f\n\n",
		w.N, w.M, w.U, w.NNZ, max(1, w.ColCells), mc.ShardNNZ, mc.GOGC)
	fmt.Fprintln(out, "| P | shards | owned D, K and folds | task | slices | buffers + base | GC headroom | worker (GB) | coordinator, target (MB) |")
	fmt.Fprintln(out, "|---|---|---|---|---|---|---|---|---|")
	for _, p := range nodes {
		e, err := costmodel.Memory(w, p, mc)
		if err != nil {
			return usagef("%v", err)
		}
		fmt.Fprintf(out, "| %d | %.3g | %.3g | %.3g | %.3g | %.3g | %.3g | **%.3g** | %.3g |\n", p, e.Shards/1e9, e.Owned/1e9, e.Task/1e9, e.Slices/1e9,
			(e.Buffers+e.Base)/1e9, e.Headroom/1e9, e.Worker/1e9, e.Coordinator/1e6)
	}
	fmt.Fprintln(out, "\n(GB unless said; the parts are the Go heap's but the base, the headroom GOGC/100 of the heap)")
	return nil
}

// memRun is one cluster size of a scripts/memproof.sh summary: the
// workers' peaks.
type memRun struct {
	p     int
	peaks []float64
}

// readMemproof reads the workers' peak RSS per run of a memproof.sh
// summary.tsv.
func readMemproof(path string) ([]*memRun, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("scaling: %w", err)
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.Comma = '\t'
	r.FieldsPerRecord = -1
	col, err := tableHeader(r, path, []string{"run", "process", "peak_rss_bytes"}, " (want scripts/memproof.sh's summary.tsv)")
	if err != nil {
		return nil, err
	}
	var runs []*memRun
	byName := map[string]*memRun{}
	for line := 2; ; line++ {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("scaling: %s: %w", path, err)
		}
		if len(rec) <= col["peak_rss_bytes"] || !strings.HasPrefix(rec[col["process"]], "worker-") {
			continue
		}
		name := rec[col["run"]]
		p, err := strconv.Atoi(strings.TrimPrefix(name, "P"))
		if err != nil || p < 1 {
			return nil, fmt.Errorf("scaling: %s line %d: run %q is not P<workers>", path, line, name)
		}
		peak, err := strconv.ParseFloat(rec[col["peak_rss_bytes"]], 64)
		if err != nil || !(peak > 0) {
			return nil, fmt.Errorf("scaling: %s line %d: peak %q is not a positive number", path, line, rec[col["peak_rss_bytes"]])
		}
		run := byName[name]
		if run == nil {
			run = &memRun{p: p}
			byName[name] = run
			runs = append(runs, run)
		}
		run.peaks = append(run.peaks, peak)
	}
	if len(runs) == 0 {
		return nil, fmt.Errorf("scaling: %s: no worker lines", path)
	}
	return runs, nil
}

// memTolerance is how far a measured worker peak may be from the model.
const memTolerance = 0.20

// scalingCheckMemory compares the workers' measured peaks (mean, min and
// max over a run's workers) with the memory model and fails when a mean
// is off by more than memTolerance.
func scalingCheckMemory(out io.Writer, path string, w costmodel.Workload, mc costmodel.MemCalibration) error {
	runs, err := readMemproof(path)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "memory model against %s: n=%d m=%d u=%d η=%.0f, column cells %d, shard nonzeros %.0f, GOGC %.0f\n\n",
		path, w.N, w.M, w.U, w.NNZ, max(1, w.ColCells), mc.ShardNNZ, mc.GOGC)
	fmt.Fprintln(out, "| P | workers' peak RSS, mean (min–max), MiB | model, MiB | off | within ±20% |")
	fmt.Fprintln(out, "|---|---|---|---|---|")
	bad := 0
	for _, run := range runs {
		e, err := costmodel.Memory(w, run.p, mc)
		if err != nil {
			return usagef("%v", err)
		}
		lo, hi := math.Inf(1), 0.0
		for _, x := range run.peaks {
			lo, hi = math.Min(lo, x), math.Max(hi, x)
		}
		mean := meanOf(run.peaks)
		off := mean/e.Worker - 1
		ok := "yes"
		if math.Abs(off) > memTolerance {
			ok, bad = "**no**", bad+1
		}
		fmt.Fprintf(out, "| %d | %.0f (%.0f–%.0f) | %.0f | %+.1f%% | %s |\n", run.p, mean/(1<<20), lo/(1<<20), hi/(1<<20), e.Worker/(1<<20), 100*off, ok)
	}
	if bad > 0 {
		return fmt.Errorf("scaling: %d of %d runs off the memory model by more than %.0f%%", bad, len(runs), 100*memTolerance)
	}
	return nil
}

// memPerNode is a table cell: the memory model's worker for the owners
// designs (C with its grid's column cells), "—" for design A (not
// modelled: its workers pull whole K blocks).
func memPerNode(w costmodel.Workload, d costmodel.Design, p int, est costmodel.Estimate, mc costmodel.MemCalibration) string {
	switch d {
	case costmodel.StarA:
		return "—"
	case costmodel.GridSpread, costmodel.GridGrouped:
		w.ColCells = max(1, est.GridCols)
	}
	e, err := costmodel.Memory(w, p, mc)
	if err != nil {
		return "?"
	}
	return fmt.Sprintf("%.3g", e.Worker/1e9)
}
