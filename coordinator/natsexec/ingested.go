package natsexec

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"sort"
	"strconv"
	"sync"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/coordinator/owners"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
	"github.com/emsf/emsf/worker/ingestwire"
	"github.com/emsf/emsf/worker/wire"
	"github.com/emsf/emsf/worker/wire/proto"
)

// A fit whose coordinator holds metadata only (`emsf fit --nats` on a
// dataset): the distributed ingest leaves the shards on the workers (and
// in the Object Store); IngestedJob has the workers cut the row groups
// of D from them and store their row lists; DrawnModel has them draw the
// random initial model's pieces as checkpoint 0 and, at the end, streams
// the last checkpoint into a model dataset with bounded memory. The
// coordinator never holds a shard, a row of D or a column of K: it holds
// the shard lines, the row groups' lines, the K blocks' column sums of
// the init (m values each) and one buffer of rows while it writes.

// spreadAttempts bounds how often a piece of work lost with its worker
// is asked of another.
const spreadAttempts = 4

// spreadChunk is the most items one request of spread carries: a share
// of thousands of row groups and column blocks (many actions, large n)
// would not fit one NATS message.
const spreadChunk = 256

// spread runs work on the workers alive: items (indices 0..n−1) are
// dealt to workers (prefer names the worker to give an item first, ""
// for none) and each worker's share is done by do, in parallel across
// workers, in chunks of at most spreadChunk items one after another. A
// worker whose request fails loses what is left of its share to the
// others (up to spreadAttempts rounds): the work is a pure function of
// the data, so anyone computes the same bytes.
func (e *Executor) spread(ctx context.Context, n int, prefer func(i int) string, do func(ctx context.Context, worker string, items []int) error) error {
	left := make([]int, n)
	for i := range left {
		left[i] = i
	}
	failed := map[string]error{}
	var last error
	for range spreadAttempts {
		if len(left) == 0 {
			return nil
		}
		ids, err := e.Census(ctx)
		if err != nil {
			return err
		}
		ids = slices.DeleteFunc(ids, func(id string) bool { return failed[id] != nil })
		if len(ids) == 0 {
			if last == nil {
				last = errors.New("no workers")
			}
			return fmt.Errorf("natsexec: no worker left to ask: %w", last)
		}
		share := map[string][]int{}
		for q, i := range left {
			w := ""
			if prefer != nil {
				w = prefer(i)
			}
			if !slices.Contains(ids, w) {
				w = ids[q%len(ids)]
			}
			share[w] = append(share[w], i)
		}
		var mu sync.Mutex
		var wg sync.WaitGroup
		left = left[:0]
		for w, items := range share {
			wg.Go(func() {
				for start := 0; start < len(items); start += spreadChunk {
					err := do(ctx, w, items[start:min(len(items), start+spreadChunk)])
					if err == nil {
						continue
					}
					mu.Lock()
					defer mu.Unlock()
					e.log.Warn("a worker failed its share; asking another", "worker_id", w, "items", len(items)-start, "error", err)
					failed[w], last = err, err
					left = append(left, items[start:]...)
					return
				}
			})
		}
		wg.Wait()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		slices.Sort(left)
	}
	if len(left) == 0 {
		return nil
	}
	return fmt.Errorf("natsexec: %d pieces of work failed on every worker asked: %w", len(left), last)
}

