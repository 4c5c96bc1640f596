package worker

import (
	"context"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
	"github.com/emsf/emsf/worker/ingestwire"
	"github.com/emsf/emsf/worker/wire"
	"github.com/emsf/emsf/worker/wire/proto"
)

// The start of a fit whose coordinator holds no shard and no model
// (natsexec.FitIngested): the workers cut the row groups of D from the
// shards they hold (or read from the Object Store) and store their row
// lists, and draw the pieces of the random initial model they are given,
// storing them as checkpoint 0. Both are pure functions of the data, the
// seed and the shape: any worker computes the same bytes, so a lost
// worker's share is simply asked of another.

// cutGroups answers a GroupsRequest.
func (w *Worker) cutGroups(ctx context.Context, r *ingestwire.GroupsRequest) (*ingestwire.GroupsReply, error) {
	if err := wire.CheckJob(r.Job); err != nil {
		return nil, fmt.Errorf("worker: groups: %w", err)
	}
	obs, err := w.storeLocked(ctx, r.Bucket)
	if err != nil {
		return nil, err
	}
	rep := &ingestwire.GroupsReply{Groups: make([][]shard.DGroup, len(r.Ranges))}
	for x, rr := range r.Ranges {
		if len(rr.Cells) == 0 || len(rr.Cells) != len(rr.Checksums) || rr.Q < 1 || rr.G0 < 0 {
			return nil, fmt.Errorf("worker: groups %s: bad row range %d: %+v", r.Job, x, rr)
		}
		var rows []int32
		for q, sum := range rr.Checksums {
			rs, err := w.rowsOfShard(ctx, obs, rr.Cells[q], sum)
			if err != nil {
				return nil, err
			}
			rows = append(rows, rs...)
		}
		if len(rr.Cells) > 1 {
			slices.Sort(rows)
			rows = slices.Compact(rows)
		}
		gs, lists := shard.CutRange(rr.DBlock, rr.Cells, rows, rr.Q)
		for i := range gs {
			data := wire.EncodeCols(lists[i], nil)
			if err := w.putObject(ctx, obs, r.Bucket, proto.RowsObject(r.Job, rr.G0+i), data); err != nil {
				return nil, fmt.Errorf("worker: groups %s: %w", r.Job, err)
			}
			gs[i].RowsCRC = wire.CRC(data)
		}
		rep.Groups[x] = gs
	}
	return rep, nil
}

// rowsOfShard returns the rows of the shard of that checksum (index k),
// from the cache or read from the Object Store (and not kept).
func (w *Worker) rowsOfShard(ctx context.Context, obs jetstream.ObjectStore, k int, checksum string) ([]int32, error) {
	w.mu.Lock()
	s, ok := w.shards[checksum]
	w.mu.Unlock()
	if ok {
		return s.Block.Rows, nil
	}
	name := proto.ShardObject(checksum)
	data, err := obs.GetBytes(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("worker: fetch shard %d (%s): %w", k, name, err)
	}
	if s, err = arrowio.DecodeShard(data); err == nil {
		err = s.Verify()
	}
	if err == nil && s.Checksum != checksum {
		err = fmt.Errorf("checksum %s, want %s", s.Checksum, checksum)
	}
	if err != nil {
		return nil, fmt.Errorf("worker: shard %d (%s): %w", k, name, err)
	}
	w.count(func(st *Stats) { st.ShardFetches++; st.BytesFetched += int64(len(data)) })
	return s.Block.Rows, nil
}

// initModel answers an InitRequest.
func (w *Worker) initModel(ctx context.Context, r *ingestwire.InitRequest) (*ingestwire.InitReply, error) {
	if err := wire.CheckJob(r.Job); err != nil {
		return nil, fmt.Errorf("worker: init: %w", err)
	}
	tie, err := factor.ParseTie(r.Tie)
	if err != nil {
		return nil, fmt.Errorf("worker: init %s: %w", r.Job, err)
	}
	n, m, u := r.N, r.M, r.U
	if n < 1 || m < 1 || u < 1 || len(r.Sums) != factor.NumK(u, tie) {
		return nil, fmt.Errorf("worker: init %s: bad shape n=%d m=%d u=%d with %d K sums", r.Job, n, m, u, len(r.Sums))
	}
	prec := factor.Float64
	if r.Precision != "" {
		if prec, err = factor.ParsePrecision(r.Precision); err != nil {
			return nil, fmt.Errorf("worker: init %s: %w", r.Job, err)
		}
	}
	obs, err := w.storeLocked(ctx, r.Bucket)
	if err != nil {
		return nil, err
	}
	put := func(name string, vals []float64) (string, error) {
		if prec == factor.Float32 {
			factor.RoundRows32(vals)
		}
		data := wire.FloatBytes(vals)
		if err := w.putObject(ctx, obs, r.Bucket, name, data); err != nil {
			return "", fmt.Errorf("worker: init %s: %w", r.Job, err)
		}
		return wire.CRC(data), nil
	}
	rep := &ingestwire.InitReply{}
	for _, g := range r.Groups {
		if g.DBlock < 0 || g.DBlock >= factor.NumD(u, tie) {
			return nil, fmt.Errorf("worker: init %s: row group %d of D block %d", r.Job, g.G, g.DBlock)
		}
		name := proto.RowsObject(r.Job, g.G)
		data, err := obs.GetBytes(ctx, name)
		if err == nil && wire.CRC(data) != g.RowsCRC {
			err = fmt.Errorf("CRC %s, the request says %s", wire.CRC(data), g.RowsCRC)
		}
		var rows []int32
		if err == nil {
			rows, err = wire.DecodeCols(data, 0, n, nil)
		}
		if err != nil {
			return nil, fmt.Errorf("worker: init %s: read %s: %w", r.Job, name, err)
		}
		vals := make([]float64, len(rows)*m)
		factor.RandomDRows(n, m, u, tie, r.Seed, g.DBlock, rows, vals)
		crc, err := put(proto.DObject(r.Job, 0, g.G), vals)
		if err != nil {
			return nil, err
		}
		rep.DCRC = append(rep.DCRC, crc)
	}
	for _, b := range r.Blocks {
		if b.KBlock < 0 || b.KBlock >= len(r.Sums) || len(r.Sums[b.KBlock]) != m || b.Lo < 0 || b.Hi > n || b.Lo > b.Hi {
			return nil, fmt.Errorf("worker: init %s: bad column block %+v", r.Job, b)
		}
		vals := make([]float64, (b.Hi-b.Lo)*m)
		factor.RandomKRows(n, m, u, tie, r.Seed, b.KBlock, b.Lo, b.Hi, r.Sums[b.KBlock], vals)
		crc, err := put(proto.KObject(r.Job, 0, b.KBlock, b.C), vals)
		if err != nil {
			return nil, err
		}
		rep.KCRC = append(rep.KCRC, crc)
	}
	return rep, nil
}
