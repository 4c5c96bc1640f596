package wire

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/emsf/emsf/worker/wire/proto"
)

// Storage faults. Every write and read of the JetStream stores (the Object
// Store bucket, the KV bucket of job records, the service's stream) that
// fails is classified here, in one place, by ClassifyStore, and wrapped by
// StoreErr into a *StoreError that names the store, the object or key, what
// the fault means and what to do. The coordinator's rollback loop and the
// workers' store writes act on the class: a permanent fault (the store is
// full, JetStream is disabled) ends the fit at once with that error, a
// corrupt object is repaired or replaced from what is intact, and anything
// else is transient: retried after a back-off.

// StoreFault is the class of a store error.
type StoreFault int

const (
	// StoreFine is no error.
	StoreFine StoreFault = iota
	// StoreTransient is worth a retry after a back-off: a timeout, no
	// responders (a leader election, a server restarting), a connection
	// being re-established, and any error not known to be permanent.
	StoreTransient
	// StoreFull is permanent: the store has no room for the write (the
	// server's max_file_store, the account's JetStream limits, the
	// bucket's max bytes, a disk with no space left). Retrying changes
	// nothing until someone makes room.
	StoreFull
	// StoreDisabled is permanent: JetStream is not enabled on the server
	// or for the account. A server that runs out of disk space disables
	// it ("JetStream out of resources, will be DISABLED" in its log).
	StoreDisabled
	// StoreCorrupt is an object whose bytes do not match its digest.
	StoreCorrupt
	// StoreStalled is a write that was not acknowledged in time while
	// the server answers: a stream whose disk is full stalls like this
	// (nats-server does not answer its writes; its log says "critical
	// write error ... no space left on device"), and so may a server too
	// loaded to keep up. Not permanent by itself: the sequencer ends a
	// fit at the second in a row.
	StoreStalled
)

// String is the fault's name: the proto.Fault* a worker's reply carries.
func (f StoreFault) String() string {
	switch f {
	case StoreFine:
		return ""
	case StoreFull:
		return proto.FaultStoreFull
	case StoreDisabled:
		return proto.FaultStoreDisabled
	case StoreCorrupt:
		return proto.FaultCorrupt
	case StoreStalled:
		return proto.FaultStoreStalled
	}
	return "store-transient"
}

// Permanent reports whether retrying a write that met f is pointless.
func (f StoreFault) Permanent() bool { return f == StoreFull || f == StoreDisabled }

// The JetStream API error codes that say the store has no room
// (nats-server's errors.json).
const (
	codeAccountResourcesExceeded = 10002 // resource limits exceeded for account
	codeInsufficientResources    = 10023 // insufficient resources (the server's max_file_store)
	codeMaximumStreams           = 10027 // maximum number of streams reached
	codeMemoryResourcesExceeded  = 10028 // insufficient memory resources available
	codeStorageResourcesExceeded = 10047 // insufficient storage resources available
	codeStreamStoreFailed        = 10077 // the store's own error: "maximum bytes exceeded", "no space left on device", …
)

// fullTexts are the server's words for a full store, in a description or
// in an error that lost its type on the way (a worker's reply).
var fullTexts = []string{
	"insufficient resources",
	"insufficient storage resources",
	"insufficient memory resources",
	"resource limits exceeded",
	"maximum bytes exceeded",
	"maximum messages exceeded",
	"maximum number of streams reached",
	"no space left on device",
}

// ClassifyStore returns the class of err, an error of a JetStream store
// operation (wrapped or not).
func ClassifyStore(err error) StoreFault {
	if err == nil {
		return StoreFine
	}
	var se *StoreError
	if errors.As(err, &se) {
		return se.Fault
	}
	if errors.Is(err, jetstream.ErrDigestMismatch) {
		return StoreCorrupt
	}
	if errors.Is(err, jetstream.ErrAsyncPublishTimeout) || errors.Is(err, ErrNoProgress) {
		return StoreStalled
	}
	if errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) {
		return StoreDisabled
	}
	var api *jetstream.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode {
		case codeAccountResourcesExceeded, codeInsufficientResources, codeMaximumStreams, codeMemoryResourcesExceeded, codeStorageResourcesExceeded:
			return StoreFull
		case jetstream.JSErrCodeJetStreamNotEnabled, jetstream.JSErrCodeJetStreamNotEnabledForAccount:
			return StoreDisabled
		}
	}
	msg := strings.ToLower(err.Error())
	for _, t := range fullTexts {
		if strings.Contains(msg, t) {
			return StoreFull
		}
	}
	if strings.Contains(msg, "jetstream not enabled") {
		return StoreDisabled
	}
	if strings.Contains(msg, "timeout waiting for ack") {
		return StoreStalled
	}
	return StoreTransient
}

// isTimeout reports whether err is a timeout of a request or publish.
func isTimeout(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, jetstream.ErrAsyncPublishTimeout)
}

// StoreError is a failed operation on a JetStream store: which store,
// which object or key, the fault's class and, for a full store, how full
// it is as the server says.
type StoreError struct {
	// Op is what failed ("store", "read", "write the record"); Kind the
	// store's kind ("Object Store bucket", "KV bucket", "stream"), Bucket
	// its name, Name the object or key.
	Op, Kind, Bucket, Name string
	Fault                  StoreFault
	// Usage is how full the store is, as the server says ("" unknown).
	Usage string
	Err   error
}

