package main

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/coordinator/query"
	"github.com/emsf/emsf/coordinator/service"
	"github.com/emsf/emsf/shard"
)

const queryUsage = `query ENDPOINT [JSON] (--model FILE | --name NAME [--nats URL]) [flags]

Asks a model a question: JSON in (the argument, or stdin), JSON out, in
the model's ids. ENDPOINT is one of topk, next, prob, member, reduced,
stationary, plan, vocab (README "Asking a model" has each one's JSON).
With --model it reads the model file; with --name it asks the emsf serve
of that name over NATS (subject <prefix>.NAME.q.ENDPOINT, the same JSON).

  emsf query --model m.arrow topk '{"state":"user42","action":"left","k":5}'

--bench times top-k queries on the model in this process (and a scan of
K); --load sends them to a served model from --clients connections
(with --embedded, to the model file's endpoints served in this process).`

// runQuery is emsf query.
func runQuery(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "query", queryUsage)
	var (
		sf       serviceFlags
		model    string
		timeout  time.Duration
		maxK     int
		bench    benchQueryFlags
		doBench  bool
		doLoad   bool
		embedded bool
		endpoint string
		body     string
	)
	sf.register(fs)
	fs.StringVar(&model, "model", "", "model file to ask (else --name: a served model)")
	fs.DurationVar(&timeout, "timeout", 30*time.Second, "with --name: how long to wait for the answer")
	fs.IntVar(&maxK, "max-k", query.DefaultMaxK, "largest k, max_states and top a request may ask for")
	fs.BoolVar(&doBench, "bench", false, "time top-k queries on --model in this process: queries per second, the index's read depth, against one scan of K")
	fs.BoolVar(&doLoad, "load", false, "send top-k queries to the served model --name from --clients connections for --duration, states drawn from --model's ids: throughput and latency percentiles")
	fs.BoolVar(&embedded, "embedded", false, "with --load: serve --model's query endpoints in this process (emsf serve's handlers, queue and workers) on an embedded NATS server on 127.0.0.1, and send the queries to them over loopback TCP (--name defaults to load)")
	bench.register(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	switch {
	case doBench || doLoad:
		if model == "" {
			return usagef("--bench and --load draw their states from --model FILE")
		}
		if len(pos) > 0 {
			return usagef("unexpected argument %q with --bench or --load", pos[0])
		}
		if err := bench.validate(); err != nil {
			return err
		}
		if doLoad {
			if embedded && sf.name == "" {
				sf.name = "load"
			}
			if err := sf.validate(); err != nil {
				return err
			}
			return loadQueries(ctx, e, &sf, model, &bench, embedded)
		}
		if embedded {
			return usagef("--embedded goes with --load")
		}
		return benchQueries(ctx, e, model, &bench)
	case len(pos) == 0:
		return usagef("name an endpoint: one of %s", strings.Join(query.Endpoints, ", "))
	case len(pos) > 2:
		return usagef("unexpected argument %q (ENDPOINT and one JSON request)", pos[2])
	}
	endpoint = pos[0]
	if len(pos) == 2 {
		body = pos[1]
	} else {
		b, err := io.ReadAll(io.LimitReader(os.Stdin, query.MaxRequestBytes+1))
		if err != nil {
			return fmt.Errorf("read the request from stdin: %w", err)
		}
		body = string(b)
	}
	if (model == "") == (sf.name == "") {
		return usagef("give --model FILE (a model file) or --name NAME (a served model), one of them")
	}
	if model == "" {
		if err := sf.validate(); err != nil {
			return err
		}
		nc, err := sf.connect("emsf-query")
		if err != nil {
			return err
		}
		defer nc.Close()
		return request(ctx, e, nc, service.QuerySubject(sf.prefix, sf.name, endpoint), sf.name, []byte(body), timeout)
	}
	mf, err := arrowio.ReadModelAny(ctx, model)
	if err != nil {
		return err
	}
	eng, err := query.New(mf, 0, query.Options{MaxK: maxK, Workers: 2, Reward: rewardFile(mf.States)})
	if err != nil {
		return err
	}
	out, err := eng.Do(endpoint, []byte(body))
	var qe *query.Error
	if errors.As(err, &qe) {
		return fmt.Errorf("%s (code %s)", qe.Msg, qe.Code)
	}
	if err != nil {
		return err
	}
	return printJSON(e, endpoint, out)
}

// rewardFile reads a plan's reward file: a .npy vector of n values, or a
// CSV with columns state (ids or indices) and reward (states not listed:
// 0).
func rewardFile(states *shard.Vocab) func(string) ([]float64, error) {
	return func(path string) ([]float64, error) {
		if strings.EqualFold(filepath.Ext(path), ".npy") {
			return arrowio.ReadNPYVector(path)
		}
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		recs, err := csv.NewReader(f).ReadAll()
		if err != nil {
			return nil, err
		}
		if len(recs) < 1 || len(recs[0]) < 2 || strings.TrimSpace(recs[0][0]) != "state" || strings.TrimSpace(recs[0][1]) != "reward" {
			return nil, fmt.Errorf("want a .npy vector, or a CSV with header state,reward")
		}
		// The engine checks the length against n: size it to the largest
		// state named.
		var out []float64
		for r, rec := range recs[1:] {
			i, err := indexOf(states, rec[0])
			if err != nil || i < 0 {
				return nil, fmt.Errorf("row %d: state %q: not a state of the model", r+1, rec[0])
			}
			v, err := strconv.ParseFloat(strings.TrimSpace(rec[1]), 64)
			if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, fmt.Errorf("row %d: reward %q: not a finite number", r+1, rec[1])
			}
			for len(out) <= i {
				out = append(out, 0)
			}
			out[i] = v
		}
		if states != nil {
			out = append(out, make([]float64, states.Len()-len(out))...)
		}
		return out, nil
	}
}

// runModelExport is emsf model export.
func runModelExport(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "model export", "model export --model FILE --out DIR [--format npy,npz,csv]")
	var model, out, formats string
	fs.StringVar(&model, "model", "", "model file (required)")
	fs.StringVar(&out, "out", "", "directory to create (required; it must not exist, or be empty)")
	fs.StringVar(&formats, "format", "npy,npz,csv", "what to write: npy (one .npy per array), npz (model.npz), csv (one CSV per table), comma-separated")
	if err := parse(fs, args); err != nil {
		return err
	}
	if model == "" || out == "" {
		return usagef("--model and --out are required")
	}
	var fl []string
	for _, f := range strings.Split(formats, ",") {
		f = strings.TrimSpace(f)
		if f != arrowio.ExportNPY && f != arrowio.ExportNPZ && f != arrowio.ExportCSV {
			return usagef("--format %q: %q is not npy, npz or csv", formats, f)
		}
		fl = append(fl, f)
	}
	mf, err := arrowio.ReadModelAny(ctx, model)
	if err != nil {
		return err
	}
	if err := arrowio.ExportModel(out, mf, fl); err != nil {
		return err
	}
	ents, _ := os.ReadDir(out)
	var names []string
	for _, en := range ents {
		names = append(names, en.Name())
	}
	fmt.Fprintf(e.stdout, "wrote %s: %s\n(numpy: np.load(%q) gives D of block 0; docs/formats.md, \"Exports\")\n",
		out, strings.Join(names, " "), filepath.Join(out, "D_0.npy"))
	return nil
}
