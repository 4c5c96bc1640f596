package wire

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrLostRace is what a compare-and-set write of a KV record reports when
// another writer changed the record since the revision it expected (a
// coordinator or service that was replaced): test for it with errors.Is.
var ErrLostRace = errors.New("the record changed since the revision expected: another writer took it over")

// RaceError is CompareAndSet's error for a lost race: the key and the
// revision expected (0: none, the key was to be created). It matches
// ErrLostRace and unwraps to the server's error.
type RaceError struct {
	Key      string
	Revision uint64
	Err      error
}

func (e *RaceError) Error() string {
	if e.Revision == 0 {
		return fmt.Sprintf("%s: created by another writer: %v", e.Key, ErrLostRace)
	}
	return fmt.Sprintf("%s: not at revision %d any more: %v", e.Key, e.Revision, ErrLostRace)
}

func (e *RaceError) Unwrap() []error { return []error{ErrLostRace, e.Err} }

// CompareAndSet writes value to key provided its latest revision is still
// rev, or, with rev 0, provided the key does not exist (or was deleted),
// and returns the new revision. A lost race, whatever way the server
// reports it (key exists, wrong last sequence 10071, or 10164 on
// replicated streams), is a *RaceError; any other error (the server
// unreachable: worth a retry) comes back as it is.
func CompareAndSet(ctx context.Context, kv jetstream.KeyValue, key string, value []byte, rev uint64) (uint64, error) {
	var (
		n   uint64
		err error
	)
	if rev == 0 {
		n, err = kv.Create(ctx, key, value)
	} else {
		n, err = kv.Update(ctx, key, value, rev)
	}
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return 0, &RaceError{Key: key, Revision: rev, Err: err}
	}
	return n, err
}
