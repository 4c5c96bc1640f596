package main

import (
	"bufio"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/worker/wire"
)

// The machine's memory and the limits derived from it: emsf fit refuses
// a model whose estimated size (factor.Footprint) is above
// --max-model-bytes before it allocates anything of that size, and emsf
// worker sets the Go runtime's soft memory limit from the cgroup's hard
// one.

// machineMemory returns the memory this process may use: the smaller of
// MemTotal (/proc/meminfo) and the memory limit of its cgroup (v2
// memory.max, v1 memory.limit_in_bytes), with where it comes from; 0 when
// neither is known.
func machineMemory() (int64, string) {
	total, src := int64(0), ""
	if kb, ok := memInfoKB("MemTotal"); ok {
		total, src = kb<<10, "MemTotal in /proc/meminfo"
	}
	if lim, where := cgroupLimit(); lim > 0 && (total == 0 || lim < total) {
		total, src = lim, "the memory limit of this process's cgroup ("+where+")"
	}
	return total, src
}

// memInfoKB reads a "Key: N kB" line of /proc/meminfo.
func memInfoKB(key string) (int64, bool) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != key {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		return n, err == nil
	}
	return 0, false
}

// cgroupLimit returns the memory limit of this process's cgroup (0: none
// or unknown) and the file it was read from.
func cgroupLimit() (int64, string) {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return 0, ""
	}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		// hierarchy-ID:controllers:path
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		var file string
		switch {
		case parts[0] == "0" && parts[1] == "":
			file = filepath.Join("/sys/fs/cgroup", parts[2], "memory.max")
		case strings.Contains(","+parts[1]+",", ",memory,"):
			file = filepath.Join("/sys/fs/cgroup/memory", parts[2], "memory.limit_in_bytes")
		default:
			continue
		}
		b, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			continue
		}
		n, err := strconv.ParseInt(s, 10, 64)
		// v1 says "no limit" with a huge number (PAGE_COUNTER_MAX pages).
		if err != nil || n <= 0 || n >= math.MaxInt64/2 {
			continue
		}
		return n, file
	}
	return 0, ""
}

// modelFraction is the share of the machine's memory that the default
// --max-model-bytes gives a model and its statistics: the rest is for
// the counted data, the runtime and the rest of the machine.
const modelFraction = 0.75

// limitFlags is --max-model-bytes.
type limitFlags struct {
	maxModelBytes int64
}

func (l *limitFlags) register(fs *flag.FlagSet) {
	fs.Int64Var(&l.maxModelBytes, "max-model-bytes", 0, "refuse a fit whose model and statistics (estimated from n, m, u and the algorithm before anything is allocated) need more bytes than this (0: 3/4 of the machine's memory, MemTotal or the cgroup's limit)")
}

func (l *limitFlags) validate() error {
	if l.maxModelBytes < 0 {
		return usagef("--max-model-bytes %d: must be >= 0 (0: from the machine's memory)", l.maxModelBytes)
	}
	return nil
}

// limit returns the limit in bytes and a phrase saying where it comes
// from (0: none known).
func (l *limitFlags) limit() (int64, string) {
	if l.maxModelBytes > 0 {
		return l.maxModelBytes, "--max-model-bytes"
	}
	mem, src := machineMemory()
	if mem == 0 {
		return 0, ""
	}
	return int64(modelFraction * float64(mem)), fmt.Sprintf("the default of --max-model-bytes: 3/4 of %d bytes, %s", mem, src)
}

// check refuses a fit of algorithm alg whose estimated bytes need are
// above the limit, naming the shape and how to proceed.
func (l *limitFlags) check(alg string, fp factor.Footprint, need int64) error {
	lim, src := l.limit()
	return limitCheck(alg, fp, need, lim, src)
}

// checkCluster is check for a fit whose workers hold the model between
// them: the default limit is 3/4 of the memory the workers announced
// (mem; none when a worker did not).
func (l *limitFlags) checkCluster(alg string, fp factor.Footprint, need int64, mem int64, workers int, known bool) error {
	if l.maxModelBytes > 0 {
		return limitCheck(alg, fp, need, l.maxModelBytes, "--max-model-bytes")
	}
	if !known || mem <= 0 {
		return nil
	}
	return limitCheck(alg, fp, need, int64(modelFraction*float64(mem)),
		fmt.Sprintf("the default of --max-model-bytes for a cluster fit: 3/4 of the %d bytes its %d workers announce, their machines' or cgroups' memory together", mem, workers))
}