func (e *StoreError) Error() string {
	where := fmt.Sprintf("%s %s in %s %s", e.Op, e.Name, e.Kind, e.Bucket)
	switch e.Fault {
	case StoreFull:
		usage := ""
		if e.Usage != "" {
			usage = "; " + e.Usage
		}
		return fmt.Sprintf("%s: the JetStream store is full (the server says: %v%s): raise the server's max_file_store "+
			"(or the account's JetStream limits, or the bucket's max bytes), free disk space under the server's store_dir, "+
			"or delete objects no longer needed ('nats obj ls %s', 'nats obj rm %s NAME'; 'emsf data put' replaces a dataset's parts); "+
			"a full store is not retried", where, e.Err, usage, e.Bucket, e.Bucket)
	case StoreDisabled:
		return fmt.Sprintf("%s: JetStream is not enabled (%v): a server whose store's disk fills up disables it "+
			"('JetStream out of resources, will be DISABLED' in its log): free disk space under its store_dir and restart it; not retried", where, e.Err)
	case StoreCorrupt:
		return fmt.Sprintf("%s: the object is corrupt (%v)", where, e.Err)
	case StoreStalled:
		return fmt.Sprintf("%s: the JetStream store did not acknowledge the write (%v) while the server answers: "+
			"a stream whose disk is full stalls like this (the server's log says 'critical write error ... no space left on device'): "+
			"free disk space under the server's store_dir and restart it; or the server is too loaded to keep up", where, e.Err)
	}
	return fmt.Sprintf("%s: %v", where, e.Err)
}

func (e *StoreError) Unwrap() error { return e.Err }

// StoreErr wraps err, the error of operation op on object or key name of
// a store (kind and bucket), into a *StoreError of its class (nil for
// nil; an error that is a *StoreError already comes back as it is). For a
// full store it asks the server, through js when not nil and within 2
// seconds, how full the account and the bucket's stream are.
func StoreErr(ctx context.Context, js jetstream.JetStream, op, kind, bucket, name string, err error) error {
	if err == nil {
		return nil
	}
	var se *StoreError
	if errors.As(err, &se) {
		return err
	}
	se = &StoreError{Op: op, Kind: kind, Bucket: bucket, Name: name, Fault: ClassifyStore(err), Err: err}
	if se.Fault == StoreTransient && isWrite(op) && isTimeout(err) && !errors.Is(ctx.Err(), context.Canceled) {
		// A write that took the whole time it had (not one its caller
		// called off).
		se.Fault = StoreStalled
	}
	switch {
	case se.Fault == StoreFull && js != nil:
		se.Usage = storeUsage(context.WithoutCancel(ctx), js, kind, bucket)
	case se.Fault == StoreStalled && (js == nil || !serverAnswers(context.WithoutCancel(ctx), js)):
		// The server itself is away (restarting): an ordinary retry.
		se.Fault = StoreTransient
	}
	return se
}

// Write operations, as StoreErr's callers name them.
const (
	OpStore       = "store"
	OpWriteRecord = "write the record"
)

func isWrite(op string) bool { return op == OpStore || op == OpWriteRecord }

// serverAnswers reports whether the server's JetStream API answers an
// account info request within 2 seconds.
func serverAnswers(ctx context.Context, js jetstream.JetStream) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := js.AccountInfo(ctx)
	return err == nil
}

// SameObject reports whether the object of info holds data: its size
// and its digest (the SHA-256 the Object Store recorded when it was put)
// are data's. An object put again under the same name with other bytes
// fails it; one whose chunks were damaged in place does not (its read
// fails the digest check: StoreCorrupt).
func SameObject(info *jetstream.ObjectInfo, data []byte) bool {
	if info.Size != uint64(len(data)) {
		return false
	}
	sum, err := jetstream.DecodeObjectDigest(info.Digest)
	want := sha256.Sum256(data)
	return err == nil && bytes.Equal(sum, want[:])
}

// Store kinds, as StoreErr names them.
const (
	KindObjects = "Object Store bucket"
	KindKV      = "KV bucket"
	KindStream  = "stream"
)

// storeUsage asks the server how much the account stores against its
// limit and how much the bucket's stream holds against its own.
func storeUsage(ctx context.Context, js jetstream.JetStream, kind, bucket string) string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var parts []string
	if ai, err := js.AccountInfo(ctx); err == nil {
		parts = append(parts, "the account stores "+usageOf(ai.Store, ai.Limits.MaxStore)+" on file")
	}
	stream := bucket
	switch kind {
	case KindObjects:
		stream = "OBJ_" + bucket
	case KindKV:
		stream = "KV_" + bucket
	}
	if s, err := js.Stream(ctx, stream); err == nil {
		if info, err := s.Info(ctx); err == nil {
			parts = append(parts, fmt.Sprintf("stream %s holds %s in %d messages", stream, usageOf(info.State.Bytes, info.Config.MaxBytes), info.State.Msgs))
		}
	}
	return strings.Join(parts, ", ")
}

// usageOf says used bytes against a limit (none when limit ≤ 0).
func usageOf[U ~int64 | ~uint64](used U, limit int64) string {
	if limit <= 0 {
		return Bytes(int64(used)) + " (no limit of its own)"
	}
	return fmt.Sprintf("%s of its limit %s", Bytes(int64(used)), Bytes(limit))
}

// Bytes is b in binary units, e.g. "1.5 GiB".
func Bytes(b int64) string {
	const unit = 1024
	if b < unit {
		return strconv.FormatInt(b, 10) + " B"
	}
	if b == math.MaxInt64 {
		return "more than 8 EiB"
	}
	div, exp := int64(unit), 0
	for n := b / unit; n >= unit && exp < 5; n /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(b)/float64(div), "KMGTPE"[exp])
}
