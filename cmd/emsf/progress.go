package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/mattn/go-isatty"

	"github.com/emsf/emsf/factor"
)

// progressFlags say how long work reports progress: one live status line
// on a terminal, log lines at a bounded rate otherwise.
type progressFlags struct {
	every   time.Duration
	verbose bool
}

func (p *progressFlags) register(fs *flag.FlagSet) {
	fs.DurationVar(&p.every, "log-every", time.Second, "at most one progress log line per this interval (0: every iteration or run)")
	fs.BoolVar(&p.verbose, "verbose", false, "progress as log lines even on a terminal (instead of one live status line)")
}

func (p *progressFlags) validate() error {
	if p.every < 0 {
		return usagef("--log-every %v: must be >= 0", p.every)
	}
	return nil
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

// progress reports the progress of one piece of long work (a fit, an
// experiment). On a terminal (and without --verbose, --quiet or
// --log-json) it redraws one status line on w; otherwise it logs at most
// one line per --log-every, the first always. Done ends the live line. A
// progress is safe for concurrent use.
type progress struct {
	log   hclog.Logger
	w     io.Writer
	live  bool
	every time.Duration
	start time.Time

	mu         sync.Mutex
	last       time.Time // of the last line logged or drawn
	lastDetail time.Time // of the last detail line logged at info
	drawn      bool      // a live line is on the screen
	pending    []any     // the newest fields not yet logged
}

// newProgress returns the progress of work that logs to log and draws its
// live line on e.stderr.
func newProgress(e *env, logs *logFlags, p *progressFlags, log hclog.Logger) *progress {
	live := !p.verbose && !logs.quiet && !logs.json && isTerminal(e.stderr)
	return &progress{log: log, w: e.stderr, live: live, every: p.every, start: time.Now()}
}

// update reports: status is the live line's text, msg and fields the log
// line's. final forces the report (the last one of the work).
func (p *progress) update(status, msg string, fields []any, final bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	due := p.last.IsZero() || now.Sub(p.last) >= p.every || final
	if p.live {
		// A terminal is redrawn at most ten times a second.
		if due || now.Sub(p.last) >= 100*time.Millisecond {
			fmt.Fprintf(p.w, "\r\x1b[K%s", status)
			p.drawn, p.last = true, now
		}
		return
	}
	if due {
		p.log.Info(msg, fields...)
		p.last = now
	}
}

// detail logs a line of detail about the work's progress (a cluster
// iteration's timings and bytes) to log: at most one per --log-every at
// info level, like the progress lines, and none under the live line;
// every one at debug level (--log-level debug).
func (p *progress) detail(log hclog.Logger, msg string, fields []any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	if !p.live && (p.lastDetail.IsZero() || now.Sub(p.lastDetail) >= p.every) {
		log.Info(msg, fields...)
		p.lastDetail = now
		return
	}
	log.Debug(msg, fields...)
}

// done ends the live line, so that what follows starts on a line of its
// own.
func (p *progress) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drawn {
		fmt.Fprintln(p.w)
		p.drawn = false
	}
}

