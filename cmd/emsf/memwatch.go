package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"
)

// memWatch is --memprofile-dir: a debugging aid that says where a
// process's memory goes. It samples the resident set (/proc/self/statm)
// every interval and writes
//
//   - mem.tsv: one line at each phase change (Phase) and at each new peak
//     of the resident set: time, phase, RSS, and the Go runtime's
//     runtime/metrics classes (heap objects, heap free and released, the
//     GC's goal, everything the runtime mapped), so that RSS − Go total is
//     memory mapped outside the runtime (shard slabs);
//   - heap-NNN-PHASE.pb.gz: a heap profile (go tool pprof) at each peak
//     that is 10 % above the last profiled one, and at Close.
//
// Heap profiles show the live objects of the last completed GC cycle by
// the site that allocated them.
type memWatch struct {
	dir    string
	out    *bufio.Writer
	file   *os.File
	start  time.Time
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	phase    string
	peak     int64 // the highest RSS seen
	profiled int64 // the RSS at the last peak profile
	nprof    int
}

// memSamples are the runtime/metrics a mem.tsv line carries.
var memSamples = []string{
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/free:bytes",
	"/memory/classes/heap/released:bytes",
	"/memory/classes/total:bytes",
	"/gc/heap/goal:bytes",
	"/gc/gomemlimit:bytes",
}

// startMemWatch starts watching into dir (created if needed); nil for an
// empty dir.
func startMemWatch(dir string, interval time.Duration) (*memWatch, error) {
	if dir == "" {
		return nil, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("--memprofile-dir: %w", err)
	}
	f, err := os.Create(filepath.Join(dir, "mem.tsv"))
	if err != nil {
		return nil, fmt.Errorf("--memprofile-dir: %w", err)
	}
	mw := &memWatch{dir: dir, file: f, out: bufio.NewWriter(f), start: time.Now(), phase: "start"}
	fmt.Fprintf(mw.out, "seconds\tevent\tphase\trss\t%s\n", strings.Join(memSamples, "\t"))
	ctx, cancel := context.WithCancel(context.Background())
	mw.cancel = cancel
	mw.wg.Add(1)
	go func() {
		defer mw.wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				mw.sample()
			}
		}
	}()
	mw.line("phase")
	return mw, nil
}

// Phase records that the process entered phase name (a nil watch does
// nothing).
func (mw *memWatch) Phase(name string) {
	if mw == nil {
		return
	}
	mw.mu.Lock()
	defer mw.mu.Unlock()
	if name == mw.phase {
		return
	}
	mw.phase = name
	mw.lineLocked("phase", rss())
}

// sample reads the RSS and records a new peak.
func (mw *memWatch) sample() {
	r := rss()
	mw.mu.Lock()
	defer mw.mu.Unlock()
	if r <= mw.peak {
		return
	}
	mw.peak = r
	mw.lineLocked("peak", r)
	if float64(r) > 1.1*float64(mw.profiled) {
		mw.profiled = r
		mw.profileLocked()
	}
}

func (mw *memWatch) line(event string) {
	mw.mu.Lock()
	defer mw.mu.Unlock()
	mw.lineLocked(event, rss())
}

func (mw *memWatch) lineLocked(event string, r int64) {
	s := make([]metrics.Sample, len(memSamples))
	for k, name := range memSamples {
		s[k].Name = name
	}
	metrics.Read(s)
	fmt.Fprintf(mw.out, "%.3f\t%s\t%s\t%d", time.Since(mw.start).Seconds(), event, mw.phase, r)
	for _, x := range s {
		v := int64(-1)
		if x.Value.Kind() == metrics.KindUint64 {
			v = int64(x.Value.Uint64())
		}
		fmt.Fprintf(mw.out, "\t%d", v)
	}
	fmt.Fprintln(mw.out)
	_ = mw.out.Flush()
}

// profileLocked writes a heap profile named by its number and phase.
func (mw *memWatch) profileLocked() {
	mw.nprof++
	name := fmt.Sprintf("heap-%03d-%s.pb.gz", mw.nprof, strings.Map(func(r rune) rune {
		if r == '/' || r == ' ' {
			return '_'
		}
		return r
	}, mw.phase))
	f, err := os.Create(filepath.Join(mw.dir, name))
	if err != nil {
		return
	}
	_ = pprof.Lookup("heap").WriteTo(f, 0)
	_ = f.Close()
}

// Close stops the watch after a last line and profile.
func (mw *memWatch) Close() {
	if mw == nil {
		return
	}
	mw.cancel()
	mw.wg.Wait()
	runtime.GC()
	mw.mu.Lock()
	defer mw.mu.Unlock()
	mw.phase = "end"
	mw.lineLocked("end", rss())
	fmt.Fprintf(mw.out, "# peak rss %d\n", mw.peak)
	mw.profileLocked()
	_ = mw.out.Flush()
	_ = mw.file.Close()
}

// rss is the process's resident set in bytes (0 where /proc is missing).
func rss() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0
	}
	return pages * int64(os.Getpagesize())
}

// memProfileEnv names the environment variable that turns the memory
// watch on (emsf fit, emsf worker) without a flag.
const memProfileEnv = "EMSF_MEMPROFILE_DIR"

// memWatchInterval is how often the watch samples the resident set.
const memWatchInterval = 50 * time.Millisecond
