package main

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/emsf/emsf/factor"
)

// TestProgressRate: off a terminal, progress logs the first iteration and
// then at most one line per --log-every (an hour here: no other line),
// and with --log-every 0 every iteration; the runs report ends with a
// final line however soon it comes. A buffer is not a terminal, so there
// is no live line.
func TestProgressRate(t *testing.T) {
	for _, tc := range []struct {
		every time.Duration
		want  int
	}{{time.Hour, 1}, {0, 50}} {
		var buf bytes.Buffer
		e := &env{stdout: &buf, stderr: &buf}
		log := hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Info})
		p := newProgress(e, &logFlags{}, &progressFlags{every: tc.every}, log)
		if p.live {
			t.Fatal("a bytes.Buffer counted as a terminal")
		}
		report := p.iterations(100, "order", 3)
		for it := 1; it <= 50; it++ {
			report(factor.IterStats{Iteration: it, LogLik: -float64(1000 - it), RelChange: math.NaN(),
				IterTime: time.Millisecond, Elapsed: time.Duration(it) * time.Millisecond, NNZ: 10})
		}
		p.done()
		if got := strings.Count(buf.String(), "iteration: iter="); got != tc.want {
			t.Errorf("--log-every %v: %d lines, want %d:\n%s", tc.every, got, tc.want, buf.String())
		}
		if !strings.Contains(buf.String(), "iter=1 order=3 loglik=-999") {
			t.Errorf("the first line lacks the iteration, order or log-likelihood:\n%s", buf.String())
		}
	}
	var buf bytes.Buffer
	e := &env{stdout: &buf, stderr: &buf}
	p := newProgress(e, &logFlags{}, &progressFlags{every: time.Hour}, hclog.New(&hclog.LoggerOptions{Output: &buf}))
	for done := 0; done <= 7; done++ {
		p.runs(done, 7)
	}
	if got := strings.Count(buf.String(), "runs: done="); got != 2 || !strings.Contains(buf.String(), "done=7 total=7") {
		t.Errorf("runs: want the first and the final line:\n%s", buf.String())
	}
}
