package natsexec

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/coordinator/owners"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
	"github.com/emsf/emsf/worker/wire"
	"github.com/emsf/emsf/worker/wire/proto"
)

// Load uploads the shards of a job that the Object Store lacks, and
// again those whose object there is not the shard's bytes (same name,
// another digest: overwritten or damaged), so that a corrupt shard object
// does not fail every later fit of the data.
func (e *Executor) Load(ctx context.Context, job string, shards []*shard.Shard) (int64, error) {
	refs := make([]objRef, len(shards))
	var moved int64
	for k, s := range shards {
		name := proto.ShardObject(s.Checksum)
		refs[k] = objRef{name: name, digest: s.Checksum, action: s.Action, rowLo: s.RowLo, rowHi: s.RowHi}
		data, err := arrowio.EncodeShard(s)
		if err != nil {
			return moved, fmt.Errorf("natsexec: encode shard %d: %w", k, err)
		}
		info, err := e.obs.GetInfo(ctx, name)
		switch {
		case err == nil && wire.SameObject(info, data):
			continue
		case err == nil:
			e.log.Warn("a shard object is not the shard's bytes; storing it again", "object", name, "bucket", e.cfg.ObjectBucket,
				"size", info.Size, "want_size", len(data))
		case !errors.Is(err, jetstream.ErrObjectNotFound):
			return moved, fmt.Errorf("natsexec: shard %d: %w", k, e.storeErr(ctx, "read the info of", wire.KindObjects, name, err))
		}
		if err := e.putBytes(ctx, name, data); err != nil {
			return moved, fmt.Errorf("natsexec: upload shard %d: %w", k, err)
		}
		moved += int64(len(data))
	}
	e.mu.Lock()
	e.shards[job] = refs
	e.mu.Unlock()
	e.log.Debug("shards uploaded", "job", job, "shards", len(shards), "bytes", moved)
	return moved, nil
}

// putShard stores shard sh as object name (again).
func (e *Executor) putShard(ctx context.Context, name string, sh *shard.Shard) error {
	data, err := arrowio.EncodeShard(sh)
	if err != nil {
		return fmt.Errorf("natsexec: encode shard %s: %w", name, err)
	}
	return e.putBytes(ctx, name, data)
}

// putBytes stores data as object name of the Object Store bucket.
func (e *Executor) putBytes(ctx context.Context, name string, data []byte) error {
	if _, err := wire.PutObject(ctx, e.obs, e.nc.MaxPayload(), name, data); err != nil {
		return e.storeErr(ctx, wire.OpStore, wire.KindObjects, name, err)
	}
	return nil
}

// storeErr is wire.StoreErr on the executor's buckets (kind
// wire.KindObjects or wire.KindKV): it names the store and the object or
// key, and what to do when the store is full. A permanent fault is
// owners.Fatal: it ends an owners fit at once instead of rolling back; a
// stalled write is owners.Stalled (the fit ends at the second in a row).
func (e *Executor) storeErr(ctx context.Context, op, kind, name string, err error) error {
	bucket := e.cfg.ObjectBucket
	if kind == wire.KindKV {
		bucket = e.cfg.KVBucket
	}
	err = wire.StoreErr(ctx, e.js, op, kind, bucket, name, err)
	switch f := wire.ClassifyStore(err); {
	case f.Permanent():
		return owners.Fatal(err)
	case f == wire.StoreStalled:
		return owners.Stalled(err)
	}
	return err
}

// Publish stores md as the model version iteration-1 of the job, unless
// Commit stored that version already.
func (e *Executor) Publish(ctx context.Context, job string, iteration int, md *factor.Model) (int64, error) {
	v := iteration - 1
	e.mu.Lock()
	ref, ok := e.models[job]
	e.mu.Unlock()
	if ok && ref.version == v {
		return 0, nil
	}
	return e.storeModel(ctx, job, v, md, nil)
}

func (e *Executor) storeModel(ctx context.Context, job string, v int, md *factor.Model, params map[string]string) (int64, error) {
	snap := e.serveModel(job, v, md)
	_, _, n, err := e.persistModel(ctx, job, v, snap, params)
	return n, err
}

// serveModel serves model version v of a job from memory to the workers
// (a raw model blob) and makes it the version tasks run on. It returns a
// snapshot of md that stays valid while the blob is held.
func (e *Executor) serveModel(job string, v int, md *factor.Model) *factor.Model {
	data, snap := wire.EncodeRawModel(md)
	if snap == nil {
		snap = md.Clone()
	}
	ref := objRef{name: wire.ModelObject(job, v), digest: wire.RawDigest(data, rand.Text()[:12]), version: v, size: int64(len(data)),
		precision: md.Precision}
	e.mu.Lock()
	shards := e.shards[job]
	e.mu.Unlock()
	if len(shards) > 0 {
		ranges := make([]wire.RowRange, len(shards))
		for k, sh := range shards {
			ranges[k] = wire.RowRange{Block: md.DBlock(sh.action), Lo: sh.rowLo, Hi: sh.rowHi}
		}
		var err error
		if ref.kOffset, ref.kCRCs, ref.dCRCs, err = wire.RawModelParts(data, ranges); err != nil {
			// Workers then fetch the whole model.
			e.log.Warn("model parts", "job", job, "version", v, "error", err)
			ref.kOffset, ref.kCRCs, ref.dCRCs = 0, nil, nil
		} else {
			ref.header = data[:wire.RawHeaderBytes]
		}
	}
	ref.blob = e.blobs.Put(fmt.Sprintf("model-%s-%d", job, v), data)
	e.mu.Lock()
	e.models[job] = ref
	e.mu.Unlock()
	return snap
}

// persistModel stores model version v of a job in the Object Store as an
// Arrow model file (for resume) and returns its name, digest and size.
func (e *Executor) persistModel(ctx context.Context, job string, v int, md *factor.Model, params map[string]string) (string, string, int64, error) {
	data, err := arrowio.EncodeModel(&arrowio.ModelFile{Model: md, Params: params})
	if err != nil {
		return "", "", 0, fmt.Errorf("natsexec: encode model: %w", err)
	}
	name := wire.ModelObject(job, v)
	digest, err := e.putDigest(ctx, name, data)
	if err != nil {
		return "", "", 0, fmt.Errorf("natsexec: store model: %w", err)
	}
	if v >= 2 && !e.keptForResume(job, v-2) {
		// Keep the previous version for stragglers; older ones go, but
		// for the resume point's (dropResume deletes it).
		if err := e.obs.Delete(ctx, wire.ModelObject(job, v-2)); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			e.log.Warn("delete old model", "object", wire.ModelObject(job, v-2), "error", err)
		}
	}
	return name, digest, int64(len(data)), nil
}

// putDigest stores data as the object name and returns its SHA-256
// digest (hex): the Object Store hashed the bytes as it stored them, so
// its digest is ours, no second pass over a model's bytes.
func (e *Executor) putDigest(ctx context.Context, name string, data []byte) (string, error) {
	info, err := wire.PutObject(ctx, e.obs, e.nc.MaxPayload(), name, data)
	if err != nil {
		return "", e.storeErr(ctx, wire.OpStore, wire.KindObjects, name, err)
	}
	sum, err := jetstream.DecodeObjectDigest(info.Digest)
	if err != nil || len(sum) != sha256.Size {
		s := sha256.Sum256(data)
		sum = s[:]
	}
	return hex.EncodeToString(sum), nil
}
