package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/shard"
	"github.com/emsf/emsf/worker/ingestwire"
	"github.com/emsf/emsf/worker/wire"
	"github.com/emsf/emsf/worker/wire/proto"
)

// A worker's side of the vocabulary phase (ingestwire's ids.go has the
// steps). Per job it keeps one epoch of the phase: a request of a newer
// epoch drops the older one's state, one of an older epoch is refused
// (*StaleError). Memory: a holder keeps its splits' distinct ids (with a
// hash index and, after idtrans, 4 bytes more each) and their rows (12
// bytes a row, 8 more with counts); an owner its range's ids and 4 bytes
// per id of each split it ranked; End drops both.

// idJob is a job's vocabulary phase on one worker.
type idJob struct {
	epoch  int
	held   map[int]*heldSplit    // by split ordinal
	ranges map[[2]int]*heldRange // by (group, range)
}

// heldSplit is what this worker keeps of a split it read in idscan: per
// group (nil: a group of integers) its distinct ids, sorted; range r of
// the group, once idcut ran, is ids [starts[r], starts[r+1]); index, once
// idtrans ran, is
// each id's dataset index. And the split's rows themselves, numbered by
// the sorted ids, with the fingerprint of their ids: passes 1 and 2 take
// them from here instead of reading (and parsing, and looking up every id
// of) the split again, which cost 5 to 10 times a read of integers.
type heldSplit struct {
	ids    [2]*shard.Vocab
	starts [2][]int
	index  [2][]int32
	rows   heldRows
}

// heldRows is a split's transitions in order: 12 bytes a row, 8 more for
// its count once a count other than 1 was seen; crc is their fingerprint
// (shard.FingerprintHash.AddIDRows: by the ids).
type heldRows struct {
	state, action, next []int32
	count               []float64
	crc                 shard.RowsCRC
}

// add appends b's rows.
func (h *heldRows) add(b *arrowio.TransitionBatch) {
	n0 := len(h.state)
	h.state = append(h.state, b.State...)
	h.action = append(h.action, b.Action...)
	h.next = append(h.next, b.Next...)
	if h.count == nil && slices.ContainsFunc(b.Count, func(c float64) bool { return c != 1 }) {
		// The first count other than 1: the rows before count 1 each.
		h.count = make([]float64, n0, cap(h.state))
		for q := range h.count {
			h.count[q] = 1
		}
	}
	if h.count != nil {
		if b.Count == nil {
			for range b.Len() {
				h.count = append(h.count, 1)
			}
		} else {
			h.count = append(h.count, b.Count...)
		}
	}
}

// heldBatch is the number of rows a held split hands on at a time.
const heldBatch = 1 << 14

// each calls fn with the rows in order, heldBatch at a time, renumbered
// by index into the dataset's indices (the held rows stay as they are);
// b's slices are fn's only during the call.
func (h *heldRows) each(index [2][]int32, fn func(b *arrowio.TransitionBatch) error) error {
	var b arrowio.TransitionBatch
	ones := make([]float64, 0, heldBatch)
	for lo := 0; lo < len(h.state); lo += heldBatch {
		hi := min(len(h.state), lo+heldBatch)
		b.State = append(b.State[:0], h.state[lo:hi]...)
		b.Action = append(b.Action[:0], h.action[lo:hi]...)
		b.Next = append(b.Next[:0], h.next[lo:hi]...)
		if h.count != nil {
			b.Count = h.count[lo:hi]
		} else {
			for len(ones) < hi-lo {
				ones = append(ones, 1)
			}
			b.Count = ones[:hi-lo]
		}
		shard.Renumber(b.State, b.Action, b.Next, index)
		if err := fn(&b); err != nil {
			return err
		}
	}
	return nil
}

// heldRange is a range of a group's vocabulary this worker owns: its ids,
// sorted, and the rank in it of each id of each split that has some
// (in the order of the split's ids).
type heldRange struct {
	vocab *shard.Vocab
	ranks map[int][]int32
}

