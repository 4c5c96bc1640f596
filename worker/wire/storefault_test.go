package wire

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestClassifyStore: every way the server and the client say that a
// store is full, disabled or holds a corrupt object, wrapped or not, and
// as the text of a worker's reply, gets its class; anything else is
// transient.
func TestClassifyStore(t *testing.T) {
	api := func(code int, ec jetstream.ErrorCode, desc string) error {
		return &jetstream.APIError{Code: code, ErrorCode: ec, Description: desc}
	}
	for _, c := range []struct {
		name string
		err  error
		want StoreFault
	}{
		{"nil", nil, StoreFine},
		{"server max_file_store", api(503, 10023, "insufficient resources"), StoreFull},
		{"wrapped twice", fmt.Errorf("natsexec: put: %w", fmt.Errorf("nats: %w", api(503, 10023, "insufficient resources"))), StoreFull},
		{"storage resources", api(500, 10047, "insufficient storage resources available"), StoreFull},
		{"memory resources", api(500, 10028, "insufficient memory resources available"), StoreFull},
		{"account limits", api(400, 10002, "resource limits exceeded for account"), StoreFull},
		{"max streams", api(400, 10027, "maximum number of streams reached"), StoreFull},
		{"bucket max bytes", api(503, 10077, "maximum bytes exceeded"), StoreFull},
		{"disk full", api(503, 10077, "write /data/jetstream/x.blk: no space left on device"), StoreFull},
		{"a worker's reply", errors.New("worker: store owners/j/2/d/0: nats: API error: code=503 err_code=10023 description=insufficient resources"), StoreFull},
		{"os error", fmt.Errorf("write: %w", errors.New("no space left on device")), StoreFull},
		{"jetstream disabled", jetstream.ErrJetStreamNotEnabled, StoreDisabled},
		{"disabled for the account", fmt.Errorf("x: %w", jetstream.ErrJetStreamNotEnabledForAccount), StoreDisabled},
		{"disabled, code", api(503, 10076, "JetStream not enabled"), StoreDisabled},
		{"disabled, text", errors.New("worker: nats: jetstream not enabled"), StoreDisabled},
		{"digest mismatch", fmt.Errorf("get: %w", jetstream.ErrDigestMismatch), StoreCorrupt},
		{"ack timeout", fmt.Errorf("put: %w", jetstream.ErrAsyncPublishTimeout), StoreStalled},
		{"ack timeout, a worker's reply", errors.New("worker: store x: nats: timeout waiting for ack"), StoreStalled},
		{"timeout", nats.ErrTimeout, StoreTransient},
		{"deadline", fmt.Errorf("put: %w", context.DeadlineExceeded), StoreTransient},
		{"no responders", nats.ErrNoResponders, StoreTransient},
		{"no stream response", jetstream.ErrNoStreamResponse, StoreTransient},
		{"connection closed", nats.ErrConnectionClosed, StoreTransient},
		{"wrong last sequence", api(400, 10071, "wrong last sequence: 4"), StoreTransient},
		{"object not found", jetstream.ErrObjectNotFound, StoreTransient},
		{"unknown", errors.New("something else"), StoreTransient},
		{"classified already", &StoreError{Fault: StoreCorrupt, Err: errors.New("crc")}, StoreCorrupt},
	} {
		if got := ClassifyStore(c.err); got != c.want {
			t.Errorf("%s: ClassifyStore(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
	for f, perm := range map[StoreFault]bool{StoreFine: false, StoreTransient: false, StoreFull: true, StoreDisabled: true, StoreCorrupt: false, StoreStalled: false} {
		if f.Permanent() != perm {
			t.Errorf("%v.Permanent() = %v", f, !perm)
		}
	}
}

// TestStoreErr: the error names the operation, the object, the store's
// kind and bucket, and for a full store what to do; it keeps the
// server's error for errors.Is and is not wrapped twice.
func TestStoreErr(t *testing.T) {
	full := &jetstream.APIError{Code: 503, ErrorCode: 10023, Description: "insufficient resources"}
	err := StoreErr(context.Background(), nil, "store", KindObjects, "emsf-objects", "owners/j/2/d/0", full)
	for _, want := range []string{"store owners/j/2/d/0 in Object Store bucket emsf-objects", "the JetStream store is full", "insufficient resources",
		"max_file_store", "free disk space", "nats obj rm emsf-objects NAME", "not retried"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v: want %q", err, want)
		}
	}
	if !errors.Is(err, full) || ClassifyStore(err) != StoreFull {
		t.Errorf("%v: does not wrap the server's error or lost its class", err)
	}
	if again := StoreErr(context.Background(), nil, "read", KindKV, "b", "k", fmt.Errorf("x: %w", err)); !errors.Is(again, full) || strings.Count(again.Error(), "max_file_store") != 1 {
		t.Errorf("wrapped twice: %v", again)
	}
	if StoreErr(context.Background(), nil, "store", KindKV, "b", "k", nil) != nil {
		t.Error("StoreErr(nil) is not nil")
	}
	if err := StoreErr(context.Background(), nil, "read", KindObjects, "b", "o", jetstream.ErrDigestMismatch); !strings.Contains(err.Error(), "read o in Object Store bucket b: the object is corrupt") {
		t.Errorf("corrupt: %v", err)
	}
	// A timed-out write is stalled only when the server can be asked
	// and answers (TestOwnersDiskFull, natsexec); with no server to ask
	// it is an ordinary retry, and a read's timeout always is.
	if err := StoreErr(context.Background(), nil, OpStore, KindObjects, "b", "o", nats.ErrTimeout); ClassifyStore(err) != StoreTransient {
		t.Errorf("timeout, no server to ask: %v is %v", err, ClassifyStore(err))
	}
	if err := StoreErr(context.Background(), nil, "read", KindObjects, "b", "o", context.DeadlineExceeded); ClassifyStore(err) != StoreTransient {
		t.Errorf("read timeout: %v is %v", err, ClassifyStore(err))
	}
}

// TestSameObject: an object's info holds data when its size and its
// Object Store digest are data's; the same size with another digest (an
// object put again with other bytes) does not.
func TestSameObject(t *testing.T) {
	data := []byte("the shard's bytes")
	digest := func(b []byte) string {
		sum := sha256.Sum256(b)
		return "SHA-256=" + base64.URLEncoding.EncodeToString(sum[:])
	}
	other := slices.Clone(data)
	other[3] ^= 1
	for _, c := range []struct {
		name string
		info jetstream.ObjectInfo
		want bool
	}{
		{"same", jetstream.ObjectInfo{Size: uint64(len(data)), Digest: digest(data)}, true},
		{"other bytes, same size", jetstream.ObjectInfo{Size: uint64(len(data)), Digest: digest(other)}, false},
		{"other size", jetstream.ObjectInfo{Size: uint64(len(data)) + 1, Digest: digest(data)}, false},
		{"no digest", jetstream.ObjectInfo{Size: uint64(len(data))}, false},
	} {
		if got := SameObject(&c.info, data); got != c.want {
			t.Errorf("%s: SameObject = %v, want %v", c.name, got, c.want)
		}
	}
}

// progressObs is an Object Store whose Status reports the size grow or
// not (the other methods are not called by watchProgress).
type progressObs struct {
	jetstream.ObjectStore
	mu    sync.Mutex
	size  uint64
	grows bool
}

type sizeStatus struct {
	jetstream.ObjectStoreStatus
	size uint64
}

func (s sizeStatus) Size() uint64 { return s.size }

func (o *progressObs) Status(context.Context) (jetstream.ObjectStoreStatus, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.grows {
		o.size += 1 << 20
	}
	return sizeStatus{size: o.size}, nil
}

// TestWatchProgress: a put whose bucket stores nothing for StallAfter is
// cut short with ErrNoProgress (a stall); one whose bucket grows is left
// alone until it is done.
func TestWatchProgress(t *testing.T) {
	for _, grows := range []bool{false, true} {
		t.Run(fmt.Sprintf("grows=%v", grows), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			done := make(chan struct{})
			watched := make(chan struct{})
			t0 := time.Now()
			go func() {
				defer close(watched)
				watchProgress(ctx, &progressObs{grows: grows}, done, cancel)
			}()
			select {
			case <-watched:
			case <-time.After(StallAfter + 3*progressPoll):
			}
			close(done)
			<-watched
			cause := context.Cause(ctx)
			switch {
			case !grows && (!errors.Is(cause, ErrNoProgress) || time.Since(t0) < StallAfter):
				t.Fatalf("no progress: cause %v after %v, want ErrNoProgress after %v", cause, time.Since(t0), StallAfter)
			case grows && cause != nil:
				t.Fatalf("progress: cancelled with %v", cause)
			}
			if !grows && ClassifyStore(fmt.Errorf("%w (%w)", cause, context.Canceled)) != StoreStalled {
				t.Fatal("ErrNoProgress is not classified as a stall")
			}
		})
	}
}
