package worker

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
	"github.com/emsf/emsf/worker/wire"
)

// Model parts (protocol 1.1). A task reads one K block (the one of its
// shard's action) and its shard's rows of one D block, not the whole
// model. The worker fetches that K block from the coordinator's raw model
// blob while it computes (factor.ComputeStreamed: the pass visits columns
// in order and waits only for rows of K not yet in place), and gets the
// shard's rows of D without fetching them when it computed the same shard
// on the previous version: the D commit is row-local, so those rows are
// factor.CommitRow of the rows it held and the statistics it computed,
// bitwise what the coordinator committed whenever no other shard touches
// them (the task's CRC-32C of the committed rows decides; else they are
// fetched). Nothing the worker keeps is trusted without that CRC.

// errNoParts says a task cannot use model parts; the worker fetches the
// whole model instead.
var errNoParts = errors.New("worker: task cannot use model parts")

// dRows is a shard's rows of D as a worker keeps them between
// iterations, and the statistics it computed on them.
type dRows struct {
	db, lo, hi, m int
	// version is the model version the rows are of (-1: unknown).
	version int
	rows    []float64 // (hi-lo)·m
	// statIter is the iteration whose statistics pRows, dh and x are
	// (computed on version statIter-1), 0 when none are kept.
	statIter int
	pRows    []int32
	dh, x    []float64
}

// bytesOf views xs as its bytes (little-endian machines only).
func bytesOf(xs []float64) []byte {
	if len(xs) == 0 {
		return []byte{}
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&xs[0])), 8*len(xs))
}

// usesParts says whether tr can run on model parts.
func usesParts(tr *wire.TaskRequest) bool {
	return wire.LittleEndian && tr.ModelBlob != "" && len(tr.KCRCs) > 0 && tr.DCRC != "" && tr.KOffset > 0
}

// partsResult is what computeParts reports.
type partsResult struct {
	fetched          int64
	model, compute   time.Duration
	derived, kCached bool
}

// computeParts computes the task's partial into w.partial on model parts:
// the shard's rows of D (derived or fetched) and the K block of its action
// (cached, or fetched while the pass runs). It returns errNoParts when
// the task or shard do not allow it. The caller holds w.mu.
func (w *Worker) computeParts(ctx context.Context, tr *wire.TaskRequest, s *shard.Shard) (partsResult, error) {
	var res partsResult
	t0 := time.Now()
	md := w.md
	if w.mdDig != tr.ModelDigest && w.kDig[tr.ModelDigest] == nil {
		// Learn the shape from the blob's header (sent with the task, or
		// fetched).
		hdr := tr.ModelHeader
		if len(hdr) != wire.RawHeaderBytes {
			var err error
			if hdr, err = wire.FetchBlobRange(ctx, w.nc, tr.ModelBlob, 0, wire.RawHeaderBytes, nil, nil); err != nil {
				return res, fmt.Errorf("worker: model %s: %w", tr.ModelObject, err)
			}
			res.fetched += int64(len(hdr))
		}
		sh, err := wire.ParseRawHeader(hdr)
		if err != nil {
			return res, err
		}
		if sh.Size() != tr.ModelSize || sh.KOffset(0) != tr.KOffset || len(tr.KCRCs) != sh.NK {
			return res, fmt.Errorf("worker: model %s: blob of %d bytes (K at %d, %d K CRCs) does not fit its header", tr.ModelObject, tr.ModelSize, tr.KOffset, len(tr.KCRCs))
		}
		if md = sh.Model(w.md); md != w.md {
			w.md, w.mdDig = md, ""
			clear(w.kDig)
		}
	}
	n, m := md.N, md.M
	b := s.Block
	db, kb := md.DBlock(b.Action), md.KBlock(b.Action)
	lo, hi := tr.DRowLo, tr.DRowHi
	if b.Action < 0 || b.Action >= md.U || lo < 0 || lo > hi || hi > n ||
		(len(b.Rows) > 0 && (int(b.Rows[0]) < lo || int(b.Rows[len(b.Rows)-1]) >= hi)) {
		return res, errNoParts
	}
	// The whole model cached is as good.
	if w.mdDig != tr.ModelDigest {
		w.mdDig = ""
		nb, derived, err := w.shardRows(ctx, tr, md, db, lo, hi)
		res.fetched += nb
		res.derived = derived
		if err != nil {
			return res, err
		}
	}
	res.model = time.Since(t0)

	// K block kb: cached for this version, or fetched while computing.
	var avail func(int) (int, error)
	var wait func() error
	if held := w.kDig[tr.ModelDigest]; w.mdDig != tr.ModelDigest && (kb >= len(held) || !held[kb]) {
		// Older versions' K blocks are overwritten from here on.
		for d := range w.kDig {
			if d != tr.ModelDigest {
				delete(w.kDig, d)
			}
		}
		if w.kDig[tr.ModelDigest] == nil {
			w.kDig[tr.ModelDigest] = make([]bool, len(md.KT))
		}
		avail, wait = w.streamK(ctx, tr, md.KT[kb], kb, m, &res.fetched)
	} else {
		res.kCached = true
	}
	t1 := time.Now()
	err := factor.ComputeStreamed(md, b, &w.scratch, &w.partial, tr.WithLogLik, avail)
	res.compute = time.Since(t1)
	if wait != nil {
		if ferr := wait(); ferr != nil {
			return res, ferr
		}
		w.kDig[tr.ModelDigest][kb] = true
	}
	if err != nil {
		return res, fmt.Errorf("worker: shard %d: %w", tr.Shard, err)
	}
	// Keep the statistics of the shard's rows for the next version.
	if st := w.drows[dKey(tr)]; st != nil && st.version == tr.Iteration-1 && md.Tie != factor.TieSharedD {
		p := &w.partial
		st.statIter = tr.Iteration
		st.pRows = append(st.pRows[:0], p.Rows...)
		st.dh = append(st.dh[:0], p.Dh...)
		st.x = append(st.x[:0], p.X...)
	}
	w.count(func(st *Stats) {
		if !res.kCached {
			st.ModelFetches++
		}
		if res.derived {
			st.DerivedRows++
		}
		st.BytesFetched += res.fetched
	})
	return res, nil
}

