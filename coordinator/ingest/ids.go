package ingest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/worker/ingestwire"
)

// The vocabulary phase of a dataset whose states or actions are named by
// user ids (ingestwire's ids.go has the steps and the messages).
//
// What a local fit does: it reads the file with vocabularies that grow as
// ids come, sorts each at the end and renumbers the counts, so that the
// indices are the ranks of the ids in the sorted set of the data's ids
// (shard.Vocab: a function of the set only). Here that set is sorted in
// ranges, as a sort of a distributed dataset is: each split is read once
// and its distinct ids kept, sorted, where it was read (step 1, which
// also samples them); the ranges are cut at quantiles of the samples and
// each split's ids at the same points (step 2), and the owner of a range
// merges the ids every split has in it (step 3). A range's ids all sort after
// the ranges' before it, so an id's index is its rank in its range plus
// the number of ids of the ranges before (the offset); each split's
// holder learns the index of each of its ids from the owners (step 4).
// Passes 1 and 2 then take each split's rows from its holder, renumbered,
// so that every count, shard and histogram is the one of the local
// fit's indices; the fingerprint hashes the ids themselves
// (shard.FingerprintHash.AddIDRows), as the local fit's does. The
// splitters, the splits and the workers decide where work is done, never
// an index.
//
// The coordinator holds the splitters (a few hundred ids per group), the
// count of ids of each split in each range, and the holders and owners:
// never the vocabulary. Failures: a worker lost in the phase, or a
// holder lost later, makes the phase run again, in a new epoch, over the
// workers left (the vocabulary is the same; every worker drops an older
// epoch's lists when a newer one starts).

// Sizes of the sample: each split gives at most samplePerSplit ids per
// group (evenly spaced in its sorted ids); the coordinator keeps at most
// maxSamples per group (evenly spaced).
const (
	samplePerSplit = 64
	maxSamples     = 1 << 14
)

// vocab is the outcome of the vocabulary phase.
type vocab struct {
	epoch  int
	groups ingestwire.IDGroups
	// holders[k] holds the ids of split k (by ordinal).
	holders map[int]string
	// owners[g] are group g's ranges in order.
	owners [2][]ingestwire.IDOwner
}

func (v *vocab) holderOf(ordinal int) string { return v.holders[ordinal] }

func (v *vocab) splitIDs() *ingestwire.SplitIDs {
	return &ingestwire.SplitIDs{Groups: v.groups, Epoch: v.epoch}
}

// size returns the number of ids of group g.
func (v *vocab) size(g int) int {
	n := int64(0)
	for _, o := range v.owners[g] {
		n += o.Count
	}
	return int(n)
}

// errVocabRetry marks a failure of the phase that another epoch, over
// the workers left, may not meet.
var errVocabRetry = errors.New("ingest: the vocabulary phase failed")

