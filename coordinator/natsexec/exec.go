package natsexec

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/emsf/emsf/coordinator"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/worker/wire"
)

// Executor hands tasks to NATS workers; it implements
// coordinator.Executor and coordinator.Checkpointer. Close waits for the
// requests it started.
type Executor struct {
	nc  *nats.Conn
	js  jetstream.JetStream
	obs jetstream.ObjectStore
	kv  jetstream.KeyValue
	cfg Config
	log hclog.Logger

	blobs *wire.BlobServer

	mu      sync.Mutex
	shards  map[string][]objRef // by job, in shard order
	models  map[string]objRef   // by job: the latest stored version
	kvRev   map[string]uint64
	commits map[string]*pendingCommit // by job: the commit being stored
	// resumes are by job the last resume point of a fit with loop
	// state (coordinator.LoopCheckpoint), whose model version stays
	// stored until the next.
	resumes map[string]*resumePoint
	census  censusState
	memory  map[string]int64 // by worker id: the memory it announced
	links   links
	quar    quarantine
	wg      sync.WaitGroup
	closing bool
	// stopped ends at Close: it cuts a background census short.
	stopped context.Context
	stop    context.CancelFunc
}

type objRef struct {
	name, digest string
	version      int
	size         int64
	// blob is where the coordinator serves the bytes from memory ("" when
	// it does not).
	blob string
	// A shard's action and rows; a served model's parts (see
	// wire.TaskRequest.KCRCs): the K blocks' offset and CRCs, and the
	// CRC of each shard's rows of D, in shard order.
	action, rowLo, rowHi int
	kOffset              int
	kCRCs, dCRCs         []string
	header               []byte
	// precision is a served model's (tasks tell workers a float32 one's,
	// so that rows of D they derive are rounded as the commit rounds).
	precision factor.Precision
}

var _ coordinator.Executor = (*Executor)(nil)
var _ coordinator.Resumer = (*Executor)(nil)

// New returns an executor on nc, creating the buckets when missing. The
// caller keeps nc: Close the executor, then close nc.
func New(ctx context.Context, nc *nats.Conn, cfg Config) (*Executor, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("natsexec: jetstream: %w", err)
	}
	obs, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket: cfg.ObjectBucket, Description: "emsf shards, models and job manifests",
		Storage: jetstream.FileStorage, Replicas: cfg.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("natsexec: object store %s: %w", cfg.ObjectBucket, err)
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: cfg.KVBucket, Description: "emsf job state", History: 8,
		Storage: jetstream.FileStorage, Replicas: cfg.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("natsexec: key-value store %s: %w", cfg.KVBucket, err)
	}
	blobs, err := wire.ServeBlobs(nc, cfg.Prefix, "c"+rand.Text(), 4)
	if err != nil {
		return nil, fmt.Errorf("natsexec: %w", err)
	}
	stopped, stop := context.WithCancel(context.Background())
	return &Executor{nc: nc, js: js, obs: obs, kv: kv, cfg: cfg, log: cfg.Logger.Named("natsexec"), blobs: blobs,
		shards: map[string][]objRef{}, models: map[string]objRef{}, kvRev: map[string]uint64{},
		commits: map[string]*pendingCommit{}, resumes: map[string]*resumePoint{}, memory: map[string]int64{}, stopped: stopped, stop: stop}, nil
}

// goRoutine runs f in a goroutine that Close waits for, or returns false
// without running it when the executor is closing. Every goroutine of the
// executor starts here (as nats-server's startGoRoutine: one WaitGroup,
// one closing flag, checked under the lock that Close sets it under).
func (e *Executor) goRoutine(f func()) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closing {
		return false
	}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		f()
	}()
	return true
}

// Close stops a background census and waits for it, for the commits
// being stored and for the outstanding requests (they end at their
// deadlines).
func (e *Executor) Close() {
	e.mu.Lock()
	e.closing = true
	e.mu.Unlock()
	e.stop()
	e.wg.Wait()
	if err := e.blobs.Close(); err != nil {
		e.log.Warn("close", "error", err)
	}
}