func dKey(tr *wire.TaskRequest) string { return tr.Job + "/" + strconv.Itoa(tr.Shard) }

// shardRows puts the task's shard's rows [lo, hi) of D block db of model
// version tr.Iteration-1 into md: derived from the rows and statistics
// kept from the previous version when their CRC matches the task's, else
// fetched. It returns the bytes fetched and whether the rows were derived.
func (w *Worker) shardRows(ctx context.Context, tr *wire.TaskRequest, md *factor.Model, db, lo, hi int) (int64, bool, error) {
	m, v := md.M, tr.Iteration-1
	key := dKey(tr)
	st := w.drows[key]
	if st == nil || st.db != db || st.lo != lo || st.hi != hi || st.m != m {
		if len(w.drows) >= max(2*w.cfg.MaxCachedShards, 64) {
			clear(w.drows)
		}
		st = &dRows{db: db, lo: lo, hi: hi, m: m, version: -1, rows: make([]float64, (hi-lo)*m)}
		w.drows[key] = st
	}
	derived := false
	prec, err := factor.ParsePrecision(tr.Precision)
	if err != nil {
		return 0, false, fmt.Errorf("worker: task of shard %d: %w", tr.Shard, err)
	}
	if st.version == v-1 && st.statIter == v && md.Tie != factor.TieSharedD {
		alpha := tr.Alpha
		if alpha == 0 {
			alpha = 1
		}
		for r, i := range st.pRows {
			at := (int(i) - lo) * m
			row := st.rows[at : at+m]
			factor.CommitRow(row, st.dh[r*m:r*m+m], st.x[r], alpha)
			if prec == factor.Float32 {
				factor.RoundRows32(row)
			}
		}
		st.version, st.statIter, derived = v, 0, true
	}
	var fetched int64
	if st.version != v || wire.CRC(bytesOf(st.rows)) != tr.DCRC {
		st.version, st.statIter, derived = -1, 0, false
		at := wire.RawHeaderBytes + (db*md.N*m+lo*m)*8
		if _, err := wire.FetchBlobRange(ctx, w.nc, tr.ModelBlob, at, len(st.rows)*8, bytesOf(st.rows), nil); err != nil {
			return 0, false, fmt.Errorf("worker: model %s: rows of shard %d: %w", tr.ModelObject, tr.Shard, err)
		}
		fetched = int64(len(st.rows) * 8)
		if crc := wire.CRC(bytesOf(st.rows)); crc != tr.DCRC {
			return fetched, false, fmt.Errorf("worker: model %s: rows of shard %d have CRC %s, task says %s", tr.ModelObject, tr.Shard, crc, tr.DCRC)
		}
		st.version = v
	}
	copy(md.D[db][lo*m:hi*m], st.rows)
	return fetched, derived, nil
}

// streamK starts fetching K block kb of the task's model into kt and
// returns the avail function of factor.ComputeStreamed and a wait
// function that returns once the fetch has ended, with its error or a CRC
// mismatch. *fetched counts the bytes once wait returns.
func (w *Worker) streamK(ctx context.Context, tr *wire.TaskRequest, kt []float64, kb, m int, fetched *int64) (func(int) (int, error), func() error) {
	ctx, cancel := context.WithCancel(ctx)
	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	have, crc := 0, uint32(0)
	var ferr error
	buf := bytesOf(kt)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, err := wire.FetchBlobRange(ctx, w.nc, tr.ModelBlob, tr.KOffset+kb*len(buf), len(buf), buf, func(nb int) {
			crc = crc32.Update(crc, wire.Castagnoli, buf[have:nb])
			mu.Lock()
			have = nb
			mu.Unlock()
			cond.Broadcast()
		})
		mu.Lock()
		ferr = err
		if err == nil && strconv.FormatUint(uint64(crc), 16) != tr.KCRCs[kb] {
			ferr = fmt.Errorf("worker: model %s: K block %d has CRC %x, task says %s", tr.ModelObject, kb, crc, tr.KCRCs[kb])
		}
		if ferr == nil && have != len(buf) {
			ferr = fmt.Errorf("worker: model %s: K block %d: %d of %d bytes", tr.ModelObject, kb, have, len(buf))
		}
		mu.Unlock()
		cond.Broadcast()
	}()
	rowBytes := m * 8
	avail := func(j int) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		// The fetcher sets ferr when it ends short of the whole block.
		for have < (j+1)*rowBytes && ferr == nil {
			cond.Wait()
		}
		if ferr != nil {
			return have / rowBytes, ferr
		}
		return have / rowBytes, nil
	}
	wait := func() error {
		// Stop a fetch the pass no longer needs only on error: a complete
		// block is cached for the next task of this version.
		<-done
		cancel()
		mu.Lock()
		defer mu.Unlock()
		if ferr == nil {
			*fetched += int64(len(buf))
		}
		return ferr
	}
	return avail, wait
}