// iterations returns the factor.FitOptions.Progress of a fit of at most
// maxIter iterations (0: no limit): iteration, log-likelihood, relative
// change, iterations per second, elapsed and, against maxIter, the time
// left if every remaining iteration ran.
func (p *progress) iterations(maxIter int, fields ...any) func(factor.IterStats) {
	return func(s factor.IterStats) {
		rate := float64(s.Iteration) / s.Elapsed.Seconds()
		var line strings.Builder
		fmt.Fprintf(&line, "iteration %d", s.Iteration)
		if maxIter > 0 {
			fmt.Fprintf(&line, "/%d", maxIter)
		}
		args := append([]any{"iter", s.Iteration}, fields...)
		if !math.IsNaN(s.LogLik) {
			fmt.Fprintf(&line, "  loglik %.8g", s.LogLik)
			args = append(args, "loglik", fmt.Sprintf("%.8g", s.LogLik))
		}
		if !math.IsNaN(s.RelChange) {
			fmt.Fprintf(&line, "  change %.2g", s.RelChange)
			args = append(args, "delta", fmt.Sprintf("%.3g", s.RelChange))
		}
		if s.HeldOutPatience > 0 {
			// What the held-out rule waits for: a gain within the patience.
			fmt.Fprintf(&line, "  held-out best at %d, %d/%d without gain", s.HeldOutBest, s.HeldOutBad, s.HeldOutPatience)
			args = append(args, "heldout_best_iter", s.HeldOutBest, "heldout_without_gain", s.HeldOutBad)
			if !math.IsNaN(s.HeldOut) {
				args = append(args, "heldout", fmt.Sprintf("%.8g", s.HeldOut))
			}
		}
		if s.Actions > 0 {
			// Actions that stopped at their own optimum leave the passes.
			fmt.Fprintf(&line, "  actions running %d/%d", s.Running, s.Actions)
			args = append(args, "actions_running", s.Running)
		}
		elapsed := s.Elapsed.Round(time.Millisecond)
		fmt.Fprintf(&line, "  %.3g it/s  elapsed %s", rate, roundDuration(s.Elapsed))
		if maxIter > 0 && rate > 0 {
			left := time.Duration(float64(maxIter-s.Iteration) / rate * float64(time.Second))
			fmt.Fprintf(&line, "  at most %s left", roundDuration(left))
		}
		args = append(args, "elapsed", elapsed, "it_per_s", fmt.Sprintf("%.3g", rate),
			"nnz_per_s", fmt.Sprintf("%.3g", float64(s.NNZ)/s.IterTime.Seconds()))
		p.update(line.String(), "iteration", args, false)
	}
}

// runs reports that done of total runs (of an experiment) finished: runs
// done / total, elapsed and the time left at the rate so far.
func (p *progress) runs(done, total int) {
	elapsed := time.Since(p.start)
	line := fmt.Sprintf("runs %d/%d  elapsed %s", done, total, roundDuration(elapsed))
	args := []any{"done", done, "total", total, "elapsed", elapsed.Round(time.Millisecond)}
	if done > 0 && done < total {
		left := time.Duration(float64(elapsed) / float64(done) * float64(total-done))
		line += fmt.Sprintf("  about %s left", roundDuration(left))
		args = append(args, "eta", left.Round(time.Second))
	}
	p.update(line, "runs", args, done == total)
}

// restart sets the start of the work to now (after a preliminary pass
// that is not part of it).
func (p *progress) restart() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.start = time.Now()
}

// stream reports an incremental fit in pass pass of passes: transitions
// read in all passes so far, commits, transitions per second, elapsed and,
// when total (the transitions of all passes) is known (> 0), the time
// left at the rate so far.
func (p *progress) stream(pass, passes int, read, total int64, commits int) {
	elapsed := time.Since(p.start)
	rate := float64(read) / elapsed.Seconds()
	line := fmt.Sprintf("pass %d/%d  transitions %d", pass, passes, read)
	if total > 0 {
		line += fmt.Sprintf("/%d", total)
	}
	line += fmt.Sprintf("  commits %d  %.3g transitions/s  elapsed %s", commits, rate, roundDuration(elapsed))
	args := []any{"pass", pass, "passes", passes, "transitions", read, "commits", commits,
		"transitions_per_s", fmt.Sprintf("%.3g", rate), "elapsed", elapsed.Round(time.Millisecond)}
	if total > 0 && rate > 0 && read < total {
		left := time.Duration(float64(total-read) / rate * float64(time.Second))
		line += fmt.Sprintf("  about %s left", roundDuration(left))
		args = append(args, "eta", left.Round(time.Second))
	}
	p.update(line, "progress", args, false)
}

// roundDuration rounds d for a status line: to 0.1 s below a minute, to a
// second above.
func roundDuration(d time.Duration) time.Duration {
	if d < time.Minute {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Second)
}
