package main

import (
	"context"
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

// runScaling is emsf scaling: the cost model's table of a cluster
// iteration (coordinator/costmodel) at the target scale, and with --check
// the model against what scripts/netns-cluster.sh measured.
func runScaling(_ context.Context, e *env, args []string) error {
	var (
		n, m, u            int
		nnz, ns, cores     float64
		kappa, rtt, membw  float64
		conns, window      int
		nodesS, gbitS      string
		check              string
		skip               int
		boxCores, overhead float64
		boxKappa           float64
		colBlocks, shards  int
		colCells           int
		serial             bool
		memory             bool
		checkMem           string
		mc                 costmodel.MemCalibration
	)
	fs := newFlagSet(e, "scaling", "scaling [flags]")
	fs.IntVar(&n, "states", 10_000_000, "n, states")
	fs.IntVar(&m, "order", 32, "m, hidden states")
	fs.IntVar(&u, "actions", 10, "u, actions")
	fs.Float64Var(&nnz, "nnz", 1e10, "η, nonzeros in total")
	fs.StringVar(&nodesS, "nodes", "8,16,64,256", "P, nodes (comma-separated)")
	fs.StringVar(&gbitS, "gbit", "10,100", "link rates in Gbit/s per direction (comma-separated)")
	fs.Float64Var(&ns, "ns-per-nnz", 10, "t, compute per nonzero per core (ns)")
	fs.Float64Var(&cores, "cores", 32, "c, cores per node")
	fs.Float64Var(&kappa, "cpu-per-byte", 0, "κ, CPU seconds per byte of one NATS leg (1.9e-9 measured here); 0: line rate")
	fs.IntVar(&conns, "conns", 1, "connections a node's transfers spread over")
	fs.Float64Var(&rtt, "rtt", 0, "round-trip time (s); each 1 MiB chunk of a pull pays one per --window chunks")
	fs.IntVar(&window, "window", 1, "chunk requests a pull keeps outstanding")
	fs.Float64Var(&membw, "merge-bw", 0, "design A: the coordinator's reduce rate (bytes of partial per s; 0: not counted)")
	fs.StringVar(&check, "check", "", "compare the model of designs A and B (owners, grouped, gather/compute/fold in turn) with the iterations.csv of scripts/netns-cluster.sh instead")
	fs.IntVar(&colBlocks, "col-blocks", 0, "design B as built (emsf fit --exchange owners): column blocks per K block, the coordinator's bytes then those of its protocol (-1: emsf's default for n and m; 0: the spec's per-group idealisation; with --check 0 means 8, the harness's --col-blocks)")
	fs.IntVar(&shards, "shards", 0, "design B: shards in total (0: one per node and K block; a node's shards each gather and send their own slice)")
	fs.BoolVar(&serial, "serial", false, "designs B and C: gather, compute and fold in turn (today's owners exchange) instead of overlapping the transfers with compute")
	fs.IntVar(&colCells, "col-cells", 2, "with --check: the --col-cells of the harness's design C runs (their grid is the one emsf places); with --memory and --check-memory: emsf fit --col-cells (1: no grid)")
	fs.BoolVar(&memory, "memory", false, "print the memory per node of the owners exchange by part (shards, owned blocks and folds, the running task, slices, buffers, GC headroom) for each --nodes instead")
	fs.StringVar(&checkMem, "check-memory", "", "compare the memory model with the workers' peaks in the summary.tsv of scripts/memproof.sh (run on the workload of --states, --nnz, --actions, --order, --col-cells, --shard-nnz) instead")
	fs.Float64Var(&mc.ShardNNZ, "shard-nnz", 131072, "memory model: nonzeros per shard (row range) (emsf fit --shard-nnz)")
	fs.Float64Var(&mc.GOGC, "gogc", 25, "memory model: the workers' GOGC")
	fs.IntVar(&skip, "skip", 2, "with --check: leading iterations of each run left out (shard and D downloads)")
	fs.Float64Var(&boxCores, "box-cores", 2, "with --check: cores of the machine the emulated nodes share")
	fs.Float64Var(&boxKappa, "box-cpu-per-byte", 0, "with --check, design B: CPU seconds per byte moved between the emulated nodes, of the machine they share (all nodes exchange at once and their transport CPU adds to the iteration; real nodes have their own)")
	fs.Float64Var(&overhead, "wire-overhead", 0, "with --check: wire bytes per payload byte (TCP/IP and NATS framing); 0: measured on the P = 1 runs (coordinator veth bytes / emsf's byte count)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if conns < 1 || window < 1 {
		return usagef("--conns %d, --window %d: must be >= 1", conns, window)
	}
	cal := costmodel.Calibration{NsPerNNZ: ns, Cores: cores, CPUPerByte: kappa, Conns: conns, RTT: rtt, Window: window, MemBytesPerSec: membw}
	probe := cal
	probe.LinkBytesPerSec = 1 // set per rate below
	if err := probe.Validate(); err != nil {
		return usagef("%v", err)
	}
	if check != "" {
		switch {
		case skip < 0:
			return usagef("--skip %d: must be >= 0", skip)
		case !(boxCores > 0):
			return usagef("--box-cores %v: must be > 0", boxCores)
		case overhead != 0 && !(overhead >= 1):
			return usagef("--wire-overhead %v: must be >= 1 (or 0: measured)", overhead)
		case colBlocks < 0:
			return usagef("--col-blocks %d: must be >= 0 with --check", colBlocks)
		case !(boxKappa >= 0):
			return usagef("--box-cpu-per-byte %v: must be >= 0", boxKappa)
		}
		if colBlocks == 0 {
			colBlocks = 8
		}
		return scalingCheck(e.stdout, check, skip, boxCores, overhead, boxKappa, colBlocks, colCells, cal)
	}
	nodes, err := intList("nodes", nodesS)
	if err != nil {
		return err
	}
	if memory || checkMem != "" {
		w := costmodel.Workload{N: n, M: m, U: u, NNZ: nnz, ColCells: colCells}
		if err := w.Validate(); err != nil {
			return usagef("%v", err)
		}
		if checkMem != "" {
			return scalingCheckMemory(e.stdout, checkMem, w, mc)
		}
		return scalingMemory(e.stdout, w, nodes, mc)
	}
	var gbits []float64
	for _, f := range strings.Split(gbitS, ",") {
		g, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || !(g > 0) || math.IsInf(g, 0) {
			return usagef("--gbit %q: %q is not a positive number", gbitS, f)
		}
		gbits = append(gbits, g)
	}
	if colBlocks == -1 && n > 0 && m > 0 {
		colBlocks = costmodel.DefaultColBlocks(n, m)
	}
	if colBlocks < 0 || shards < 0 {
		return usagef("--col-blocks %d, --shards %d: must be >= 0 (or -1 for --col-blocks)", colBlocks, shards)
	}
	cal.Serial = serial
	w := costmodel.Workload{N: n, M: m, U: u, NNZ: nnz, Shards: shards, ColBlocks: colBlocks}
	if err := w.Validate(); err != nil {
		return usagef("%v", err)
	}
	fmt.Fprintf(e.stdout, "cost model per iteration: n=%d m=%d u=%d η=%.3g s=8, t=%g ns/nnz, c=%g cores, κ=%g s/B over %d connection(s), RTT=%g s, window %d\n",
		n, m, u, nnz, ns, cores, kappa, conns, rtt, window)
	if colBlocks > 0 || shards > 0 || serial {
		fmt.Fprintf(e.stdout, "design B as built: %d column blocks per K block (0: the spec's coordinator), %d shards (0: one per node and K block), serial %v\n", colBlocks, shards, serial)
	}
	fmt.Fprintln(e.stdout)
	fmt.Fprintf(e.stdout, "| P | design | f | node in / out (GB) | coordinator in / out (GB) | memory per node (GB) | T_comp (s) |")
	for _, g := range gbits {
		fmt.Fprintf(e.stdout, " T_iter @%gG (s) |", g)
	}
	fmt.Fprintf(e.stdout, "\n|---|---|---|---|---|---|---|%s\n", strings.Repeat("---|", len(gbits)))
	for _, p := range nodes {
		for _, d := range costmodel.Designs() {
			var row strings.Builder
			for k, g := range gbits {
				c := cal
				c.LinkBytesPerSec = costmodel.GbitPerSec(g)
				est, err := costmodel.Evaluate(w, d, p, c)
				if err != nil {
					return usagef("%v", err)
				}
				if k == 0 {
					name := d.String()
					if est.GridRows > 0 {
						name += fmt.Sprintf(" %d×%d", est.GridRows, est.GridCols)
					}
					fmt.Fprintf(&row, "| %d | %s | %.2f | %.3g / %.3g | %.3g / %.3g | %s | %.3g |", p, name, est.F,
						est.NodeIn/1e9, est.NodeOut/1e9, est.CoordIn/1e9, est.CoordOut/1e9, memPerNode(w, d, p, est, mc), est.TComp)
				}
				fmt.Fprintf(&row, " %.3g |", est.TIter)
			}
			fmt.Fprintln(e.stdout, row.String())
		}
	}
	return nil
}

// harnessRun is one run of scripts/netns-cluster.sh: its setup and the
// means over its steady iterations.
type harnessRun struct {
	design                                    string
	p, n, u, m, iters, shards                 int
	nnz, rateMbit                             float64
	wall, coordTx, coordRx, tx, rx, app, retx []float64
	// Means: wall time, the coordinator's veth tx and rx, a worker
	// node's (mean over nodes) tx and rx, emsf's own byte count, and the
	// bytes a worker node retransmitted (0 when the CSV has no column).
	medWall, medCTx, medCRx, mTx, mRx, mApp, mRetx float64
}

// readHarness reads iterations.csv into runs, in file order, leaving out
// each run's first skip iterations.
func readHarness(path string, skip int) ([]*harnessRun, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("scaling: %w", err)
	}
	defer f.Close()
	r := csv.NewReader(f)
	need := []string{"design", "P", "n", "u", "m", "nnz", "rate_mbit", "iter", "wall_s", "emsf_bytes", "coord_tx", "coord_rx", "node_tx_mean", "node_rx_mean"}
	col, err := tableHeader(r, path, need, "")
	if err != nil {
		return nil, err
	}
	var runs []*harnessRun
	index := map[string]*harnessRun{}
	for line := 2; ; line++ {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("scaling: %s: %w", path, err)
		}
		num := func(h string) (float64, error) {
			v, err := strconv.ParseFloat(rec[col[h]], 64)
			if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				return 0, fmt.Errorf("scaling: %s line %d column %s: %q is not a non-negative number", path, line, h, rec[col[h]])
			}
			return v, nil
		}
		vals := map[string]float64{}
		for _, h := range []string{"node_retx_mean", "shards"} {
			if _, ok := col[h]; ok {
				if vals[h], err = num(h); err != nil {
					return nil, err
				}
			}
		}
		for _, h := range need[1:] {
			if vals[h], err = num(h); err != nil {
				return nil, err
			}
		}
		key := strings.Join([]string{rec[col["design"]], rec[col["P"]], rec[col["n"]], rec[col["u"]], rec[col["m"]], rec[col["nnz"]], rec[col["rate_mbit"]]}, ",")
		run := index[key]
		if run == nil {
			run = &harnessRun{design: rec[col["design"]], p: int(vals["P"]), n: int(vals["n"]), u: int(vals["u"]), m: int(vals["m"]),
				nnz: vals["nnz"], rateMbit: vals["rate_mbit"], shards: int(vals["shards"])}
			index[key] = run
			runs = append(runs, run)
		}
		run.iters++
		if int(vals["iter"]) <= skip {
			continue
		}
		run.wall = append(run.wall, vals["wall_s"])
		run.coordTx = append(run.coordTx, vals["coord_tx"])
		run.coordRx = append(run.coordRx, vals["coord_rx"])
		run.tx = append(run.tx, vals["node_tx_mean"])
		run.rx = append(run.rx, vals["node_rx_mean"])
		run.app = append(run.app, vals["emsf_bytes"])
		run.retx = append(run.retx, vals["node_retx_mean"])
	}
	for _, run := range runs {
		// Design B's last iteration also carries the start of the final
		// checkpoint (the owners store their blocks, the workers their
		// rows of D, after its report): leave it out.
		if (run.design == "B" || run.design == "C") && len(run.wall) > 1 {
			last := len(run.wall) - 1
			run.wall, run.coordTx, run.coordRx = run.wall[:last], run.coordTx[:last], run.coordRx[:last]
			run.tx, run.rx, run.app, run.retx = run.tx[:last], run.rx[:last], run.app[:last], run.retx[:last]
		}
		if len(run.wall) == 0 {
			return nil, fmt.Errorf("scaling: %s: run %s P=%d n=%d has no iteration after the first %d", path, run.design, run.p, run.n, skip)
		}
		run.medWall, run.medCTx, run.medCRx = meanOf(run.wall), meanOf(run.coordTx), meanOf(run.coordRx)
		run.mTx, run.mRx, run.mApp = meanOf(run.tx), meanOf(run.rx), meanOf(run.app)
		run.mRetx = meanOf(run.retx)
	}
	return runs, nil
}

