package wire

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"strconv"
	"strings"
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

	mu     sync.Mutex
	blobs  map[string][]byte
	order  []string
	onDrop func([]byte)
}

// SetOnDrop makes the server call f with a blob's bytes when its reader
// drops it (DropBlob): it has them all, so the owner may reuse the memory.
func (b *BlobServer) SetOnDrop(f func([]byte)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.onDrop = f
}

// ServeBlobs subscribes to BlobSubject(prefix, id).* on nc. Each request's
// body is a decimal byte offset, a comma and a decimal length; the reply is the chunk there (at most
// that long; empty past the end), or a reply with header Emsf-Blob-Error
// when the blob is gone.
func ServeBlobs(nc *nats.Conn, prefix, id string, keep int) (*BlobServer, error) {
	if keep <= 0 {
		keep = 8
	}
	b := &BlobServer{nc: nc, base: BlobSubject(prefix, id), chunk: blobChunk(nc), max: keep, blobs: map[string][]byte{}}
	sub, err := nc.Subscribe(b.base+".*", b.serve)
	if err != nil {
		return nil, fmt.Errorf("wire: serve blobs: %w", err)
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
		b.mu.Lock()
		data, ok := b.blobs[name]
		delete(b.blobs, name)
		f := b.onDrop
		b.mu.Unlock()
		if ok && f != nil {
			f(data)
		}
		return
	}
	// "off,len".
	offs, lens, hasLen := strings.Cut(string(m.Data), ",")
	off, err := strconv.Atoi(offs)
	n := 0
	if !hasLen && err == nil {
		err = errors.New("no length")
	}
	if err == nil {
		if n, err = strconv.Atoi(lens); err == nil && n < 0 {
			err = errors.New("negative length")
		}
		n = min(n, b.chunk)
	}
	b.mu.Lock()
	data, ok := b.blobs[name]
	b.mu.Unlock()
	reply := nats.NewMsg(m.Reply)
	switch {
	case err != nil || off < 0:
		reply.Header.Set(HeaderBlobError, "bad request: want offset,length")
	case !ok:
		reply.Header.Set(HeaderBlobError, "no blob "+name)
	default:
		off = min(off, len(data))
		reply.Data = data[off:min(off+n, len(data))]
		reply.Header.Set(HeaderBlobTotal, strconv.Itoa(len(data)))
	}
	_ = m.RespondMsg(reply)
}

// HeaderBlobTotal is the blob's whole size, on every chunk reply.
const HeaderBlobTotal = "Emsf-Blob-Total"

// FetchBlobAll pulls a blob whose size the reader does not know: the
// first chunk's reply says it (HeaderBlobTotal), the rest is fetched as
// FetchBlobRange does. A blob said to be larger than limit bytes is an
// error before anything is allocated for it (the server is another
// process: its header is not trusted).
func FetchBlobAll(ctx context.Context, nc *nats.Conn, subject string, limit int) ([]byte, error) {
	chunk := blobChunk(nc)
	m, err := nc.RequestWithContext(ctx, subject, []byte("0,"+strconv.Itoa(chunk)))
	if err == nil && m.Header.Get(HeaderBlobError) != "" {
		err = errors.New(m.Header.Get(HeaderBlobError))
	}
	var total int
	if err == nil {
		total, err = strconv.Atoi(m.Header.Get(HeaderBlobTotal))
		if err == nil && (total < len(m.Data) || (total > len(m.Data) && len(m.Data) != chunk)) {
			err = fmt.Errorf("first chunk of %d bytes for a blob of %d", len(m.Data), total)
		}
		if err == nil && total > limit {
			err = fmt.Errorf("blob of %d bytes, at most %d expected", total, limit)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("wire: fetch blob %s: %w", subject, err)
	}
	buf := AlignedBuffer(total)
	copy(buf, m.Data)
	if total == len(m.Data) {
		return buf, nil
	}
	if _, err := FetchBlobRange(ctx, nc, subject, len(m.Data), total-len(m.Data), buf[len(m.Data):], nil); err != nil {
		return nil, err
	}
	return buf, nil
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
	// order also lists blobs dropped since (Drop, DropBlob): forget them
	// once they are most of it, so that a server that keeps blobs until
	// they are dropped (the owners' slices, Max = MaxInt32) does not grow
	// by a name for every blob it ever held.
	if len(b.order) > 2*len(b.blobs)+64 {
		b.order = slices.DeleteFunc(b.order, func(n string) bool { _, ok := b.blobs[n]; return !ok })
	}
	for len(b.blobs) > b.max {
		delete(b.blobs, b.order[0])
		b.order = b.order[1:]
	}
	return b.base + "." + name
}

// held is the number of blobs held and of names in the order.
func (b *BlobServer) held() (blobs, names int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.blobs), len(b.order)
}

