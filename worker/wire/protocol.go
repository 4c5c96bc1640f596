package wire

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/emsf/emsf/factor"
)

// Defaults of the cluster protocol.
const (
	// DefaultPrefix is the subject prefix of every emsf subject.
	DefaultPrefix = "emsf"
	// DefaultObjectBucket is the Object Store bucket of shards, models and
	// large partials.
	DefaultObjectBucket = "emsf-blobs"
	// DefaultKVBucket is the KV bucket of job state.
	DefaultKVBucket = "emsf-jobs"
	// ServiceName is the micro service name of workers.
	ServiceName = "emsf-worker"
	// ServiceVersion is the protocol version workers announce. 2.0.0:
	// every partial reply carries its Label (a 1.x partial is rejected),
	// a partial too large for the reply is always a blob (no Object Store
	// partials), and every blob chunk request names its length. 3.0.0:
	// the label ends with the task's nonce (a 2.x label is rejected);
	// ready notices name row groups too.
	ServiceVersion = "4.0.0"
	// MetaMemory is the key of a worker's service metadata that gives
	// the memory in bytes it may use (decimal; absent: unknown).
	MetaMemory = "memory"
)

// Reply headers.
const (
	// HeaderWorker names the worker that answered.
	HeaderWorker = "Emsf-Worker"
	// HeaderComputeNanos is the time the worker spent computing (with
	// model parts, including waits for K rows in flight);
	// HeaderModelNanos the time it spent getting the model before that,
	// HeaderEncodeNanos the time it spent encoding the partial after.
	HeaderComputeNanos = "Emsf-Compute-Ns"
	HeaderModelNanos   = "Emsf-Model-Ns"
	HeaderEncodeNanos  = "Emsf-Encode-Ns"
	// HeaderBlob, HeaderBlobSize and HeaderBlobCRC name a partial too
	// large for a message that the worker serves from memory (see
	// FetchBlob); the reply body is then empty.
	HeaderBlob     = "Emsf-Blob"
	HeaderBlobSize = "Emsf-Blob-Size"
	HeaderBlobCRC  = "Emsf-Blob-Crc"
	// HeaderPartialOf is the Label of the partial a reply carries or
	// names.
	HeaderPartialOf = "Emsf-Partial-Of"
	// HeaderFetchBytes is how many bytes the worker fetched from the Object
	// Store for this task (0 when the shard and model were cached).
	HeaderFetchBytes = "Emsf-Fetch-Bytes"
)

// Error codes of a worker's error reply (micro's Nats-Service-Error-Code).
const (
	// CodeDeclined: the task asked this worker not to take it (Avoid).
	CodeDeclined = "409"
	// CodeExpired: the task's deadline passed before it started.
	CodeExpired = "408"
	// CodeFailed: the task failed (bad shard, model, data).
	CodeFailed = "500"
)

var namePattern = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// CheckPrefix returns an error unless p is a valid subject prefix: tokens
// of letters, digits, '-' and '_' separated by dots.
func CheckPrefix(p string) error {
	if p == "" {
		return fmt.Errorf("wire: empty subject prefix")
	}
	tok := regexp.MustCompile(`^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$`)
	if !tok.MatchString(p) {
		return fmt.Errorf("wire: subject prefix %q: want dot-separated tokens of letters, digits, '-' and '_'", p)
	}
	return nil
}

// CheckBucket returns an error unless b is a valid bucket name.
func CheckBucket(b string) error {
	if !namePattern.MatchString(b) {
		return fmt.Errorf("wire: bucket name %q: want letters, digits, '-' and '_'", b)
	}
	return nil
}

// TaskSubject is the subject tasks are requested on.
func TaskSubject(prefix string) string { return prefix + ".task" }

// QueueGroup is the queue group of the workers of a prefix.
func QueueGroup(prefix string) string {
	return regexp.MustCompile(`[^A-Za-z0-9_-]`).ReplaceAllString(prefix, "_") + "-workers"
}

// CommittedSubject is where the coordinator announces committed iterations
// of a job.
func CommittedSubject(prefix, job string) string { return prefix + ".jobs." + job + ".committed" }

// ModelObject is the Object Store name of model version v (v committed
// iterations) of a job.
func ModelObject(job string, v int) string { return fmt.Sprintf("models/%s/%d", job, v) }

// Task asks for the statistics of one shard under the model of one
// iteration. Iteration is the iteration the pass produces (1-based within
// the job): it runs on the model version published for it.
type Task struct {
	Job        string
	Iteration  int
	Shard      int
	WithLogLik bool
	// Attempt counts the hand-outs of this (job, iteration, shard), from 1.
	Attempt int
	// Avoid lists workers that failed this shard in this iteration; a
	// worker in the list declines the task when others are available.
	Avoid []string
	// Alpha is the learning rate of the fit's commits (0 means 1).
	Alpha float64
}

