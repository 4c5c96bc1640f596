package natsexec

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/emsf/emsf/coordinator/ingest"
	"github.com/emsf/emsf/worker/ingestwire"
	"github.com/emsf/emsf/worker/wire"
)

// Ingest reads a dataset on the workers and leaves its shards there
// (coordinator/ingest.Run over NATS): the coordinator lists nothing and
// opens no data file; it holds the lines of the splits, buckets and
// shards. The result's lines name the worker holding each shard (in its
// shard cache, where a fit's tasks find it by checksum); with o.Store
// they are in the Object Store too (o.Bucket, default the executor's).
// Every request to a worker is watched as the owners exchange watches
// its tasks (a $SRV.PING every ProbeEvery): a worker that leaves, or
// freezes for FrozenAfter, is a lost worker, and the ingest plans again
// without it.
func (e *Executor) Ingest(ctx context.Context, o ingest.Options) (*ingest.Result, error) {
	if err := wire.CheckJob(o.Job); err != nil {
		return nil, fmt.Errorf("natsexec: %w", err)
	}
	if o.Bucket == "" {
		o.Bucket = e.cfg.ObjectBucket
	}
	if o.PullBytes == 0 {
		// A pull reply below the server's max payload, less room for
		// headers.
		o.PullBytes = int(min(1<<20, e.nc.MaxPayload()) - 8<<10)
	}
	if o.Logger == nil {
		o.Logger = e.log
	}
	// The plans are served from a blob server of the ingest's own (the
	// executor's keeps a fit's model versions).
	blobs, err := wire.ServeBlobs(e.nc, e.cfg.Prefix, "c"+rand.Text()+"-ingest", 2)
	if err != nil {
		return nil, fmt.Errorf("natsexec: %w", err)
	}
	defer func() {
		if err := blobs.Close(); err != nil {
			e.log.Warn("ingest plan blobs", "error", err)
		}
	}()
	return ingest.Run(ctx, &natsCluster{e: e, blobs: blobs}, o)
}

// natsCluster is ingest.Cluster over NATS.
type natsCluster struct {
	e     *Executor
	blobs *wire.BlobServer
}

// ingestTimeout bounds a request beyond what it waits for by design: a
// live worker answers scans, builds and commits within it (a frozen one
// is caught by the watch first).
const ingestTimeout = 10 * time.Minute

// Workers are the census' workers less those behind a slow link
// (placeable): they read no split and hold no shard.
func (c *natsCluster) Workers(ctx context.Context) ([]string, error) {
	ids, err := c.e.Census(ctx)
	if err != nil {
		return nil, err
	}
	return c.e.placeable(ctx, ids), nil
}

// call sends an ingest request to worker and decodes its reply into out,
// while watching that the worker is alive: gone or frozen, the call
// fails with an *ingest.LostError.
func (c *natsCluster) call(ctx context.Context, worker, job, op string, req, out any) error {
	gctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if !c.e.goRoutine(func() { c.e.watch(gctx, worker, nil, cancel) }) {
		return errors.New("natsexec: executor closed")
	}
	rctx, rcancel := context.WithTimeout(gctx, ingestTimeout)
	defer rcancel()
	err := wire.IngestCallJSON(rctx, c.e.nc, wire.IngestSubject(c.e.cfg.Prefix, job, worker), op, req, out)
	var gone *vanishedError
	var frozen *frozenError
	cause := context.Cause(gctx)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.As(cause, &gone) || errors.As(cause, &frozen):
		return &ingest.LostError{Worker: worker, Err: cause}
	case errors.Is(err, nats.ErrNoResponders):
		return &ingest.LostError{Worker: worker, Err: err}
	}
	return fmt.Errorf("natsexec: ingest %s on worker %s: %w", op, worker, err)
}

