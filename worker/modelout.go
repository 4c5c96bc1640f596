package worker

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"hash/crc32"
	"io"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/worker/ingestwire"
	"github.com/emsf/emsf/worker/wire"
	"github.com/emsf/emsf/worker/wire/proto"
)

// The end of a fit whose coordinator holds no model: the workers write
// the parts of the model dataset from the last checkpoint, each part
// straight into the Object Store dataset the request names, and answer
// its manifest line; the coordinator only commits the manifest. A part
// is a pure function of the checkpoint (and, for the rows of D no row
// group holds, of the init), so a part lost with its worker is written
// again, to the same bytes, by another.

// partRows is how many rows a worker reads and appends at a time.
const partRows = 4096

// writeParts answers a PartsRequest.
func (w *Worker) writeParts(ctx context.Context, r *ingestwire.PartsRequest) (*ingestwire.PartsReply, error) {
	if err := wire.CheckJob(r.Job); err != nil {
		return nil, fmt.Errorf("worker: parts: %w", err)
	}
	tie, err := factor.ParseTie(r.Tie)
	if err != nil {
		return nil, fmt.Errorf("worker: parts %s: %w", r.Job, err)
	}
	if r.N < 1 || r.M < 1 || r.U < 1 || r.Version < 0 {
		return nil, fmt.Errorf("worker: parts %s: bad shape n=%d m=%d u=%d or version %d", r.Job, r.N, r.M, r.U, r.Version)
	}
	prec := factor.Float64
	if r.Precision != "" {
		if prec, err = factor.ParsePrecision(r.Precision); err != nil {
			return nil, fmt.Errorf("worker: parts %s: %w", r.Job, err)
		}
	}
	bucket, prefix, err := wire.ParseObjectURL(r.Out)
	if err != nil {
		return nil, fmt.Errorf("worker: parts %s: %w", r.Job, err)
	}
	obs, err := w.storeLocked(ctx, r.Bucket)
	if err != nil {
		return nil, err
	}
	out, err := w.storeLocked(ctx, bucket)
	if err != nil {
		return nil, err
	}
	pw := &partWriter{obs: obs, bucket: cmp.Or(r.Bucket, wire.DefaultObjectBucket), job: r.Job, version: r.Version, n: r.N, m: r.M, u: r.U, tie: tie, seed: r.Seed, prec: prec,
		sink: wire.NewObjectParts(out, bucket, prefix, w.nc.MaxPayload()), format: r.Format, buf: make([]float64, partRows*r.M)}
	rep := &ingestwire.PartsReply{}
	for _, pc := range r.Parts {
		mp, err := pw.write(ctx, &pc)
		if err != nil {
			return nil, fmt.Errorf("worker: parts %s: %s block %d rows [%d, %d): %w", r.Job, pc.Factor, pc.Block, pc.Lo, pc.Hi, err)
		}
		rep.Parts = append(rep.Parts, mp)
	}
	return rep, nil
}

// partWriter writes parts of one checkpoint.
type partWriter struct {
	obs     jetstream.ObjectStore
	bucket  string
	job     string
	version int
	n, m, u int
	tie     factor.Tie
	seed    uint64
	prec    factor.Precision
	sink    arrowio.PartSink
	format  string
	buf     []float64
	bytes   []byte
	rows    []int32
}

func (p *partWriter) write(ctx context.Context, pc *ingestwire.PartPiece) (arrowio.ModelPart, error) {
	shape := arrowio.ModelShape{N: p.n, M: p.m, U: p.u, Tie: p.tie}
	var fill func(*arrowio.ModelPartWriter) error
	switch pc.Factor {
	case "D":
		if pc.Block < 0 || pc.Block >= factor.NumD(p.u, p.tie) || len(pc.Cols) > 0 {
			return arrowio.ModelPart{}, fmt.Errorf("not a part of D")
		}
		fill = func(mw *arrowio.ModelPartWriter) error { return p.fillD(ctx, mw, pc) }
	case "K":
		if pc.Block < 0 || pc.Block >= factor.NumK(p.u, p.tie) || len(pc.Groups) > 0 {
			return arrowio.ModelPart{}, fmt.Errorf("not a part of K")
		}
		fill = func(mw *arrowio.ModelPartWriter) error { return p.fillK(ctx, mw, pc) }
	default:
		return arrowio.ModelPart{}, fmt.Errorf("factor %q", pc.Factor)
	}
	if pc.Lo < 0 || pc.Lo >= pc.Hi || pc.Hi > p.n {
		return arrowio.ModelPart{}, fmt.Errorf("rows out of [0, %d)", p.n)
	}
	mw, err := arrowio.NewModelPartWriter(ctx, p.sink, shape, arrowio.PartSpec{Factor: pc.Factor, Block: pc.Block, Lo: pc.Lo, Hi: pc.Hi, Format: p.format})
	if err != nil {
		return arrowio.ModelPart{}, err
	}
	if err := fill(mw); err != nil {
		mw.Abort()
		return arrowio.ModelPart{}, err
	}
	return mw.Close()
}