// tableHeader reads the header of a CSV or TSV table and returns each
// column's index, or an error naming the first column of need it lacks
// (with hint after it).
func tableHeader(r *csv.Reader, path string, need []string, hint string) (map[string]int, error) {
	head, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("scaling: %s: header: %w", path, err)
	}
	col := map[string]int{}
	for k, h := range head {
		col[h] = k
	}
	for _, h := range need {
		if _, ok := col[h]; !ok {
			return nil, fmt.Errorf("scaling: %s: no column %q%s", path, h, hint)
		}
	}
	return col, nil
}

// meanOf is the mean of xs. Means, not medians: an iteration's end is
// the report's timestamp, between two counter samples, so bytes near it
// land in one iteration or the next, and only the sum over iterations is
// exact.
func meanOf(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// scalingCheck prints designs A's and B's measured against modelled
// figures, and fails when a per-node byte count is off by more than 5%
// (design B: or by less than 2 kB, the NATS pings and interest updates
// of a node that exchanges only the coordinator's few kB), design B's
// coordinator bytes (emsf's own count) by more than 10%, or an iteration
// time by more than 25%.
func scalingCheck(w io.Writer, path string, skip int, boxCores, overhead, boxKappa float64, colBlocks, colCells int, cal costmodel.Calibration) error {
	runs, err := readHarness(path, skip)
	if err != nil {
		return err
	}
	if overhead == 0 {
		// Calibrate the framing on the P = 1 runs (TCP/IP headers, ACKs,
		// NATS protocol lines): the coordinator's veth bytes against the
		// payload emsf counted. The other runs are the check.
		var wire, app float64
		for _, r := range runs {
			if r.design == "A" && r.p == 1 {
				wire += r.medCTx + r.medCRx
				app += r.mApp
			}
		}
		if app == 0 {
			return fmt.Errorf("scaling: %s: no design A run with P = 1 to measure the wire overhead on; give --wire-overhead", path)
		}
		overhead = wire / app
	}
	fmt.Fprintf(w, "design A: measured (mean of iterations > %d) vs model; t=%g ns/nnz on %g shared cores, wire overhead %.4f, κ=%g s/B\n\n",
		skip, cal.NsPerNNZ, boxCores, overhead, cal.CPUPerByte)
	fmt.Fprintln(w, "Node out is what a worker node sent less what it retransmitted (TCP RetransSegs × 1514 B; the")
	fmt.Fprintln(w, "retransmissions are the incast at the coordinator's link, shown apart).")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| P | n | rate (Mbit/s) | node in meas / model (MB) | node out meas / model (MB) | node retransmitted (MB) | coord tx meas / model (MB) | coord rx meas / model (MB) | s/iter meas / model | within ±5% / ±25% |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
	bad := 0
	verdict := func(b bool) string {
		if b {
			return "yes"
		}
		bad++
		return "**no**"
	}
	rel := func(meas, model float64) float64 { return meas/model - 1 }
	var other []*harnessRun
	for _, r := range runs {
		if r.design != "A" {
			other = append(other, r)
			continue
		}
		c := cal
		c.LinkBytesPerSec = r.rateMbit * 1e6 / 8 / overhead
		// The emulated nodes share the machine: P workers compute on at
		// most boxCores cores together.
		c.Cores = math.Min(float64(r.p), boxCores) / float64(r.p)
		// Today's raw partial: an int32 index and Σx per row, an int32
		// index per column (wire.EncodeRawPartial).
		wl := costmodel.Workload{N: r.n, M: r.m, U: r.u, NNZ: r.nnz, RowExtra: 12, ColExtra: 4}
		est, err := costmodel.Evaluate(wl, costmodel.StarA, r.p, c)
		if err != nil {
			return err
		}
		sent := r.mTx - r.mRetx
		in, out, t := rel(r.mRx, est.NodeIn*overhead), rel(sent, est.NodeOut*overhead), rel(r.medWall, est.TIter)
		ok := math.Abs(in) <= 0.05 && math.Abs(out) <= 0.05
		okT := math.Abs(t) <= 0.25
		fmt.Fprintf(w, "| %d | %d | %g | %.3f / %.3f (%+.1f%%) | %.3f / %.3f (%+.1f%%) | %.3f | %.3f / %.3f | %.3f / %.3f | %.2f / %.2f (%+.0f%%) | %s / %s |\n",
			r.p, r.n, r.rateMbit, r.mRx/1e6, est.NodeIn*overhead/1e6, 100*in, sent/1e6, est.NodeOut*overhead/1e6, 100*out, r.mRetx/1e6,
			r.medCTx/1e6, est.CoordOut*overhead/1e6, r.medCRx/1e6, est.CoordIn*overhead/1e6,
			r.medWall, est.TIter, 100*t, verdict(ok), verdict(okT))
	}
	if len(other) > 0 {
		fmt.Fprintf(w, "\ndesign B (owners, grouped: whole actions per node when u >= P, else P/u nodes per action; gather, compute, fold in turn), %d column blocks per K block, %g s of the shared machine's CPU per byte between nodes\n\n", colBlocks, boxKappa)
		fmt.Fprintln(w, "| P | n | rate (Mbit/s) | shards | node in meas / model (kB) | node out meas / model (kB) | node retransmitted (kB) | coordinator bytes emsf / model (kB) | coord tx / rx (kB) | s/iter meas / model | within ±5% / ±10% / ±25% |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|")
	}
	for _, r := range other {
		design := costmodel.OwnersGrouped
		switch r.design {
		case "B":
		case "C":
			design = costmodel.GridGrouped
		default:
			fmt.Fprintf(w, "(run %s P=%d n=%d: design %q has no model here)\n", r.design, r.p, r.n, r.design)
			continue
		}
		c := cal
		c.LinkBytesPerSec = r.rateMbit * 1e6 / 8 / overhead
		c.Cores = math.Min(float64(r.p), boxCores) / float64(r.p)
		c.Serial = true
		// A gather request and a K̂ slice carry an int32 index per column.
		wl := costmodel.Workload{N: r.n, M: r.m, U: r.u, NNZ: r.nnz, ColExtra: 4, Shards: r.shards, ColBlocks: colBlocks}
		if design == costmodel.GridGrouped {
			wl.ColCells = colCells
		}
		est, err := costmodel.Evaluate(wl, design, r.p, c)
		if err != nil {
			return err
		}
		// The emulated nodes' transport shares the machine's cores: all
		// of them exchange at once, in turn with compute.
		est.TIter += float64(r.p) * est.NodeIn * boxKappa / boxCores
		sent := r.mTx - r.mRetx
		near := func(meas, model float64) bool {
			return math.Abs(meas-model) <= 2000 || math.Abs(rel(meas, model)) <= 0.05
		}
		coord := est.CoordIn + est.CoordOut
		in, out, cb, t := rel(r.mRx, est.NodeIn*overhead), rel(sent, est.NodeOut*overhead), rel(r.mApp, coord), rel(r.medWall, est.TIter)
		fmt.Fprintf(w, "| %d | %d | %g | %d | %.1f / %.1f (%+.1f%%) | %.1f / %.1f (%+.1f%%) | %.1f | %.1f / %.1f (%+.1f%%) | %.1f / %.1f | %.3f / %.3f (%+.0f%%) | %s / %s / %s |\n",
			r.p, r.n, r.rateMbit, r.shards, r.mRx/1e3, est.NodeIn*overhead/1e3, 100*in, sent/1e3, est.NodeOut*overhead/1e3, 100*out, r.mRetx/1e3,
			r.mApp/1e3, coord/1e3, 100*cb, r.medCTx/1e3, r.medCRx/1e3, r.medWall, est.TIter, 100*t,
			verdict(near(r.mRx, est.NodeIn*overhead) && near(sent, est.NodeOut*overhead)), verdict(math.Abs(cb) <= 0.10), verdict(math.Abs(t) <= 0.25))
	}
	if bad > 0 {
		return fmt.Errorf("scaling: %d check(s) outside the tolerance", bad)
	}
	return nil
}
