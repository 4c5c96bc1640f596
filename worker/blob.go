package worker

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"sync"

	"github.com/nats-io/nats.go"
)

// Blobs are the per-iteration data plane of the cluster: the model version
// an iteration runs on (served by the coordinator) and partials too large
// for a reply message (served by the worker that computed them). A blob is
// held in the memory of the process that made it and pulled by its reader
// with requests of at most one chunk each (below the server's max payload),
// so the reader sets the pace (no slow-consumer drops) and nothing is
// written to JetStream storage on the critical path of an iteration. A
// reader that cannot reach a blob (its owner is gone) falls back to the
// Object Store where there is a copy (the committed model), or the task is
// handed out again (a partial).

// BlobSubject is the subject a process with the given id serves its blobs
// under; a blob is requested at BlobSubject(prefix, id) + "." + name.
func BlobSubject(prefix, id string) string { return prefix + ".blob." + id }

// BlobChunk is the largest chunk a blob request returns.
const BlobChunk = 1 << 20

// blobChunk is the chunk size under the connection's max payload.
func blobChunk(nc *nats.Conn) int {
	return min(BlobChunk, chunkSize(nc.MaxPayload()))
}

// BlobServer holds blobs in memory and serves them in chunks. It keeps at
// most Max blobs (default 8): adding one more drops the oldest.
type BlobServer struct {
	nc    *nats.Conn
	sub   *nats.Subscription
	base  string
	chunk int
	max   int

	mu    sync.Mutex
	blobs map[string][]byte
	order []string
}

// ServeBlobs subscribes to BlobSubject(prefix, id).* on nc. Each request's
// body is a decimal byte offset; the reply is the chunk there (empty past
// the end), or a reply with header Emsf-Blob-Error when the blob is gone.
func ServeBlobs(nc *nats.Conn, prefix, id string, keep int) (*BlobServer, error) {
	if keep <= 0 {
		keep = 8
	}
	b := &BlobServer{nc: nc, base: BlobSubject(prefix, id), chunk: blobChunk(nc), max: keep, blobs: map[string][]byte{}}
	sub, err := nc.Subscribe(b.base+".*", b.serve)
	if err != nil {
		return nil, fmt.Errorf("worker: serve blobs: %w", err)
	}
	// Requests are small; never drop them.
	_ = sub.SetPendingLimits(-1, -1)
	b.sub = sub
	return b, nil
}

// HeaderBlobError marks a blob reply that carries no data: the blob is not
// held (any more).
const HeaderBlobError = "Emsf-Blob-Error"

func (b *BlobServer) serve(m *nats.Msg) {
	name := m.Subject[len(b.base)+1:]
	if string(m.Data) == "drop" {
		b.Drop(name)
		return
	}
	off, err := strconv.Atoi(string(m.Data))
	b.mu.Lock()
	data, ok := b.blobs[name]
	b.mu.Unlock()
	reply := nats.NewMsg(m.Reply)
	switch {
	case err != nil || off < 0:
		reply.Header.Set(HeaderBlobError, "bad offset")
	case !ok:
		reply.Header.Set(HeaderBlobError, "no blob "+name)
	default:
		off = min(off, len(data))
		reply.Data = data[off:min(off+b.chunk, len(data))]
	}
	_ = m.RespondMsg(reply)
}

// Put holds data as blob name (a single subject token) and returns the
// subject to fetch it from. data must not change while it is held.
func (b *BlobServer) Put(name string, data []byte) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.blobs[name]; !ok {
		b.order = append(b.order, name)
	}
	b.blobs[name] = data
	for len(b.order) > b.max {
		delete(b.blobs, b.order[0])
		b.order = b.order[1:]
	}
	return b.base + "." + name
}

// Drop forgets blob name.
func (b *BlobServer) Drop(name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.blobs, name)
}

// DropBlob tells the owner of a blob that its reader has it (it may
// forget it now).
func DropBlob(nc *nats.Conn, subject string) {
	_ = nc.Publish(subject, []byte("drop"))
}

// Close stops serving.
func (b *BlobServer) Close() error {
	if err := b.sub.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		return fmt.Errorf("worker: blob server: %w", err)
	}
	return nil
}

// blobWindow is how many chunk requests FetchBlob keeps in flight.
const blobWindow = 4

// FetchBlob pulls a blob of size bytes from subject into buf (grown when
// too small) with up to blobWindow chunk requests in flight, and returns
// it.
func FetchBlob(ctx context.Context, nc *nats.Conn, subject string, size int, buf []byte) ([]byte, error) {
	if size < 0 {
		return nil, fmt.Errorf("worker: blob %s: size %d", subject, size)
	}
	if cap(buf) < size {
		buf = make([]byte, size)
	}
	buf = buf[:size]
	chunk := blobChunk(nc)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	sem := make(chan struct{}, blobWindow)
	for off := 0; off < size || (size == 0 && off == 0); off += chunk {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func(off int) {
			defer wg.Done()
			defer func() { <-sem }()
			want := min(chunk, size-off)
			m, err := nc.RequestWithContext(ctx, subject, []byte(strconv.Itoa(off)))
			switch {
			case err != nil:
			case m.Header.Get(HeaderBlobError) != "":
				err = errors.New(m.Header.Get(HeaderBlobError))
			case len(m.Data) != want:
				err = fmt.Errorf("chunk at %d has %d bytes, want %d", off, len(m.Data), want)
			default:
				copy(buf[off:], m.Data)
			}
			if err != nil {
				select {
				case errs <- fmt.Errorf("worker: fetch blob %s: %w", subject, err):
				default:
				}
				cancel()
			}
		}(off)
		if size == 0 {
			break
		}
	}
	wg.Wait()
	select {
	case err := <-errs:
		return nil, err
	default:
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("worker: fetch blob %s: %w", subject, err)
	}
	return buf, nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CRC is the checksum of a partial blob (CRC-32C, hex): it guards the
// transfer; the partial's content is checked by the coordinator.
func CRC(data []byte) string {
	return strconv.FormatUint(uint64(crc32.Checksum(data, castagnoli)), 16)
}
