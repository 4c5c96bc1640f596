package proto

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// Label names what a partial answers and what it was computed from: the
// task's job, iteration and shard, the checksum of the shard the worker
// computed and the digest of the model version it computed it on. Every
// partial reply carries its label; the coordinator drops a partial whose
// label is not exactly that of the task it handed out, so that a partial
// of an earlier model version relabelled as the current iteration (a
// stale cache, a replay) never changes the model. Nonce is the task's
// own: a random token the coordinator draws for each task it hands out
// (each copy of it), so that an answer is bound to that one hand-out
// and not only to its fields, which an earlier hand-out of the same
// shard and iteration (a rollback's replay) shares. A client that sees
// the task can still copy its nonce: what catches a replayed or wrong
// partial that carries the right label is re-execution (--verify).
type Label struct {
	Job           string
	Iteration     int
	Shard         int
	ShardChecksum string
	ModelDigest   string
	Nonce         string
}

// String is the label as a reply carries it:
// job/iteration/shard/shard-checksum/model-digest/nonce.
func (l Label) String() string {
	return fmt.Sprintf("%s/%d/%d/%s/%s/%s", l.Job, l.Iteration, l.Shard, l.ShardChecksum, l.ModelDigest, l.Nonce)
}

// ParseLabel reads a label written by Label.String.
func ParseLabel(s string) (Label, error) {
	f := strings.Split(s, "/")
	if len(f) != 6 {
		return Label{}, fmt.Errorf("proto: partial label %q: want job/iteration/shard/shard-checksum/model-digest/nonce", s)
	}
	it, err1 := strconv.Atoi(f[1])
	sh, err2 := strconv.Atoi(f[2])
	if err1 != nil || err2 != nil {
		return Label{}, fmt.Errorf("proto: partial label %q: iteration and shard must be integers", s)
	}
	return Label{Job: f[0], Iteration: it, Shard: sh, ShardChecksum: f[3], ModelDigest: f[4], Nonce: f[5]}, nil
}

// Check returns an error naming the first field in which l differs from
// want, or nil.
func (l Label) Check(want Label) error {
	for _, f := range []struct{ name, got, want string }{
		{"job", l.Job, want.Job},
		{"iteration", strconv.Itoa(l.Iteration), strconv.Itoa(want.Iteration)},
		{"shard", strconv.Itoa(l.Shard), strconv.Itoa(want.Shard)},
		{"shard checksum", l.ShardChecksum, want.ShardChecksum},
		{"model digest", l.ModelDigest, want.ModelDigest},
		{"nonce", l.Nonce, want.Nonce},
	} {
		if f.got != f.want {
			return fmt.Errorf("proto: partial of %s %s answers the task of %s %s", f.name, f.got, f.name, f.want)
		}
	}
	return nil
}

// NewNonce draws a task's nonce: 16 random bytes, hex.
func NewNonce() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24)
	return hex.EncodeToString(b[:])
}
