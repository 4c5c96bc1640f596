package owners

import (
	"fmt"
	"math"

	"github.com/emsf/emsf/worker/wire/proto"
)

// checkTask checks worker id's answer to task r: label (with r's nonce),
// dimensions, values and Σx against the shard's line. A bad answer counts
// against the worker.
func (s *seq) checkTask(r *proto.Request, id string, rep *proto.Reply) error {
	iter, k, withLL := r.Iteration, r.Shard, r.WithLogLik
	in := s.plan.Shards[k]
	want := proto.Label{Job: s.plan.Job, Iteration: iter, Shard: k, ShardChecksum: in.Checksum, ModelDigest: proto.Digest(s.epoch), Nonce: r.Nonce}
	got, err := proto.ParseLabel(rep.Label)
	if err == nil {
		err = got.Check(want)
	}
	switch {
	case err != nil:
	case len(rep.Y) != s.plan.M:
		err = fmt.Errorf("Y has %d values, want %d", len(rep.Y), s.plan.M)
	case rep.NNZ != in.NNZ:
		err = fmt.Errorf("%d nonzeros, the shard has %d", rep.NNZ, in.NNZ)
	case math.Abs(rep.SumX-in.Sum) > 1e-12*math.Abs(in.Sum) || math.IsNaN(rep.SumX):
		err = fmt.Errorf("Σx = %v, the shard's Σcount is %v", rep.SumX, in.Sum)
	case rep.HasLogLik != withLL || math.IsInf(rep.LogLik, 0) || math.IsNaN(rep.LogLik):
		err = fmt.Errorf("loglik %v (computed %v, asked %v)", rep.LogLik, rep.HasLogLik, withLL)
	}
	for l, v := range rep.Y {
		if err == nil && (!(v >= 0) || math.IsInf(v, 0)) {
			err = fmt.Errorf("Y[%d] = %v", l, v)
		}
	}
	if err != nil {
		s.cl.Strike(id, err)
		return &WorkerError{Worker: id, Err: fmt.Errorf("owners: shard %d: %w", k, err)}
	}
	return nil
}

// checkCommit checks worker id's answer to a commit: a digest, and in a
// checkpoint (save) the CRCs of exactly the blocks and groups it owns.
func (s *seq) checkCommit(id string, rep *proto.Reply, save bool, blocks, groups int) error {
	if rep.Digest == "" || (save && (len(rep.Blocks) != blocks || len(rep.Groups) != groups)) {
		return &WorkerError{Worker: id, Err: fmt.Errorf("owners: committed %d blocks and %d row groups (digest %q), it owns %d and %d",
			len(rep.Blocks), len(rep.Groups), rep.Digest, blocks, groups)}
	}
	return s.ownedBy(id, rep)
}

// checkSave checks worker id's answer to a save.
func (s *seq) checkSave(id string, rep *proto.Reply, blocks, groups int) error {
	if len(rep.Blocks) != blocks || len(rep.Groups) != groups {
		return &WorkerError{Worker: id, Err: fmt.Errorf("owners: saved %d blocks and %d row groups, asked %d and %d", len(rep.Blocks), len(rep.Groups), blocks, groups)}
	}
	return s.ownedBy(id, rep)
}

// ownedBy checks that the blocks and groups a reply of worker id names
// are its own, each once, with a CRC.
func (s *seq) ownedBy(id string, rep *proto.Reply) error {
	seen := map[[2]int]bool{}
	for _, b := range rep.Blocks {
		if b.KBlock < 0 || b.KBlock >= len(s.cols) || b.C < 0 || b.C >= len(s.cols[b.KBlock]) || s.cols[b.KBlock][b.C].Owner != id || seen[[2]int{b.KBlock, b.C}] || b.CRC == "" {
			return &WorkerError{Worker: id, Err: fmt.Errorf("owners: answered for column block %d/%d, which it does not own (or twice, or without a CRC)", b.KBlock, b.C)}
		}
		seen[[2]int{b.KBlock, b.C}] = true
	}
	for _, g := range rep.Groups {
		if g.G < 0 || g.G >= len(s.gowner) || s.gowner[g.G] != id || seen[[2]int{-1, g.G}] || g.CRC == "" {
			return &WorkerError{Worker: id, Err: fmt.Errorf("owners: answered for row group %d, which it does not own (or twice, or without a CRC)", g.G)}
		}
		seen[[2]int{-1, g.G}] = true
	}
	return nil
}