// Get returns blob name if it is held (for a reader in the same process,
// which then need not fetch it through the server).
func (b *BlobServer) Get(name string) ([]byte, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	data, ok := b.blobs[name]
	return data, ok
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
		return fmt.Errorf("wire: blob server: %w", err)
	}
	return nil
}

// blobWindow is how many chunk requests FetchBlob keeps in flight.
const blobWindow = 4

// FetchBlob pulls a blob of size bytes from subject into buf (grown when
// too small) with up to blobWindow chunk requests in flight, and returns
// it.
func FetchBlob(ctx context.Context, nc *nats.Conn, subject string, size int, buf []byte) ([]byte, error) {
	return FetchBlobRange(ctx, nc, subject, 0, size, buf, nil)
}

// FetchBlobRange pulls bytes [off, off+size) of a blob from subject into
// buf (grown when too small) like FetchBlob, and returns them. progress,
// if set, is called with the length of the prefix of the range in place
// each time it grows, in order and from one goroutine at a time, so that
// a reader can use the first bytes while later ones are in flight.
func FetchBlobRange(ctx context.Context, nc *nats.Conn, subject string, off, size int, buf []byte, progress func(n int)) ([]byte, error) {
	if size < 0 || off < 0 {
		return nil, fmt.Errorf("wire: blob %s: range [%d, %d+%d)", subject, off, off, size)
	}
	if cap(buf) < size {
		buf = make([]byte, size)
	}
	buf = buf[:size]
	chunk := blobChunk(nc)
	nchunks := max((size+chunk-1)/chunk, 1)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	sem := make(chan struct{}, blobWindow)
	// done and prefix track the chunks in place, for progress.
	var pmu sync.Mutex
	done := make([]bool, nchunks)
	prefix := 0
	for k := range nchunks {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func(k int) {
			defer wg.Done()
			defer func() { <-sem }()
			at := k * chunk
			want := min(chunk, size-at)
			body := strconv.Itoa(off+at) + "," + strconv.Itoa(want)
			m, err := nc.RequestWithContext(ctx, subject, []byte(body))
			switch {
			case err != nil:
			case m.Header.Get(HeaderBlobError) != "":
				err = errors.New(m.Header.Get(HeaderBlobError))
			case len(m.Data) != want:
				err = fmt.Errorf("chunk at %d has %d bytes, want %d", off+at, len(m.Data), want)
			default:
				copy(buf[at:], m.Data)
			}
			if err != nil {
				select {
				case errs <- fmt.Errorf("wire: fetch blob %s: %w", subject, err):
				default:
				}
				cancel()
				return
			}
			if progress == nil {
				return
			}
			pmu.Lock()
			defer pmu.Unlock()
			done[k] = true
			if prefix != k {
				return
			}
			for prefix < nchunks && done[prefix] {
				prefix++
			}
			progress(min(prefix*chunk, size))
		}(k)
	}
	wg.Wait()
	select {
	case err := <-errs:
		return nil, err
	default:
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("wire: fetch blob %s: %w", subject, err)
	}
	return buf, nil
}

// Castagnoli is the CRC-32C table of every CRC of the protocol (CRC).
var Castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CRC is the checksum of a partial blob (CRC-32C, hex): it guards the
// transfer; the partial's content is checked by the coordinator.
func CRC(data []byte) string {
	return strconv.FormatUint(uint64(crc32.Checksum(data, Castagnoli)), 16)
}