// idJob returns the state of job's vocabulary phase of epoch; with
// create, a newer epoch replaces an older one's.
func (n *IngestNode) idJob(job string, epoch int, create bool) (*idJob, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	j := n.idJobs[job]
	switch {
	case j != nil && j.epoch > epoch:
		return nil, &StaleError{Job: job, Epoch: epoch, Have: j.epoch}
	case j != nil && j.epoch == epoch:
		return j, nil
	case !create:
		return nil, fmt.Errorf("worker: ingest %s: vocabulary epoch %d has not run here", job, epoch)
	}
	j = &idJob{epoch: epoch, held: map[int]*heldSplit{}, ranges: map[[2]int]*heldRange{}}
	n.idJobs[job] = j
	return j, nil
}

// scanIssue sorts the error of a split's read: what stops the job or
// makes the split be read whole (an issue, reported), or a failure of
// the worker (returned).
func scanIssue(ctx context.Context, err error) (ingestwire.ScanIssue, error) {
	var is ingestwire.ScanIssue
	var sre *arrowio.SplitRowError
	var ie *arrowio.InputError
	switch {
	case err == nil:
		return is, nil
	case errors.Is(err, arrowio.ErrReadWhole):
		is.ReadWhole = err.Error()
	case errors.As(err, &sre):
		is.RowError = sre.InputError
	case ctx.Err() != nil:
		return is, err
	case errors.As(err, &ie):
		is.Error = ie
	default:
		return is, err
	}
	var se *arrowio.StringIDsError
	if (is.RowError != nil || is.Error != nil) && errors.As(err, &se) {
		is.StringIDs = ingestwire.GroupNames[ingestwire.GroupStates]
		if se.Actions {
			is.StringIDs = ingestwire.GroupNames[ingestwire.GroupActions]
		}
	}
	return is, nil
}

// IDScan is step 1 for a split: it is read with fresh vocabularies, and
// its distinct ids are kept, sorted and cut at the splitters.
func (n *IngestNode) IDScan(ctx context.Context, r *ingestwire.IDScanRequest) (*ingestwire.IDScanReply, error) {
	j, err := n.idJob(r.Job, r.Epoch, true)
	if err != nil {
		return nil, err
	}
	opts := r.Groups.ReadOptions(r.Read)
	rep := &ingestwire.IDScanReply{}
	h := &heldSplit{}
	var fp shard.FingerprintHash
	err = n.scanSplit(ctx, r.File, r.Split, opts, func(b *arrowio.TransitionBatch) error {
		rep.Rows += int64(b.Len())
		fp.AddIDRows(b.State, b.Action, b.Next, b.Count, b.StateIDs, b.ActionIDs)
		h.rows.add(b)
		return nil
	})
	if rep.ScanIssue, err = scanIssue(ctx, err); err != nil || rep.Any() {
		return rep, err
	}
	h.rows.crc = fp.Sum()
	var perm [2][]int32
	for g, v := range [2]*shard.Vocab{opts.StateIDs, opts.ActionIDs} {
		if v == nil {
			continue
		}
		perm[g] = v.SortFrom(0)
		h.ids[g] = v
		if k := min(v.Len(), max(1, r.Sample)); v.Len() > 0 {
			for i := range k {
				rep.Sample[g] = append(rep.Sample[g], v.String(i*v.Len()/k))
			}
		}
	}
	// The rows, numbered as first seen, renumbered by the sorted ids.
	shard.Renumber(h.rows.state, h.rows.action, h.rows.next, perm)
	n.mu.Lock()
	j.held[r.Split.Ordinal] = h
	n.mu.Unlock()
	return rep, nil
}

// IDCut is step 2 on a holder: its splits' ids cut at the splitters.
func (n *IngestNode) IDCut(ctx context.Context, r *ingestwire.IDCutRequest) (*ingestwire.IDCutReply, error) {
	j, err := n.idJob(r.Job, r.Epoch, false)
	if err != nil {
		return nil, err
	}
	rep := &ingestwire.IDCutReply{}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, split := range r.Splits {
		h := j.held[split]
		if h == nil {
			return nil, fmt.Errorf("worker: ingest %s: the ids of split %d are not held here", r.Job, split)
		}
		for g, v := range h.ids {
			if v == nil {
				continue
			}
			h.starts[g] = cutIDs(v, r.Splitters[g])
			var counts []int64
			for k := range len(h.starts[g]) - 1 {
				counts = append(counts, int64(h.starts[g][k+1]-h.starts[g][k]))
			}
			rep.Counts[g] = append(rep.Counts[g], counts)
		}
	}
	return rep, nil
}

