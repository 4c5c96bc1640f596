package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"time"
)

// benchIngest is `emsf bench --ingest FILE`: it reads and counts the file
// exactly as emsf fit does (loadData, no holdout) and reports the rate,
// the size of the CSR matrices it built and the process's peak resident
// memory (Linux: VmHWM; the process does nothing else before). With
// profile set it writes a CPU profile of the ingest there.
func benchIngest(ctx context.Context, e *env, in *inputFlags, profile string) error {
	stop := func() {}
	if profile != "" {
		var err error
		if stop, err = startCPUProfile(profile); err != nil {
			return fmt.Errorf("--ingest-cpuprofile: %w", err)
		}
	}
	t0 := time.Now()
	d, err := loadData(ctx, in, 0, 0)
	el := time.Since(t0)
	stop()
	if err != nil {
		return err
	}
	nnz, csr := 0, 0
	for _, b := range d.train {
		nnz += b.NNZ()
		csr += 4*len(b.Rows) + 8*len(b.Ptr) + 4*len(b.Cols) + 8*len(b.Vals)
	}
	fmt.Fprintf(e.stdout, "ingest %s: %d transitions, n=%d u=%d, %d nonzeros in %.3f s: %.2fM transitions/s; CSR %.1f MiB; peak RSS %s; GOMAXPROCS=%d\n",
		in.input, d.transitions, d.n, d.u, nnz, el.Seconds(), float64(d.transitions)/el.Seconds()/1e6,
		float64(csr)/(1<<20), peakRSS(), runtime.GOMAXPROCS(0))
	return nil
}

// peakRSS returns the process's peak resident set size as "N MiB", or
// "unknown" where /proc/self/status has no VmHWM.
func peakRSS() string {
	st, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "unknown"
	}
	for _, line := range bytes.Split(st, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("VmHWM:")); ok {
			kb, err := strconv.Atoi(string(bytes.TrimSpace(bytes.TrimSuffix(bytes.TrimSpace(v), []byte("kB")))))
			if err == nil {
				return fmt.Sprintf("%.1f MiB", float64(kb)/1024)
			}
		}
	}
	return "unknown"
}

// startCPUProfile starts a CPU profile into path and returns what stops
// it and closes the file.
func startCPUProfile(path string) (stop func(), err error) {
	pf, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(pf); err != nil {
		pf.Close()
		return nil, fmt.Errorf("cpu profile %s: %w", path, err)
	}
	return func() {
		pprof.StopCPUProfile()
		pf.Close()
	}, nil
}
