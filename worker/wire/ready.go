package wire

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
)

// ReadySubject is where worker id, the owner of column blocks of K, hears
// that a K̂ slice of one of its blocks is served (core NATS, no reply):
// the worker that computed the slice's shard says so as soon as it serves
// it, so that the owner can pull and fold the slices that are due in the
// canonical order while the pass still runs, instead of each waiting,
// held in its server's memory, for the commit. A notice is only a hint:
// one that is lost, late, stale or wrong changes nothing but when a
// slice is pulled, since the commit pulls every slice not folded yet from
// the worker the coordinator names.
func ReadySubject(prefix, id string) string { return prefix + ".ready." + id }

// Ready is one notice: slice SliceName(Job, Epoch, Iteration, Shard, C)
// of K block KBlock is served by Worker; or, when Group >= 0, the D̂
// slice DSliceName(Job, Epoch, Iteration, Shard, Group) of row group
// Group (KBlock and C are then not sent).
type Ready struct {
	Job       string
	Epoch     int
	Iteration int
	KBlock, C int
	Shard     int
	Worker    string
	Group     int
}

// Ready notice headers (beside HeaderOwnJob, HeaderOwnEpoch,
// HeaderOwnVersion (the iteration) and HeaderOwnBlock ("kblock/c")).
const (
	HeaderReadyShard  = "Emsf-Shard"
	HeaderReadyWorker = "Emsf-Worker"
	HeaderReadyGroup  = "Emsf-Group"
)

// Msg is the notice as a message to owner's ReadySubject.
func (r Ready) Msg(prefix, owner string) *nats.Msg {
	msg := nats.NewMsg(ReadySubject(prefix, owner))
	msg.Header.Set(HeaderOwnJob, r.Job)
	msg.Header.Set(HeaderOwnEpoch, strconv.Itoa(r.Epoch))
	msg.Header.Set(HeaderOwnVersion, strconv.Itoa(r.Iteration))
	if r.Group >= 0 {
		msg.Header.Set(HeaderReadyGroup, strconv.Itoa(r.Group))
	} else {
		msg.Header.Set(HeaderOwnBlock, strconv.Itoa(r.KBlock)+"/"+strconv.Itoa(r.C))
	}
	msg.Header.Set(HeaderReadyShard, strconv.Itoa(r.Shard))
	msg.Header.Set(HeaderReadyWorker, r.Worker)
	return msg
}

// ParseReady reads a notice from msg's headers.
func ParseReady(msg *nats.Msg) (Ready, error) {
	var r Ready
	var errs [6]error
	r.Job = msg.Header.Get(HeaderOwnJob)
	r.Epoch, errs[0] = strconv.Atoi(msg.Header.Get(HeaderOwnEpoch))
	r.Iteration, errs[1] = strconv.Atoi(msg.Header.Get(HeaderOwnVersion))
	if g := msg.Header.Get(HeaderReadyGroup); g != "" {
		if r.Group, errs[2] = strconv.Atoi(g); errs[2] == nil && r.Group < 0 {
			errs[2] = fmt.Errorf("row group %d", r.Group)
		}
	} else {
		r.Group = -1
		kbs, cs, _ := strings.Cut(msg.Header.Get(HeaderOwnBlock), "/")
		r.KBlock, errs[2] = strconv.Atoi(kbs)
		r.C, errs[5] = strconv.Atoi(cs)
	}
	r.Shard, errs[3] = strconv.Atoi(msg.Header.Get(HeaderReadyShard))
	r.Worker = msg.Header.Get(HeaderReadyWorker)
	if r.Job == "" || r.Worker == "" {
		errs[4] = errors.New("no job or worker")
	}
	if err := errors.Join(errs[:]...); err != nil {
		return Ready{}, fmt.Errorf("wire: bad ready notice: %w", err)
	}
	return r, nil
}
