package worker

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/emsf/emsf/worker/wire"
)

// The worker's store reads and writes, their errors classified by
// wire.ClassifyStore and named by wire.StoreErr: a write the store has
// no room for says which bucket and what to do, and the reply carries its
// fault (proto.Reply.Fault), so that the coordinator ends the fit with it
// at once instead of rolling back and writing again; a read of an object
// that is missing or fails its check names the object as corrupt, so
// that the coordinator falls back to an earlier checkpoint or stores the
// shard again.

// bucketName is the bucket a request names ("" is the default).
func bucketName(bucket string) string {
	if bucket == "" {
		return wire.DefaultObjectBucket
	}
	return bucket
}

// putObject stores data as object name of bucket (obs).
func (w *Worker) putObject(ctx context.Context, obs jetstream.ObjectStore, bucket, name string, data []byte) error {
	if _, err := wire.PutObject(ctx, obs, w.nc.MaxPayload(), name, data); err != nil {
		return fmt.Errorf("worker: %w", wire.StoreErr(ctx, w.js, wire.OpStore, wire.KindObjects, bucketName(bucket), name, err))
	}
	return nil
}

// getObject reads object name of bucket (obs) for op ("load", "fetch"):
// a missing object, or one whose chunks do not match its digest, is
// corrupt (corruptObject); any other error is classified.
func (w *Worker) getObject(ctx context.Context, obs jetstream.ObjectStore, op, bucket, name string) ([]byte, error) {
	data, err := obs.GetBytes(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, corruptObject(op, bucket, name, err)
	}
	if err != nil {
		return nil, wire.StoreErr(ctx, w.js, op, wire.KindObjects, bucketName(bucket), name, err)
	}
	return data, nil
}

// corruptObject is object name of bucket that failed its check (err)
// when op read it.
func corruptObject(op, bucket, name string, err error) error {
	return &wire.StoreError{Op: op, Kind: wire.KindObjects, Bucket: bucketName(bucket), Name: name, Fault: wire.StoreCorrupt, Err: err}
}

// replyFault is the fault a reply carries for err (proto.Reply.Fault)
// and, for a corrupt object, the object's name.
func replyFault(err error) (fault, object string) {
	f := wire.ClassifyStore(err)
	switch {
	case f.Permanent() || f == wire.StoreStalled:
		return f.String(), ""
	case f == wire.StoreCorrupt:
		var se *wire.StoreError
		if errors.As(err, &se) {
			return f.String(), se.Name
		}
	}
	return "", ""
}