// fillD appends rows [Lo, Hi) of a D block: the rows of each row group
// from the checkpoint, the rows between them drawn again from the init.
func (p *partWriter) fillD(ctx context.Context, mw *arrowio.ModelPartWriter, pc *ingestwire.PartPiece) error {
	next := pc.Lo
	for _, g := range pc.Groups {
		rows, err := p.rowList(ctx, g)
		if err != nil {
			return err
		}
		if len(rows) == 0 || int(rows[0]) < next || int(rows[len(rows)-1]) >= pc.Hi {
			return fmt.Errorf("row group %d holds rows outside [%d, %d) or before the group before it", g.G, next, pc.Hi)
		}
		obj := proto.DObject(p.job, p.version, g.G)
		rd, done, err := p.open(ctx, obj, g.CRC)
		if err != nil {
			return err
		}
		for q := 0; q < len(rows) && err == nil; {
			if int(rows[q]) > next {
				if err = p.drawD(mw, pc.Block, next, int(rows[q])); err != nil {
					break
				}
			}
			// A run of the group's consecutive rows.
			e := q + 1
			for e < len(rows) && e-q < partRows && rows[e] == rows[e-1]+1 {
				e++
			}
			vals := p.buf[:(e-q)*p.m]
			if err = p.readFloats(rd, vals); err != nil {
				err = p.corrupt(obj, err)
			} else {
				err = mw.Append(vals)
			}
			next, q = int(rows[e-1])+1, e
		}
		if derr := done(); err == nil {
			err = derr
		}
		if err != nil {
			return fmt.Errorf("row group %d: %w", g.G, err)
		}
	}
	return p.drawD(mw, pc.Block, next, pc.Hi)
}

// fillK appends rows [Lo, Hi) of K^T block Block from its column blocks.
func (p *partWriter) fillK(ctx context.Context, mw *arrowio.ModelPartWriter, pc *ingestwire.PartPiece) error {
	next := pc.Lo
	for _, cb := range pc.Cols {
		if cb.Lo != next || cb.Hi <= cb.Lo || cb.Hi > pc.Hi {
			return fmt.Errorf("column block %d holds [%d, %d), not the next rows from %d", cb.C, cb.Lo, cb.Hi, next)
		}
		obj := proto.KObject(p.job, p.version, pc.Block, cb.C)
		rd, done, err := p.open(ctx, obj, cb.CRC)
		if err != nil {
			return err
		}
		for lo := cb.Lo; lo < cb.Hi && err == nil; lo += partRows {
			vals := p.buf[:(min(cb.Hi, lo+partRows)-lo)*p.m]
			if err = p.readFloats(rd, vals); err != nil {
				err = p.corrupt(obj, err)
			} else {
				err = mw.Append(vals)
			}
		}
		if derr := done(); err == nil {
			err = derr
		}
		if err != nil {
			return fmt.Errorf("column block %d: %w", cb.C, err)
		}
		next = cb.Hi
	}
	if next != pc.Hi {
		return fmt.Errorf("the column blocks end at row %d", next)
	}
	return nil
}

// drawD appends rows [lo, hi) of D block db of the init (rounded as the
// model's precision asks).
func (p *partWriter) drawD(mw *arrowio.ModelPartWriter, db, lo, hi int) error {
	for i := lo; i < hi; {
		e := min(hi, i+partRows)
		p.rows = p.rows[:0]
		for r := i; r < e; r++ {
			p.rows = append(p.rows, int32(r))
		}
		vals := p.buf[:len(p.rows)*p.m]
		factor.RandomDRows(p.n, p.m, p.u, p.tie, p.seed, db, p.rows, vals)
		if p.prec == factor.Float32 {
			factor.RoundRows32(vals)
		}
		if err := mw.Append(vals); err != nil {
			return err
		}
		i = e
	}
	return nil
}

// rowList reads row group g's row list, checked against its CRC.
func (p *partWriter) rowList(ctx context.Context, g ingestwire.PieceGroup) ([]int32, error) {
	name := proto.RowsObject(p.job, g.G)
	data, err := p.obs.GetBytes(ctx, name)
	if err == nil && wire.CRC(data) != g.RowsCRC {
		err = fmt.Errorf("CRC %s, the plan says %s", wire.CRC(data), g.RowsCRC)
	}
	var rows []int32
	if err == nil {
		rows, err = wire.DecodeCols(data, 0, p.n, nil)
	}
	if err == nil && len(rows) != g.Rows {
		err = fmt.Errorf("%d rows, the plan says %d", len(rows), g.Rows)
	}
	if err != nil {
		return nil, p.corrupt(name, err)
	}
	return rows, nil
}

// corrupt is the error of checkpoint object name that is missing, short
// or fails its check: the coordinator falls back to the checkpoint
// before (wire.IngestCorrupt).
func (p *partWriter) corrupt(name string, err error) error {
	return &wire.StoreError{Op: "read", Kind: "Object Store bucket", Bucket: p.bucket, Name: name, Fault: wire.StoreCorrupt, Err: err}
}

// open streams object name; done checks that it was read to its end and
// that its CRC-32C is crc.
func (p *partWriter) open(ctx context.Context, name, crc string) (io.Reader, func() error, error) {
	obj, err := p.obs.Get(ctx, name)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, err
		}
		return nil, nil, p.corrupt(name, err)
	}
	h := crc32.New(wire.Castagnoli)
	rd := bufio.NewReaderSize(io.TeeReader(obj, h), 1<<20)
	done := func() error {
		defer obj.Close()
		if n, err := io.Copy(io.Discard, rd); err != nil || n != 0 {
			return p.corrupt(name, fmt.Errorf("%d bytes more than its rows (%v)", n, err))
		}
		if got := strconv.FormatUint(uint64(h.Sum32()), 16); got != crc {
			return p.corrupt(name, fmt.Errorf("CRC %s, the checkpoint says %s", got, crc))
		}
		return nil
	}
	return rd, done, nil
}

// readFloats fills vals from r (little-endian float64).
func (p *partWriter) readFloats(r io.Reader, vals []float64) error {
	if cap(p.bytes) < 8*len(vals) {
		p.bytes = make([]byte, 8*partRows*p.m)
	}
	b := p.bytes[:8*len(vals)]
	if _, err := io.ReadFull(r, b); err != nil {
		return fmt.Errorf("short object: %w", err)
	}
	return wire.ReadFloats(vals, b)
}