// Avoids reports whether the task asks worker id not to take it.
func (t Task) Avoids(id string) bool { return slices.Contains(t.Avoid, id) }

// Result is the answer to a task: a Partial, or an error.
type Result struct {
	Task    Task
	Worker  string
	Partial *factor.Partial
	Err     error
	// Compute is the time the worker spent computing; Elapsed the time from
	// hand-out to delivery.
	Compute, Elapsed time.Duration
	// Model is the time the worker spent getting the model before it
	// computed, Encode the time it spent encoding the partial, Fetch the
	// time the executor spent getting and decoding the partial (zero where
	// an executor does not measure them).
	Model, Encode, Fetch time.Duration
	// Checked says the executor (in the coordinator's process) found the
	// partial's values valid with factor.CheckPartialValues, so that the
	// coordinator's merge checks only its shape (factor.Accumulator.
	// MergeChecked).
	Checked bool
	// Bytes counts the bytes this task moved (request, reply, objects).
	Bytes int64
}

// TaskRequest is the JSON body of a task message.
type TaskRequest struct {
	Job       string `json:"job"`
	Iteration int    `json:"iteration"`
	Shard     int    `json:"shard"`
	Attempt   int    `json:"attempt"`
	// Nonce is this hand-out's (proto.Label.Nonce), which the answer's
	// label repeats.
	Nonce      string   `json:"nonce"`
	WithLogLik bool     `json:"with_loglik"`
	Avoid      []string `json:"avoid,omitempty"`
	// Deadline is when the coordinator stops waiting (Unix nanoseconds).
	Deadline int64 `json:"deadline"`
	// Bucket is the Object Store bucket of the objects below.
	Bucket string `json:"bucket"`
	// ShardObject and ShardChecksum name the shard (its manifest checksum).
	ShardObject   string `json:"shard_object"`
	ShardChecksum string `json:"shard_checksum"`
	// ModelObject and ModelDigest name the model version (hex SHA-256 of
	// the object's bytes).
	ModelObject string `json:"model_object"`
	ModelDigest string `json:"model_digest"`
	// ModelBlob, when set, is where the coordinator serves the model from
	// memory as a raw model (ModelSize bytes, see EncodeRawModel); then
	// ModelDigest is its RawDigest and ModelObject only names the version
	// (its Arrow file is stored in the background, for resume).
	ModelBlob string `json:"model_blob,omitempty"`
	ModelSize int    `json:"model_size,omitempty"`
	// Model parts (with ModelBlob): a worker may fetch only
	// what its shard reads. KCRCs[b] is the CRC-32C (hex) of K block b in
	// the blob (n·m·8 bytes from KOffset + b·n·m·8); DCRC that of the
	// shard's rows [DRowLo, DRowHi) of its D block, which a worker that
	// computed the same shard on the previous version may derive instead
	// of fetching (factor.CommitRow with learning rate Alpha) and keeps
	// only when the CRC matches.
	// ModelHeader is the blob's header (its first 64 bytes), so that a
	// worker learns the model's shape without a round trip.
	ModelHeader []byte   `json:"model_header,omitempty"`
	KOffset     int      `json:"k_offset,omitempty"`
	KCRCs       []string `json:"k_crcs,omitempty"`
	DRowLo      int      `json:"d_row_lo,omitempty"`
	DRowHi      int      `json:"d_row_hi,omitempty"`
	DCRC        string   `json:"d_crc,omitempty"`
	Alpha       float64  `json:"alpha,omitempty"`
	// Precision names the fit's factor precision when not float64
	// (factor.Precision): a worker that derives rows of D rounds them as
	// the coordinator's commit does (factor.RoundRows32 for float32).
	Precision string `json:"precision,omitempty"`
	// Started, when set, is where the worker that takes
	// the task publishes its id first, so that the coordinator can check
	// that it stays connected.
	Started string `json:"started,omitempty"`
}

// DirectTaskSubject is the subject on which the worker with the given id
// alone takes tasks (shard affinity: the coordinator sends a shard's first
// hand-out to the same worker every iteration, so its cache holds it and
// the workers share the shards evenly).
func DirectTaskSubject(prefix, id string) string { return TaskSubject(prefix) + "." + id }

// Task returns the task of a request.
func (r *TaskRequest) Task() Task {
	return Task{Job: r.Job, Iteration: r.Iteration, Shard: r.Shard, WithLogLik: r.WithLogLik, Attempt: r.Attempt, Avoid: r.Avoid, Alpha: r.Alpha}
}