// IngestedJob returns the owners job of shards an ingest built (lines:
// one set's, in shard order, each naming its holder): their lines, and
// the row groups of D (shard.CutDGroups' groups, bitwise) that the
// workers cut from the shards and whose row lists they store. The
// holder of a range's first cell cuts it when it is alive (its cache
// holds the shards), any worker otherwise (from the Object Store). Not
// under --tie shared-d, whose groups take every action's rows at once.
func (e *Executor) IngestedJob(ctx context.Context, job string, lines []shard.Line, tie factor.Tie) (*owners.Job, error) {
	if tie == factor.TieSharedD {
		return nil, errors.New("natsexec: --tie shared-d: the row groups take every action's rows; the coordinator cuts them")
	}
	if err := wire.CheckJob(job); err != nil {
		return nil, fmt.Errorf("natsexec: %w", err)
	}
	j := &owners.Job{Name: job, Shards: make([]shard.Info, len(lines)), Holders: make([]string, len(lines))}
	for k, l := range lines {
		in := l.Info
		in.Rows, in.DataTerm = l.Rows, l.DataTerm
		j.Shards[k], j.Holders[k] = in, l.Holder
	}
	ranges := shard.RowGroups(j.Shards)
	q := 0
	for _, cells := range ranges {
		q = max(q, len(cells))
	}
	rr := make([]ingestwire.RowRange, len(ranges))
	want := make([]int, len(ranges)) // groups per range
	g0 := 0
	for x, cells := range ranges {
		rows := lines[cells[0]].RangeRows
		if rows < 1 {
			return nil, fmt.Errorf("natsexec: shard %d: its line counts no rows in its range (a worker of an older release built it?)", cells[0])
		}
		r := ingestwire.RowRange{DBlock: j.Shards[cells[0]].Action, Cells: cells, Q: q, G0: g0}
		for _, k := range cells {
			r.Checksums = append(r.Checksums, j.Shards[k].Checksum)
		}
		rr[x], want[x] = r, min(q, rows)
		g0 += want[x]
	}
	got := make([][]shard.DGroup, len(ranges))
	c := &natsCluster{e: e}
	err := e.spread(ctx, len(rr), func(x int) string { return j.Holders[rr[x].Cells[0]] }, func(ctx context.Context, w string, items []int) error {
		req := &ingestwire.GroupsRequest{Job: job, Bucket: e.cfg.ObjectBucket}
		for _, x := range items {
			req.Ranges = append(req.Ranges, rr[x])
		}
		var rep ingestwire.GroupsReply
		if err := c.call(ctx, w, job, ingestwire.OpGroups, req, &rep); err != nil {
			return err
		}
		if len(rep.Groups) != len(items) {
			return fmt.Errorf("natsexec: worker %s cut %d row ranges of %d", w, len(rep.Groups), len(items))
		}
		for q, x := range items {
			if len(rep.Groups[q]) != want[x] {
				return fmt.Errorf("natsexec: worker %s cut row range %d into %d groups, its line says %d", w, x, len(rep.Groups[q]), want[x])
			}
			got[x] = rep.Groups[q]
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("natsexec: job %s: row groups of D: %w", job, err)
	}
	for _, gs := range got {
		j.Groups = append(j.Groups, gs...)
	}
	return j, nil
}

// DrawnModel is owners.Model for a coordinator that holds no factor: the
// workers draw the random initial model (Initial), and Final streams the
// fitted one into a model dataset.
type DrawnModel struct {
	e   *Executor
	hdr *factor.Model
	// Sink and Format are where and how Final writes the model's parts;
	// Parts are the parts it wrote (the caller commits the dataset with
	// the model's metadata, known once the fit has ended).
	Sink   arrowio.PartSink
	Format string
	Parts  []arrowio.ModelPart
}

// NewDrawnModel returns the model of a fit from factor.NewRandom(hdr.N,
// hdr.M, hdr.U, hdr.Tie, hdr.Seed) (with hdr.Precision), its parts
// written into sink in format at the end.
func (e *Executor) NewDrawnModel(hdr *factor.Model, sink arrowio.PartSink, format string) *DrawnModel {
	return &DrawnModel{e: e, hdr: hdr, Sink: sink, Format: format}
}

// Initial has the workers draw checkpoint 0: each row group's rows of D
// and each column block of K, the K blocks' column sums computed here
// first (streamed: m values per K block).
func (d *DrawnModel) Initial(ctx context.Context, p *owners.Plan) ([][]string, []string, error) {
	h := d.hdr
	sums := factor.RandomKSums(h.N, h.M, h.U, h.Tie, h.Seed)
	type piece struct{ g, kb, q int } // a row group (g ≥ 0) or column block q of K block kb
	var pieces []piece
	for g := range p.Groups {
		pieces = append(pieces, piece{g: g})
	}
	kcrc := make([][]string, len(p.Cols))
	for kb, cbs := range p.Cols {
		kcrc[kb] = make([]string, len(cbs))
		for q := range cbs {
			pieces = append(pieces, piece{g: -1, kb: kb, q: q})
		}
	}
	dcrc := make([]string, len(p.Groups))
	c := &natsCluster{e: d.e}
	err := d.e.spread(ctx, len(pieces), nil, func(ctx context.Context, w string, items []int) error {
		// The column sums of the K blocks this request draws (nil for
		// the others: a message holds a few, not u·m values).
		req := &ingestwire.InitRequest{Job: p.Job, Bucket: d.e.cfg.ObjectBucket, N: h.N, M: h.M, U: h.U, Tie: h.Tie.String(), Seed: h.Seed,
			Sums: make([][]float64, len(sums))}
		if h.Precision != factor.Float64 {
			req.Precision = h.Precision.String()
		}
		for _, i := range items {
			pc := pieces[i]
			if pc.g >= 0 {
				dg := p.Groups[pc.g]
				req.Groups = append(req.Groups, ingestwire.InitGroup{G: pc.g, DBlock: dg.DBlock, RowsCRC: dg.RowsCRC})
			} else {
				cb := p.Cols[pc.kb][pc.q]
				req.Blocks = append(req.Blocks, ingestwire.InitBlock{KBlock: pc.kb, C: cb.C, Lo: cb.Lo, Hi: cb.Hi})
				req.Sums[pc.kb] = sums[pc.kb]
			}
		}
		var rep ingestwire.InitReply
		if err := c.call(ctx, w, p.Job, ingestwire.OpInit, req, &rep); err != nil {
			return err
		}
		if len(rep.DCRC) != len(req.Groups) || len(rep.KCRC) != len(req.Blocks) {
			return fmt.Errorf("natsexec: worker %s drew %d row groups and %d column blocks of %d and %d", w, len(rep.DCRC), len(rep.KCRC), len(req.Groups), len(req.Blocks))
		}
		gi, bi := 0, 0
		for _, i := range items {
			if pc := pieces[i]; pc.g >= 0 {
				dcrc[pc.g] = rep.DCRC[gi]
				gi++
			} else {
				kcrc[pc.kb][pc.q] = rep.KCRC[bi]
				bi++
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("natsexec: job %s: the initial model: %w", p.Job, err)
	}
	return kcrc, dcrc, nil
}

// finalRows is how many rows Final appends at a time.
const finalRows = 4096

// Final streams checkpoint c into one part per block of D and K, in the
// rows' order: each K block from its column blocks, each D block from
// its row groups' rows with the rows no group holds (no data: the fit
// never moved them) drawn again from the init. Every object is checked
// against the checkpoint's CRC as it is read; the coordinator holds
// finalRows rows at a time and one row group's row list.
func (d *DrawnModel) Final(ctx context.Context, p *owners.Plan, c owners.Checkpoint) error {
	h := d.hdr
	shape := arrowio.ModelShape{N: h.N, M: h.M, U: h.U, Tie: h.Tie}
	d.Parts = d.Parts[:0]
	part := func(f string, b int, fill func(pw *arrowio.ModelPartWriter) error) error {
		pw, err := arrowio.NewModelPartWriter(ctx, d.Sink, shape, arrowio.PartSpec{Factor: f, Block: b, Lo: 0, Hi: h.N, Format: d.Format})
		if err != nil {
			return err
		}
		if err := fill(pw); err != nil {
			pw.Abort()
			return err
		}
		mp, err := pw.Close()
		if err != nil {
			return err
		}
		d.Parts = append(d.Parts, mp)
		return nil
	}
	buf := make([]float64, finalRows*h.M)
	for db := range factor.NumD(h.U, h.Tie) {
		var gs []int
		for g, dg := range p.Groups {
			if dg.DBlock == db && dg.Rows > 0 {
				gs = append(gs, g)
			}
		}
		sort.SliceStable(gs, func(a, b int) bool { return p.Groups[gs[a]].Lo < p.Groups[gs[b]].Lo })
		err := part("D", db, func(pw *arrowio.ModelPartWriter) error {
			next := 0
			for _, g := range gs {
				rows, err := d.rowList(ctx, p, g)
				if err != nil {
					return err
				}
				if rows[0] < int32(next) {
					return fmt.Errorf("natsexec: job %s: row group %d starts at row %d, before row %d of the group before it", p.Job, g, rows[0], next)
				}
				rd, done, err := d.open(ctx, proto.DObject(p.Job, c.Version, g), c.DCRC[g])
				if err != nil {
					return err
				}
				for q := 0; q < len(rows); {
					if int(rows[q]) > next {
						// Rows of no group: their random init.
						if err = d.drawD(pw, db, next, int(rows[q]), buf); err != nil {
							break
						}
					}
					// A run of the group's consecutive rows.
					e := q + 1
					for e < len(rows) && e-q < finalRows && rows[e] == rows[e-1]+1 {
						e++
					}
					vals := buf[:(e-q)*h.M]
					if err = readFloats(rd, vals); err == nil {
						err = pw.Append(vals)
					}
					if err != nil {
						break
					}
					next, q = int(rows[e-1])+1, e
				}
				if derr := done(); err == nil {
					err = derr
				}
				if err != nil {
					return fmt.Errorf("natsexec: job %s: row group %d: %w", p.Job, g, err)
				}
			}
			return d.drawD(pw, db, next, h.N, buf)
		})
		if err != nil {
			return err
		}
	}
	for kb, cbs := range p.Cols {
		cbs = slices.Clone(cbs)
		idx := make([]int, len(cbs))
		for q := range idx {
			idx[q] = q
		}
		sort.SliceStable(idx, func(a, b int) bool { return cbs[idx[a]].Lo < cbs[idx[b]].Lo })
		err := part("K", kb, func(pw *arrowio.ModelPartWriter) error {
			for _, q := range idx {
				cb := cbs[q]
				rd, done, err := d.open(ctx, proto.KObject(p.Job, c.Version, kb, cb.C), c.KCRC[kb][q])
				if err != nil {
					return err
				}
				for lo := cb.Lo; lo < cb.Hi && err == nil; lo += finalRows {
					vals := buf[:(min(cb.Hi, lo+finalRows)-lo)*h.M]
					if err = readFloats(rd, vals); err == nil {
						err = pw.Append(vals)
					}
				}
				if derr := done(); err == nil {
					err = derr
				}
				if err != nil {
					return fmt.Errorf("natsexec: job %s: column block %d of K block %d: %w", p.Job, cb.C, kb, err)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// drawD appends rows [lo, hi) of D block db of the init (rounded as the
// model's precision asks).
func (d *DrawnModel) drawD(pw *arrowio.ModelPartWriter, db, lo, hi int, buf []float64) error {
	h := d.hdr
	rows := make([]int32, 0, min(hi-lo, finalRows))
	for i := lo; i < hi; {
		e := min(hi, i+finalRows)
		rows = rows[:0]
		for r := i; r < e; r++ {
			rows = append(rows, int32(r))
		}
		vals := buf[:len(rows)*h.M]
		factor.RandomDRows(h.N, h.M, h.U, h.Tie, h.Seed, db, rows, vals)
		if h.Precision == factor.Float32 {
			factor.RoundRows32(vals)
		}
		if err := pw.Append(vals); err != nil {
			return err
		}
		i = e
	}
	return nil
}

// rowList reads row group g's row list, checked against the plan's CRC.
func (d *DrawnModel) rowList(ctx context.Context, p *owners.Plan, g int) ([]int32, error) {
	name := proto.RowsObject(p.Job, g)
	data, err := d.e.obs.GetBytes(ctx, name)
	if err == nil && wire.CRC(data) != p.Groups[g].RowsCRC {
		err = fmt.Errorf("CRC %s, the plan says %s", wire.CRC(data), p.Groups[g].RowsCRC)
	}
	var rows []int32
	if err == nil {
		rows, err = wire.DecodeCols(data, 0, p.N, nil)
	}
	if err == nil && len(rows) != p.Groups[g].Rows {
		err = fmt.Errorf("%d rows, the plan says %d", len(rows), p.Groups[g].Rows)
	}
	if err != nil {
		return nil, fmt.Errorf("natsexec: read %s: %w", name, err)
	}
	return rows, nil
}

// open streams object name; done checks that it was read to its end and
// that its CRC-32C is crc.
func (d *DrawnModel) open(ctx context.Context, name, crc string) (io.Reader, func() error, error) {
	obj, err := d.e.obs.Get(ctx, name)
	if err != nil {
		return nil, nil, fmt.Errorf("natsexec: read %s: %w", name, err)
	}
	h := crc32.New(wire.Castagnoli)
	rd := bufio.NewReaderSize(io.TeeReader(obj, h), 1<<20)
	done := func() error {
		defer obj.Close()
		if n, err := io.Copy(io.Discard, rd); err != nil || n != 0 {
			return fmt.Errorf("natsexec: read %s: %d bytes more than its rows (%v)", name, n, err)
		}
		if got := strconv.FormatUint(uint64(h.Sum32()), 16); got != crc {
			return fmt.Errorf("natsexec: read %s: CRC %s, the checkpoint says %s", name, got, crc)
		}
		return nil
	}
	return rd, done, nil
}

// readFloats fills vals from r (little-endian float64).
func readFloats(r io.Reader, vals []float64) error {
	b := make([]byte, 8*len(vals))
	if _, err := io.ReadFull(r, b); err != nil {
		return fmt.Errorf("natsexec: short object: %w", err)
	}
	return wire.ReadFloats(vals, b)
}
