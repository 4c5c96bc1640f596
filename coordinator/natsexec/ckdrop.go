package natsexec

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/emsf/emsf/worker/wire"
)

// dropCheckpoint deletes the objects of checkpoint v (its owners' column
// blocks and row groups and its CRC lists) once a later checkpoint is the
// job's: checkpoints replace each other, so that the Object Store holds
// the shards once and one checkpoint (n·m·8 bytes per D and K block), not
// one per checkpoint written. Best effort: an object left behind (a
// delete that failed, a coordinator that died between the commit and
// here) costs space, never a value, and its name says what it is.
func (s *ownSeq) dropCheckpoint(ctx context.Context, v int) {
	if v == s.ck.version {
		return
	}
	names := []string{s.crcObject(v)}
	for kb, cbs := range s.cols {
		for _, cb := range cbs {
			names = append(names, wire.OwnersKObject(s.opt.Job, v, kb, cb.C))
		}
	}
	for g := range s.groups {
		names = append(names, wire.OwnersDObject(s.opt.Job, v, g))
	}
	for _, name := range names {
		if err := s.e.obs.Delete(ctx, name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			s.e.log.Warn("owners: an old checkpoint's object was not deleted", "job", s.opt.Job, "object", name, "error", err)
		}
	}
}
