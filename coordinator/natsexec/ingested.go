package natsexec

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/coordinator/ingest"
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
// random initial model's pieces as checkpoint 0 and, at the end, write
// the last checkpoint as the parts of a model dataset in the Object
// Store. The coordinator never holds a shard, a row of D or a column of
// K: it holds the shard lines, the row groups' lines, the K blocks'
// column sums of the init (m values each) and the parts' lines.

// spreadAttempts bounds how often a piece of work lost with its worker
// is asked of another.
const spreadAttempts = 4

// spreadChunk is the most items one request of spread carries: a share
// of thousands of row groups and column blocks (many actions, large n)
// would not fit one NATS message.
const spreadChunk = 256

// spread runs work on the workers alive (and not behind a slow link:
// placeable): items (indices 0..n−1) are
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
	var last, corrupt error
	for range spreadAttempts {
		if len(left) == 0 {
			return nil
		}
		ids, err := e.Census(ctx)
		if err != nil {
			return err
		}
		ids = slices.DeleteFunc(e.placeable(ctx, ids), func(id string) bool { return failed[id] != nil })
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
					if errors.As(err, new(*owners.CorruptError)) {
						// The same object fails for anyone: no point
						// asking another worker.
						corrupt = err
						return
					}
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
		if corrupt != nil {
			return corrupt
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
// workers draw the random initial model (Initial), and at the end write
// the fitted one's parts into a model dataset (Final).
type DrawnModel struct {
	e   *Executor
	hdr *factor.Model
	// Out and Format are where (nats-obj://BUCKET/PREFIX, a bucket that
	// exists) and how the workers write the model's parts; Parts are the
	// parts they wrote (the caller commits the dataset with the model's
	// metadata, known once the fit has ended).
	Out    string
	Format string
	Parts  []arrowio.ModelPart
	// Files names every part Final asked the workers for, written or
	// not: what to remove when the fit fails after it began.
	Files []string
	// PartRows, when set, is the most rows of a part (default: about
	// partBytes of values).
	PartRows int
}

// NewDrawnModel returns the model of a fit from factor.NewRandom(hdr.N,
// hdr.M, hdr.U, hdr.Tie, hdr.Seed) (with hdr.Precision), its parts
// written into the Object Store dataset out in format at the end.
func (e *Executor) NewDrawnModel(hdr *factor.Model, out, format string) *DrawnModel {
	return &DrawnModel{e: e, hdr: hdr, Out: out, Format: format}
}

// ModelParts opens the model dataset at url (nats-obj://BUCKET/PREFIX)
// on the executor's server; with create, a missing bucket is created.
func (e *Executor) ModelParts(ctx context.Context, url string, create bool) (*wire.ObjectParts, error) {
	return wire.OpenObjectParts(ctx, e.js, url, create, e.nc.MaxPayload())
}

// JobModelURL is where a fit of job whose output is not an Object Store
// dataset has its workers write the parts (under the job's name in the
// executor's bucket), for the coordinator to assemble or copy them.
func (e *Executor) JobModelURL(job string) string {
	return wire.ObjectScheme + e.cfg.ObjectBucket + "/" + job + ".model"
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

// partBytes is about the size of a part of the model dataset Final has
// written: a few parts per worker for a large model, one per block for a
// small one.
const partBytes = 64 << 20

// Final has the workers write checkpoint c into parts of the dataset
// d.Out: each part a run of a block's rows, from the row groups (D, the
// rows no group holds drawn again from the init) or column blocks (K)
// that lie in it. Any worker writes any part (it reads the checkpoint's
// objects, checked against their CRCs); the coordinator holds the parts'
// lines.
func (d *DrawnModel) Final(ctx context.Context, p *owners.Plan, c owners.Checkpoint) error {
	h := d.hdr
	rows := d.PartRows
	if rows < 1 {
		rows = max(1, partBytes/(8*h.M))
	}
	pieces := cutParts(p, c, h.N, rows)
	d.Files = d.Files[:0]
	for _, pc := range pieces {
		d.Files = append(d.Files, arrowio.PartSpec{Factor: pc.Factor, Block: pc.Block, Lo: pc.Lo, Hi: pc.Hi, Format: d.Format}.Name())
	}
	got := make([]arrowio.ModelPart, len(pieces))
	cl := &natsCluster{e: d.e}
	err := d.e.spread(ctx, len(pieces), nil, func(ctx context.Context, w string, items []int) error {
		req := &ingestwire.PartsRequest{Job: p.Job, Bucket: d.e.cfg.ObjectBucket, Version: c.Version, N: h.N, M: h.M, U: h.U,
			Tie: h.Tie.String(), Seed: h.Seed, Format: d.Format, Out: d.Out}
		if h.Precision != factor.Float64 {
			req.Precision = h.Precision.String()
		}
		for _, i := range items {
			req.Parts = append(req.Parts, pieces[i])
		}
		var rep ingestwire.PartsReply
		if err := cl.call(ctx, w, p.Job, ingestwire.OpParts, req, &rep); err != nil {
			var ie *wire.IngestError
			if errors.As(err, &ie) && ie.Code == wire.IngestCorrupt {
				// An object of the checkpoint failed its check: the
				// run falls back to the checkpoint before (owners).
				return &owners.CorruptError{Object: ie.Object, Err: err}
			}
			return err
		}
		if len(rep.Parts) != len(items) {
			return fmt.Errorf("natsexec: worker %s wrote %d parts of %d", w, len(rep.Parts), len(items))
		}
		for q, i := range items {
			mp, pc := rep.Parts[q], pieces[i]
			if mp.Factor != pc.Factor || mp.Block != pc.Block || mp.Lo != pc.Lo || mp.Hi != pc.Hi {
				return fmt.Errorf("natsexec: worker %s wrote part %s block %d rows [%d, %d) for %s block %d rows [%d, %d)",
					w, mp.Factor, mp.Block, mp.Lo, mp.Hi, pc.Factor, pc.Block, pc.Lo, pc.Hi)
			}
			got[i] = mp
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("natsexec: job %s: write the model's parts into %s: %w", p.Job, d.Out, err)
	}
	d.Parts = got
	return nil
}

// cutParts cuts the model of plan p, at checkpoint c, into parts of about
// rows rows each: each D block's row groups (by first row) and each K
// block's column blocks (by first column) in runs, every part a range of
// the block's rows, together tiling [0, n) of every block.
func cutParts(p *owners.Plan, c owners.Checkpoint, n, rows int) []ingestwire.PartPiece {
	var out []ingestwire.PartPiece
	for db := range factor.NumD(p.U, p.Tie) {
		var gs []int
		for g, dg := range p.Groups {
			if dg.DBlock == db && dg.Rows > 0 {
				gs = append(gs, g)
			}
		}
		sort.SliceStable(gs, func(a, b int) bool { return p.Groups[gs[a]].Lo < p.Groups[gs[b]].Lo })
		cur := ingestwire.PartPiece{Factor: "D", Block: db}
		for _, g := range gs {
			dg := p.Groups[g]
			if len(cur.Groups) > 0 && dg.Hi-cur.Lo > rows {
				cur.Hi = dg.Lo
				out = append(out, cur)
				cur = ingestwire.PartPiece{Factor: "D", Block: db, Lo: dg.Lo}
			}
			cur.Groups = append(cur.Groups, ingestwire.PieceGroup{G: g, Rows: dg.Rows, RowsCRC: dg.RowsCRC, CRC: c.DCRC[g]})
		}
		cur.Hi = n
		out = append(out, cur)
	}
	for kb, cbs := range p.Cols {
		idx := make([]int, len(cbs))
		for q := range idx {
			idx[q] = q
		}
		sort.SliceStable(idx, func(a, b int) bool { return cbs[idx[a]].Lo < cbs[idx[b]].Lo })
		cur := ingestwire.PartPiece{Factor: "K", Block: kb}
		for _, q := range idx {
			cb := cbs[q]
			if len(cur.Cols) > 0 && cb.Hi-cur.Lo > rows {
				out = append(out, cur)
				cur = ingestwire.PartPiece{Factor: "K", Block: kb, Lo: cb.Lo}
			}
			cur.Cols = append(cur.Cols, ingestwire.PieceCols{C: cb.C, Lo: cb.Lo, Hi: cb.Hi, CRC: c.KCRC[kb][q]})
			cur.Hi = cb.Hi
		}
		out = append(out, cur)
	}
	return out
}

// VocabParts writes the vocabularies of user ids an ingest built
// (res.Vocab: ranges in the Object Store as proto.VocabObject(ingestJob,
// g, r)) into the model dataset sink of shape s (its IDs naming them), a
// part per range, streaming: this coordinator holds an id at a time. It
// returns the parts and each vocabulary's checksum, taken as the ids
// pass (shard.VocabChecksum), for arrowio.CommitModelDatasetIDs.
func (e *Executor) VocabParts(ctx context.Context, ingestJob string, res *ingest.Result, sink arrowio.PartSink, s arrowio.ModelShape, format string) ([]arrowio.ModelPart, map[string][32]byte, error) {
	obs, err := e.js.ObjectStore(ctx, e.cfg.ObjectBucket)
	if err != nil {
		return nil, nil, fmt.Errorf("natsexec: vocabulary: %w", wire.StoreErr(ctx, e.js, "open", wire.KindObjects, e.cfg.ObjectBucket, "", err))
	}
	var parts []arrowio.ModelPart
	sums := map[string][32]byte{}
	for g, name := range arrowio.VocabNames {
		if !res.IDs[g] {
			continue
		}
		var sum shard.VocabChecksum
		for r, own := range res.Vocab[g] {
			if own.Count == 0 {
				continue
			}
			part, err := e.vocabPart(ctx, obs, proto.VocabObject(ingestJob, res.VocabEpoch, g, r), own, sink, s, arrowio.VocabPart(name, int(own.Offset), int(own.Offset+own.Count), "", format), &sum)
			if err != nil {
				return nil, nil, err
			}
			parts = append(parts, part)
		}
		sums[name] = sum.Sum()
	}
	return parts, sums, nil
}

// vocabPart streams one range's object into a part.
func (e *Executor) vocabPart(ctx context.Context, obs jetstream.ObjectStore, object string, own ingestwire.IDOwner, sink arrowio.PartSink, s arrowio.ModelShape, spec arrowio.PartSpec, sum *shard.VocabChecksum) (arrowio.ModelPart, error) {
	r, err := obs.Get(ctx, object)
	if err != nil {
		return arrowio.ModelPart{}, fmt.Errorf("natsexec: vocabulary: %w", wire.StoreErr(ctx, e.js, "read", wire.KindObjects, e.cfg.ObjectBucket, object, err))
	}
	defer r.Close()
	pw, err := arrowio.NewModelPartWriter(ctx, sink, s, spec)
	if err != nil {
		return arrowio.ModelPart{}, err
	}
	n := int64(0)
	err = ingestwire.ReadIDs(r, func(id []byte) error {
		if n++; n > own.Count {
			return fmt.Errorf("more than the %d ids its owner counted", own.Count)
		}
		sum.Add(id)
		return pw.AppendIDs(id)
	})
	if err == nil && n != own.Count {
		err = fmt.Errorf("%d ids, its owner counted %d", n, own.Count)
	}
	if err != nil {
		pw.Abort()
		return arrowio.ModelPart{}, fmt.Errorf("natsexec: vocabulary object %s: %w", object, err)
	}
	return pw.Close()
}

// RemoveVocab removes the vocabulary objects of an ingest (best effort).
func (e *Executor) RemoveVocab(ctx context.Context, ingestJob string, res *ingest.Result) {
	obs, err := e.js.ObjectStore(ctx, e.cfg.ObjectBucket)
	if err != nil {
		return
	}
	// Every epoch's: a failed epoch's owners may have stored theirs.
	for epoch := 1; epoch <= res.VocabEpoch; epoch++ {
		for g := range res.Vocab {
			for r := range max(res.VocabRanges, len(res.Vocab[g])) {
				name := proto.VocabObject(ingestJob, epoch, g, r)
				if err := obs.Delete(ctx, name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
					e.log.Warn("could not remove a vocabulary object", "object", name, "error", err)
				}
			}
		}
	}
}