// chunkSize is the largest chunk under max payload: it leaves 8 KiB for
// headers and protocol (half of a max payload below 16 KiB), at most
// MaxChunk.
func chunkSize(maxPayload int64) int {
	head := int64(8 << 10)
	if maxPayload < 16<<10 {
		head = maxPayload / 2
	}
	return int(max(min(MaxChunk, maxPayload-head), 1))
}

// MaxChunk bounds the Object Store chunks PutObject writes.
const MaxChunk = 1 << 20

// PutObject stores data as object name in chunks as large as the server's
// max payload allows (less 8 KiB for headers, at most MaxChunk), so that no
// message exceeds it: large chunks cost far fewer acknowledgements than
// the Object Store's default 128 KiB.
func PutObject(ctx context.Context, obs jetstream.ObjectStore, maxPayload int64, name string, data []byte) (*jetstream.ObjectInfo, error) {
	return PutObjectMeta(ctx, obs, maxPayload, jetstream.ObjectMeta{Name: name}, data)
}

// PutObjectMeta is PutObject for an object with metadata (meta's chunk
// size is set as PutObject sets it).
func PutObjectMeta(ctx context.Context, obs jetstream.ObjectStore, maxPayload int64, meta jetstream.ObjectMeta, data []byte) (*jetstream.ObjectInfo, error) {
	return PutObjectReader(ctx, obs, maxPayload, meta, bytes.NewReader(data))
}

// PutObjectReader is PutObjectMeta for an object read from r as it is
// put (one chunk in memory at a time); an error reading r fails the put
// and leaves no object.
//
// A put that makes no progress for StallAfter (the bucket's stream stores
// nothing more, while its status still answers) is cut short with
// ErrNoProgress, which ClassifyStore calls a stall: a JetStream store
// whose disk is full acknowledges nothing and says nothing, so without
// this the put would wait out its whole deadline (a task's lease, minutes).
func PutObjectReader(ctx context.Context, obs jetstream.ObjectStore, maxPayload int64, meta jetstream.ObjectMeta, r io.Reader) (*jetstream.ObjectInfo, error) {
	opts := jetstream.ObjectMetaOptions{ChunkSize: uint32(chunkSize(maxPayload))}
	if meta.Opts != nil {
		opts.Link = meta.Opts.Link
	}
	meta.Opts = &opts
	pctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		watchProgress(pctx, obs, done, cancel)
	}()
	info, err := obs.Put(pctx, meta, r)
	close(done)
	<-watched
	if cause := context.Cause(pctx); err != nil && errors.Is(cause, ErrNoProgress) && ctx.Err() == nil {
		err = fmt.Errorf("%w (%w)", cause, err)
	}
	return info, err
}

// ErrNoProgress cuts short a put whose bucket stored nothing for
// StallAfter (PutObjectReader).
var ErrNoProgress = errors.New("the store took no write for " + StallAfter.String() + " while it answers")

// StallAfter is how long a put may go without its bucket storing anything
// more before it counts as stalled; progressPoll how often it looks.
const (
	StallAfter   = 5 * time.Second
	progressPoll = time.Second
)

// watchProgress polls the size of obs's stream until done closes and
// cancels the put with ErrNoProgress once it has not grown for
// StallAfter while the status answers (a status that does not answer is
// a server away: the put's own deadline handles that). Another writer's
// progress counts as progress: it may hide a stall, never make one.
func watchProgress(ctx context.Context, obs jetstream.ObjectStore, done <-chan struct{}, cancel context.CancelCauseFunc) {
	size := func() (uint64, bool) {
		sctx, scancel := context.WithTimeout(ctx, progressPoll)
		defer scancel()
		st, err := obs.Status(sctx)
		if err != nil {
			return 0, false
		}
		return st.Size(), true
	}
	last, ok := size()
	since := time.Now()
	tick := time.NewTicker(progressPoll)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now, answered := size()
		switch {
		case !answered:
			since = time.Now()
		case !ok || now != last:
			last, ok, since = now, true, time.Now()
		case time.Since(since) >= StallAfter:
			cancel(ErrNoProgress)
			return
		}
	}
}

// LinkSubject is where the worker with the given id echoes what it is
// sent (the reply is the request's body, as it came): the coordinator
// times it to find a worker behind a slow link before it places a job
// (coordinator/owners.LeaveOut). The reply is no larger than the request,
// so the echo gives no one more bytes than they send.
func LinkSubject(prefix, id string) string { return prefix + ".link." + id }