// buildVocab runs the vocabulary phase of epoch over the workers alive.
// It returns the vocabulary, or the resolution of step 1 when a split's
// read stopped (a data error, a file to read whole, another group of
// ids), or an error (errVocabRetry: try again).
func buildVocab(ctx context.Context, c Cluster, o *Options, log hclog.Logger, epoch int, files []arrowio.DataFile, splits []arrowio.Split, groups ingestwire.IDGroups) (*vocab, *resolution, error) {
	retry := func(step string, err error) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w: %s: %w", errVocabRetry, step, err)
	}
	t0 := time.Now()
	var took [4]time.Duration
	lap := func(k int) {
		took[k] = time.Since(t0)
		t0 = time.Now()
	}
	// Step 1: every split's ids, held where it was read, and a sample.
	scans, holders, err := leaseSplits(ctx, c, splits, nil, func(ctx context.Context, w string, sp arrowio.Split) (*ingestwire.IDScanReply, error) {
		rep, err := c.IDScan(ctx, w, &ingestwire.IDScanRequest{Job: o.Job, Epoch: epoch, File: files[sp.File], Split: sp, Read: o.Read,
			Groups: groups, Sample: samplePerSplit})
		if err != nil && !isLost(err) {
			err = fmt.Errorf("ingest: split %d of %s: %w", sp.Ordinal, files[sp.File].Name, err)
		}
		return rep, err
	})
	if err != nil {
		if isLost(err) {
			return nil, nil, retry("scan", err)
		}
		return nil, nil, err
	}
	if res, ok := firstIssue(files, splits, func(k int) (*ingestwire.ScanIssue, int64) { return &scans[k].ScanIssue, scans[k].Rows }); ok {
		return nil, &res, nil
	}
	lap(0)
	// Step 2: the splitters, and each split's ids per range.
	workers, err := c.Workers(ctx)
	if err != nil {
		return nil, nil, err
	}
	if len(workers) == 0 {
		return nil, nil, errors.New("ingest: no workers")
	}
	var splitters [2][]string
	for g, want := range groups {
		if want {
			var all []string
			for _, sp := range splits {
				all = append(all, scans[sp.Ordinal].Sample[g]...)
			}
			splitters[g] = chooseSplitters(all, len(workers))
		}
	}
	bySplit := map[string][]int{}
	for _, sp := range splits {
		bySplit[holders[sp.Ordinal]] = append(bySplit[holders[sp.Ordinal]], sp.Ordinal)
	}
	hs := slices.Sorted(maps.Keys(bySplit))
	counts := map[int]*[2][]int64{} // by split
	var mu sync.Mutex
	err = each(ctx, hs, func(ctx context.Context, w string) error {
		rep, err := c.IDCut(ctx, w, &ingestwire.IDCutRequest{Job: o.Job, Epoch: epoch, Splits: bySplit[w], Splitters: splitters})
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for k, split := range bySplit[w] {
			cs := &[2][]int64{}
			for g, want := range groups {
				if !want {
					continue
				}
				if k >= len(rep.Counts[g]) || len(rep.Counts[g][k]) != len(splitters[g])+1 {
					return fmt.Errorf("ingest: split %d: worker %s cut its %s into other ranges than %d", split, w, ingestwire.GroupNames[g], len(splitters[g])+1)
				}
				cs[g] = rep.Counts[g][k]
			}
			counts[split] = cs
		}
		return nil
	})
	if err != nil {
		return nil, nil, retry("cut", err)
	}
	lap(1)
	// Step 3: each range merged by its owner (range r of every group on
	// worker r mod P).
	v := &vocab{epoch: epoch, groups: groups, holders: holders}
	var wg sync.WaitGroup
	var errs []error
	// The first failure ends the step: an owner pulling from a worker
	// that is gone would wait out its request.
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for g, want := range groups {
		if !want {
			continue
		}
		v.owners[g] = make([]ingestwire.IDOwner, len(splitters[g])+1)
		for r := range v.owners[g] {
			w := workers[r%len(workers)]
			req := &ingestwire.IDRangeRequest{Job: o.Job, Epoch: epoch, Group: g, Range: r, PullBytes: o.PullBytes, Bucket: o.vocabBucket()}
			for _, sp := range splits {
				if n := counts[sp.Ordinal][g][r]; n > 0 {
					req.Sources = append(req.Sources, ingestwire.IDSource{Split: sp.Ordinal, Worker: holders[sp.Ordinal], Count: n})
				}
			}
			wg.Go(func() {
				rep, err := c.IDRange(sctx, w, req)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					cancel()
					errs = append(errs, fmt.Errorf("range %d of %s on %s: %w", r, ingestwire.GroupNames[g], w, err))
					return
				}
				v.owners[g][r] = ingestwire.IDOwner{Worker: w, Count: rep.Count}
			})
		}
	}
	wg.Wait()
	if err := firstError(errs); err != nil {
		return nil, nil, retry("merge", err)
	}
	for g := range v.owners {
		off := int64(0)
		for r := range v.owners[g] {
			v.owners[g][r].Offset = off
			off += v.owners[g][r].Count
		}
		if off > int64(maxIndex) {
			return nil, nil, fmt.Errorf("ingest: %s: %d distinct ids of %s: at most %d", o.Input, off, ingestwire.GroupNames[g], maxIndex)
		}
	}
	lap(2)
	// Step 4: each holder numbers its splits' ids.
	err = each(ctx, hs, func(ctx context.Context, w string) error {
		req := &ingestwire.IDTransRequest{Job: o.Job, Epoch: epoch, Splits: bySplit[w], Owners: v.owners, PullBytes: o.PullBytes}
		for g, want := range groups {
			if want {
				for _, k := range req.Splits {
					req.Counts[g] = append(req.Counts[g], counts[k][g])
				}
			}
		}
		return c.IDTrans(ctx, w, req)
	})
	if err != nil {
		return nil, nil, retry("number", err)
	}
	lap(3)
	log.Info("vocabulary", "epoch", epoch, "states", v.size(0), "actions", v.size(1), "state_ranges", len(v.owners[0]), "action_ranges", len(v.owners[1]),
		"scan", took[0].Round(time.Millisecond), "cut", took[1].Round(time.Millisecond), "merge", took[2].Round(time.Millisecond), "number", took[3].Round(time.Millisecond))
	return v, nil, nil
}