// cutIDs returns the starts of the ranges of sorted ids v cut at
// splitters: range r is [starts[r], starts[r+1]), the ids at or above
// splitter r-1 and below splitter r.
func cutIDs(v *shard.Vocab, splitters []string) []int {
	starts := []int{0}
	for _, s := range splitters {
		starts = append(starts, sort.Search(v.Len(), func(i int) bool { return bytes.Compare(v.ID(i), []byte(s)) >= 0 }))
	}
	return append(starts, v.Len())
}

// IDPull serves a list of the vocabulary phase to another worker.
func (n *IngestNode) IDPull(ctx context.Context, r *ingestwire.IDPullRequest) (*ingestwire.PullReply, []byte, error) {
	j, err := n.idJob(r.Job, r.Epoch, false)
	if err != nil {
		return nil, nil, err
	}
	bad := func(what string) error {
		return fmt.Errorf("worker: ingest %s: no %s of split %d, group %d, range %d here", r.Job, what, r.Split, r.Group, r.Range)
	}
	if r.Group < 0 || r.Group > 1 || r.From < 0 {
		return nil, nil, bad(r.Kind)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	var buf []byte
	var next, end int
	switch r.Kind {
	case ingestwire.KindIDs:
		h := j.held[r.Split]
		if h == nil || h.ids[r.Group] == nil || r.Range < 0 || r.Range+1 >= len(h.starts[r.Group]) {
			return nil, nil, bad("ids")
		}
		v, lo := h.ids[r.Group], h.starts[r.Group][r.Range]
		next, end = lo+r.From, h.starts[r.Group][r.Range+1]
		for ; next < end && (len(buf) == 0 || len(buf)+ingestwire.IDSize(v.ID(next)) <= r.MaxBytes); next++ {
			buf = ingestwire.AppendIDs(buf, v.ID(next))
		}
		next -= lo
		end -= lo
	case ingestwire.KindRanks:
		hr := j.ranges[[2]int{r.Group, r.Range}]
		if hr == nil || hr.ranks[r.Split] == nil {
			return nil, nil, bad("ranks")
		}
		ranks := hr.ranks[r.Split]
		next, end = r.From, len(ranks)
		k := min(end, next+max(1, r.MaxBytes/4))
		if next < end {
			buf = ingestwire.AppendRanks(buf, ranks[next:k]...)
		}
		next = max(next, k)
	default:
		return nil, nil, bad(r.Kind)
	}
	return &ingestwire.PullReply{Next: next, Done: next >= end}, buf, nil
}

// pullList pulls a whole list of the vocabulary phase from worker (this
// one too), handing each reply's data to fn.
func (n *IngestNode) pullList(ctx context.Context, worker string, r ingestwire.IDPullRequest, fn func([]byte) error) error {
	for {
		var pr *ingestwire.PullReply
		var data []byte
		var err error
		if worker == n.id {
			pr, data, err = n.IDPull(ctx, &r)
		} else if pr, data, err = n.peers.IDPull(ctx, worker, &r); err != nil {
			err = &peerError{worker, err}
		}
		if err != nil {
			return err
		}
		if err := fn(data); err != nil {
			return fmt.Errorf("worker: ingest %s: %s of split %d from %s: %w", r.Job, r.Kind, r.Split, worker, err)
		}
		if pr.Done {
			return nil
		}
		if pr.Next <= r.From {
			return fmt.Errorf("worker: ingest %s: %s of split %d from %s: no progress at %d", r.Job, r.Kind, r.Split, worker, r.From)
		}
		r.From = pr.Next
	}
}

// IDRange is step 2 for a range: its ids pulled from every holder and
// merged, then each holder's ranked in it.
func (n *IngestNode) IDRange(ctx context.Context, r *ingestwire.IDRangeRequest) (*ingestwire.IDRangeReply, error) {
	j, err := n.idJob(r.Job, r.Epoch, true)
	if err != nil {
		return nil, err
	}
	pullIDs := func(src ingestwire.IDSource, fn func(id []byte) error) error {
		got := int64(0)
		err := n.pullList(ctx, src.Worker, ingestwire.IDPullRequest{Job: r.Job, Epoch: r.Epoch, Kind: ingestwire.KindIDs,
			Group: r.Group, Split: src.Split, Range: r.Range, MaxBytes: r.PullBytes}, func(data []byte) error {
			return ingestwire.EachID(data, func(id []byte) error {
				got++
				return fn(id)
			})
		})
		if err == nil && got != src.Count {
			err = fmt.Errorf("worker: ingest %s: split %d has %d ids in range %d of %s, %s sent %d", r.Job, src.Split, src.Count, r.Range, ingestwire.GroupNames[r.Group], src.Worker, got)
		}
		return err
	}
	// Merge the holders' sorted lists: in rounds, once the parts pulled
	// hold as many ids as the vocabulary so far (linear time overall).
	vocab := &shard.Vocab{}
	var parts []*shard.Vocab
	pending := 0
	merge := func() error {
		if len(parts) == 0 {
			return nil
		}
		v, err := shard.Merge(append([]*shard.Vocab{vocab}, parts...)...)
		if err != nil {
			return fmt.Errorf("worker: ingest %s: range %d of %s: %w", r.Job, r.Range, ingestwire.GroupNames[r.Group], err)
		}
		vocab, parts, pending = v, nil, 0
		return nil
	}
	for _, src := range r.Sources {
		if src.Count == 0 {
			continue
		}
		part := &shard.Vocab{}
		err := pullIDs(src, func(id []byte) error {
			if why := shard.CheckID(id); why != "" {
				return fmt.Errorf("id %q %s", id, why)
			}
			_, err := part.Intern(id)
			return err
		})
		if err != nil {
			return nil, err
		}
		parts = append(parts, part)
		if pending += part.Len(); pending >= vocab.Len() {
			if err := merge(); err != nil {
				return nil, err
			}
		}
	}
	if err := merge(); err != nil {
		return nil, err
	}
	hr := &heldRange{vocab: vocab, ranks: map[int][]int32{}}
	for _, src := range r.Sources {
		if src.Count == 0 {
			continue
		}
		ranks := make([]int32, 0, src.Count)
		err := pullIDs(src, func(id []byte) error {
			k, ok := vocab.Index(id)
			if !ok {
				return fmt.Errorf("id %q changed between two pulls", id)
			}
			ranks = append(ranks, int32(k))
			return nil
		})
		if err != nil {
			return nil, err
		}
		hr.ranks[src.Split] = ranks
	}
	if n.hooks.VocabRange != nil {
		n.hooks.VocabRange(r.Group, r.Range, vocab)
	}
	if r.Bucket != "" {
		if err := n.storeRange(ctx, j, r, vocab); err != nil {
			return nil, err
		}
	}
	n.mu.Lock()
	j.ranges[[2]int{r.Group, r.Range}] = hr
	n.mu.Unlock()
	bytes := int64(0)
	for i := range vocab.Len() {
		bytes += int64(len(vocab.ID(i)))
	}
	return &ingestwire.IDRangeReply{Count: int64(vocab.Len()), Bytes: bytes}, nil
}

// IDTrans is step 3 on a holder: the dataset index of every id of its
// splits, from the owners' ranks and the ranges' offsets.
func (n *IngestNode) IDTrans(ctx context.Context, r *ingestwire.IDTransRequest) error {
	j, err := n.idJob(r.Job, r.Epoch, false)
	if err != nil {
		return err
	}
	for k, split := range r.Splits {
		n.mu.Lock()
		h := j.held[split]
		n.mu.Unlock()
		if h == nil {
			return fmt.Errorf("worker: ingest %s: the ids of split %d are not held here", r.Job, split)
		}
		var index [2][]int32
		for g, v := range h.ids {
			if v == nil {
				continue
			}
			owners := r.Owners[g]
			if len(owners) != len(h.starts[g])-1 || k >= len(r.Counts[g]) || len(r.Counts[g][k]) != len(owners) {
				return fmt.Errorf("worker: ingest %s: split %d: %d ranges of %s asked, %d held", r.Job, split, len(owners), ingestwire.GroupNames[g], len(h.starts[g])-1)
			}
			index[g] = make([]int32, 0, v.Len())
			for rg, own := range owners {
				want := int64(h.starts[g][rg+1] - h.starts[g][rg])
				if r.Counts[g][k][rg] != want {
					return fmt.Errorf("worker: ingest %s: split %d has %d ids in range %d of %s, the request says %d", r.Job, split, want, rg, ingestwire.GroupNames[g], r.Counts[g][k][rg])
				}
				if want == 0 {
					continue
				}
				before := len(index[g])
				err := n.pullList(ctx, own.Worker, ingestwire.IDPullRequest{Job: r.Job, Epoch: r.Epoch, Kind: ingestwire.KindRanks,
					Group: g, Split: split, Range: rg, MaxBytes: r.PullBytes}, func(data []byte) error {
					ranks, err := ingestwire.Ranks(nil, data)
					for _, x := range ranks {
						if x < 0 || int64(x) >= own.Count {
							return fmt.Errorf("rank %d outside range %d's %d ids", x, rg, own.Count)
						}
						index[g] = append(index[g], int32(own.Offset+int64(x)))
					}
					return err
				})
				if err != nil {
					return err
				}
				if int64(len(index[g])-before) != want {
					return fmt.Errorf("worker: ingest %s: split %d: %d ranks from %s for %d ids", r.Job, split, len(index[g])-before, own.Worker, want)
				}
			}
		}
		n.mu.Lock()
		h.index = index
		n.mu.Unlock()
	}
	return nil
}

// numbering is a split's rows held since idscan and the dataset index of
// each of the split's ids, for passes 1 and 2.
type numbering struct {
	index [2][]int32
	rows  *heldRows
}

// numbering returns the numbering of split for a dataset of ids (nil
// without).
func (n *IngestNode) numbering(job string, ids *ingestwire.SplitIDs, split int) (*numbering, error) {
	if ids == nil || !ids.Groups.Any() {
		return nil, nil
	}
	j, err := n.idJob(job, ids.Epoch, false)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	h := j.held[split]
	if h == nil {
		return nil, fmt.Errorf("worker: ingest %s: the ids of split %d are not held here", job, split)
	}
	nb := &numbering{rows: &h.rows}
	for g, want := range ids.Groups {
		if !want {
			continue
		}
		if h.ids[g] == nil || h.index[g] == nil {
			return nil, fmt.Errorf("worker: ingest %s: split %d has no numbering of %s", job, split, ingestwire.GroupNames[g])
		}
		nb.index[g] = h.index[g]
	}
	return nb, nil
}

// storeRange puts a range of a vocabulary into the Object Store
// (proto.VocabObject), for the model's parts at the end of a fit.
func (n *IngestNode) storeRange(ctx context.Context, j *idJob, r *ingestwire.IDRangeRequest, v *shard.Vocab) error {
	if n.js == nil {
		return fmt.Errorf("worker: ingest %s: no Object Store to keep range %d of the %s in", r.Job, r.Range, ingestwire.GroupNames[r.Group])
	}
	n.mu.Lock()
	current := n.idJobs[r.Job] == j
	n.mu.Unlock()
	if !current {
		return fmt.Errorf("worker: ingest %s: vocabulary epoch %d is over", r.Job, r.Epoch)
	}
	name := proto.VocabObject(r.Job, r.Epoch, r.Group, r.Range)
	obs, err := n.js.ObjectStore(ctx, r.Bucket)
	if err != nil {
		return fmt.Errorf("worker: ingest %s: %w", r.Job, wire.StoreErr(ctx, n.js, "open", wire.KindObjects, r.Bucket, name, err))
	}
	var data []byte
	for i := range v.Len() {
		data = ingestwire.AppendIDs(data, v.ID(i))
	}
	if _, err := wire.PutObject(ctx, obs, n.js.Conn().MaxPayload(), name, data); err != nil {
		return fmt.Errorf("worker: ingest %s: %w", r.Job, wire.StoreErr(ctx, n.js, wire.OpStore, wire.KindObjects, r.Bucket, name, err))
	}
	return nil
}