// limitCheck refuses need above lim (0: no limit), which src names.
func limitCheck(alg string, fp factor.Footprint, need, lim int64, src string) error {
	if lim == 0 || need <= lim {
		return nil
	}
	return fmt.Errorf("%s with n = %d states, u = %d actions and m = %d needs about %d bytes (%s) for its model and statistics, more than the limit of %d bytes (%s, %s): "+
		"if n or u is larger than the data's real size (without --states and --actions they are 1 + the largest state index, %d, and action index, %d, in the input), fix the input or pass --states and --actions; else raise --max-model-bytes",
		alg, fp.N, fp.U, fp.M, need, humanBytes(need), lim, humanBytes(lim), src, fp.N-1, fp.U-1)
}

// humanBytes is b in binary units, e.g. "1.5 GiB".
func humanBytes(b int64) string { return wire.Bytes(b) }

// footprint is the shape of a fit of order m on d.
func (f *fitFlags) footprint(d *dataset, m int) factor.Footprint {
	fp := factor.Footprint{N: d.n, M: m, U: d.u, Tie: f.tieV, Float32: f.precisionV == factor.Float32, GroupNNZ: f.groupNNZ,
		Seen: make([]int, d.u), Squarem: f.accelV == factor.AccelSquarem, PriorD: f.priorD > 0, PriorK: f.priorK > 0,
		EarlyStop: f.stopV == stopValidation}
	for _, b := range d.train {
		fp.NNZ += int64(b.NNZ())
		if b.Action < d.u {
			fp.Seen[b.Action] += len(b.Rows)
		}
	}
	return fp
}

// checkMemory refuses the fit that f's algorithm would run on d before
// it allocates its model (--max-model-bytes): the largest of --order.
func (f *fitFlags) checkMemory(d *dataset) error {
	m := 0 // CNT has no order
	if len(f.orders) > 0 {
		m = slices.Max(f.orders)
	}
	fp := f.footprint(d, m)
	alg := "--algorithm " + f.algorithm
	var need int64
	switch {
	case f.algorithm == algCNT:
		need = fp.CNT()
	case f.algorithm == algKLM:
		need = fp.KLM()
	case f.algorithm != algEMSF:
		loss, _ := factor.ParseMULoss(f.loss)
		need = fp.MU(loss)
	case f.cluster.url != "" && !f.cluster.embedded:
		// A cluster's coordinator holds the model (the owners' blocks,
		// statistics and shards are the workers').
		need, alg = fp.Model(), "the coordinator of a cluster fit (--algorithm emsf)"
	default:
		need = fp.EMSF(f.restarts)
		if f.holdout > 0 {
			// The smoothed copy each order is scored with.
			need = fp.EMSF(f.restarts + 1)
		}
	}
	if err := f.limits.check(alg, fp, need); err != nil {
		return err
	}
	return d.checkSparse(&f.in)
}

// workerGCPercent is emsf worker's GOGC unless the environment sets one.
// A worker's heap is a few large pointer-free arrays (its blocks, its
// shards' column indices, a task's rows of K and its slices) and the
// garbage of each task (gathered rows, served slices once pulled): at
// the default 100 the heap grows to twice what is live before a cycle,
// which was most of a worker's peak (docs/scaling.md, "Memory"); at 25
// the peak fell by a third at the same CPU time, the arrays being cheap
// to mark (measured at P = 3 and 6, n = 4·10^5, 8M transitions).
const workerGCPercent = 25

// workerMemoryLimitFraction is the share of its cgroup's hard memory
// limit that emsf worker gives the Go runtime as its soft limit
// (GOMEMLIMIT) unless the environment sets one: near it the collector
// works harder instead of letting the kernel kill the process.
const workerMemoryLimitFraction = 0.9

// setWorkerMemory sets the worker's GOGC and soft memory limit (see
// workerGCPercent, workerMemoryLimitFraction) where the environment does
// not, and says what it set.
func setWorkerMemory(log hclog.Logger) {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(workerGCPercent)
		log.Debug("GOGC set", "gogc", workerGCPercent)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		if lim, where := cgroupLimit(); lim > 0 {
			soft := int64(workerMemoryLimitFraction * float64(lim))
			debug.SetMemoryLimit(soft)
			log.Info("soft memory limit set from the cgroup's", "gomemlimit", soft, "cgroup_limit", lim, "file", where)
		}
	}
}