// maxIndex bounds a vocabulary (indices are int32).
const maxIndex = 1<<31 - 2

// chooseSplitters returns at most ranges−1 distinct ids cutting the
// sorted sample into ranges of about equal size.
func chooseSplitters(sample []string, ranges int) []string {
	slices.Sort(sample)
	sample = slices.Compact(sample)
	if len(sample) > maxSamples {
		thin := make([]string, maxSamples)
		for k := range thin {
			thin[k] = sample[k*len(sample)/maxSamples]
		}
		sample = thin
	}
	var out []string
	for r := 1; r < ranges && len(sample) > 0; r++ {
		s := sample[r*len(sample)/ranges]
		if len(out) == 0 || cmp.Compare(out[len(out)-1], s) < 0 {
			out = append(out, s)
		}
	}
	return out
}

// idPhase is Run's state of the vocabulary phase: the groups of ids
// known so far, the vocabulary (nil: to build) and the last epoch.
type idPhase struct {
	groups ingestwire.IDGroups
	v      *vocab
	epoch  int
	ranges int // the most ranges of a group in any epoch
}

// build builds the vocabulary when the dataset has ids and none is
// built, trying again in a new epoch (up to o.MaxEpochs) after a
// failure that another epoch may not meet. A non-nil resolution is the
// outcome of a split's read that stopped.
func (p *idPhase) build(ctx context.Context, c Cluster, o *Options, log hclog.Logger, files []arrowio.DataFile, splits []arrowio.Split) (*resolution, error) {
	if !p.groups.Any() || p.v != nil {
		return nil, nil
	}
	var last error
	for range o.MaxEpochs {
		p.epoch++
		if workers, err := c.Workers(ctx); err == nil {
			p.ranges = max(p.ranges, len(workers))
		}
		v, res, err := buildVocab(ctx, c, o, log, p.epoch, files, splits, p.groups)
		switch {
		case errors.Is(err, errVocabRetry):
			log.Warn("vocabulary phase failed: again with the workers left", "epoch", p.epoch, "error", err)
			last = err
			continue
		case err != nil:
			return nil, err
		}
		p.v = v
		return res, nil
	}
	return nil, fmt.Errorf("ingest: %d vocabulary epochs failed, the last: %w", o.MaxEpochs, last)
}

// checkIDs refuses a number of states or actions given for a group of
// ids, as a local fit does: the number is the vocabulary's.
func (o *Options) checkIDs(groups ingestwire.IDGroups) error {
	switch {
	case groups[ingestwire.GroupStates] && o.Read.States > 0:
		return fmt.Errorf("ingest: %d states given: the states are named by ids, so n is the number of distinct ids", o.Read.States)
	case groups[ingestwire.GroupActions] && o.Read.Actions > 0:
		return fmt.Errorf("ingest: %d actions given: the actions are named by ids, so u is the number of distinct ids", o.Read.Actions)
	}
	return nil
}

// vocabBucket is the bucket the owners store their ranges in ("": none).
func (o *Options) vocabBucket() string {
	if o.Store {
		return o.Bucket
	}
	return ""
}