// ask sends an ingest request to worker and decodes its reply into a T.
func ask[T any](ctx context.Context, c *natsCluster, worker, job, op string, req any) (*T, error) {
	var rep T
	return &rep, c.call(ctx, worker, job, op, req, &rep)
}

func (c *natsCluster) List(ctx context.Context, w string, r *ingestwire.ListRequest) (*ingestwire.ListReply, error) {
	return ask[ingestwire.ListReply](ctx, c, w, r.Job, ingestwire.OpList, r)
}

func (c *natsCluster) Scan(ctx context.Context, w string, r *ingestwire.ScanRequest) (*ingestwire.ScanReply, error) {
	return ask[ingestwire.ScanReply](ctx, c, w, r.Job, ingestwire.OpScan, r)
}

// Plan serves the plan as a blob (a message could not hold it at
// scale) and has the worker fetch it.
func (c *natsCluster) Plan(ctx context.Context, w string, p *ingestwire.Plan) error {
	data, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("natsexec: ingest plan: %w", err)
	}
	subject := c.blobs.Put("plan-e"+strconv.Itoa(p.Epoch), data)
	return c.call(ctx, w, p.Job, ingestwire.OpPlan, &ingestwire.PlanRequest{Job: p.Job, Epoch: p.Epoch, Blob: subject, Size: len(data), CRC: wire.CRC(data)}, nil)
}

func (c *natsCluster) Status(ctx context.Context, w string, r *ingestwire.StatusRequest) (*ingestwire.StatusReply, error) {
	return ask[ingestwire.StatusReply](ctx, c, w, r.Job, ingestwire.OpStatus, r)
}

func (c *natsCluster) Cut(ctx context.Context, w string, r *ingestwire.CutRequest) (*ingestwire.CutReply, error) {
	return ask[ingestwire.CutReply](ctx, c, w, r.Job, ingestwire.OpCut, r)
}

func (c *natsCluster) Build(ctx context.Context, w string, r *ingestwire.BuildRequest) (*ingestwire.BuildReply, error) {
	return ask[ingestwire.BuildReply](ctx, c, w, r.Job, ingestwire.OpBuild, r)
}

func (c *natsCluster) Commit(ctx context.Context, w string, r *ingestwire.CommitRequest) (*ingestwire.CommitReply, error) {
	return ask[ingestwire.CommitReply](ctx, c, w, r.Job, ingestwire.OpCommit, r)
}

func (c *natsCluster) End(ctx context.Context, w string, job string) {
	ctx, cancel := context.WithTimeout(ctx, c.e.cfg.PingWait+5*time.Second)
	defer cancel()
	if err := wire.IngestCallJSON(ctx, c.e.nc, wire.IngestSubject(c.e.cfg.Prefix, job, w), ingestwire.OpEnd, &ingestwire.EndRequest{Job: job}, nil); err != nil {
		c.e.log.Debug("ingest end", "worker", w, "error", err)
	}
}

func (c *natsCluster) IDCut(ctx context.Context, w string, r *ingestwire.IDCutRequest) (*ingestwire.IDCutReply, error) {
	return ask[ingestwire.IDCutReply](ctx, c, w, r.Job, ingestwire.OpIDCut, r)
}

func (c *natsCluster) IDScan(ctx context.Context, w string, r *ingestwire.IDScanRequest) (*ingestwire.IDScanReply, error) {
	return ask[ingestwire.IDScanReply](ctx, c, w, r.Job, ingestwire.OpIDScan, r)
}

func (c *natsCluster) IDRange(ctx context.Context, w string, r *ingestwire.IDRangeRequest) (*ingestwire.IDRangeReply, error) {
	return ask[ingestwire.IDRangeReply](ctx, c, w, r.Job, ingestwire.OpIDRange, r)
}

func (c *natsCluster) IDTrans(ctx context.Context, w string, r *ingestwire.IDTransRequest) error {
	return c.call(ctx, w, r.Job, ingestwire.OpIDTrans, r, nil)
}
