package worker

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/emsf/emsf/worker/wire/proto"
)

// TestCheckFence: the epoch rules of the owners exchange, case by case,
// for every operation: a worker at epoch 5 (token "t5") of a job whose
// record names epoch 5 and FenceOf("t5"), or epoch 6 of token "t6" (a
// coordinator placed the job anew and has not reached this worker yet),
// or that holds nothing of the job. Each refusal names why; the record
// is read only for what needs proof (a newer epoch, an end).
func TestCheckFence(t *testing.T) {
	rec5 := proto.Lease{Epoch: 5, Fence: proto.FenceOf("t5")}
	rec6 := proto.Lease{Epoch: 6, Fence: proto.FenceOf("t6")}
	type want struct {
		newer bool
		err   string // "" accepted
		read  bool   // the record was read
	}
	for _, c := range []struct {
		name  string
		have  bool
		rec   proto.Lease
		epoch int
		fence string
		ops   map[string]want // by operation; "*" for every other
	}{
		{"missing epoch", true, rec5, 0, "t5", map[string]want{"*": {err: "without an epoch"}}},
		{"missing fence", true, rec5, 5, "", map[string]want{"*": {err: "without an epoch"}}},
		{"old epoch", true, rec5, 4, "t4", map[string]want{"*": {err: "epoch 4, the job is at epoch 5"}}},
		{"current", true, rec5, 5, "t5", map[string]want{
			proto.OpEnd: {read: true}, "*": {}}},
		{"current, forged fence", true, rec5, 5, "t5x", map[string]want{"*": {err: "another fence"}}},
		{"current, record moved on", true, rec6, 5, "t5", map[string]want{
			proto.OpEnd: {err: "record names epoch 6", read: true}, "*": {}}},
		{"newer, proven", true, rec6, 6, "t6", map[string]want{
			proto.OpLoad: {newer: true, read: true}, proto.OpEnd: {newer: true, read: true}, "*": {err: "no load opened here"}}},
		{"future, not in the record", true, rec5, 9, "t9", map[string]want{
			proto.OpLoad: {err: "record names epoch 5", read: true}, proto.OpEnd: {err: "record names epoch 5", read: true}, "*": {err: "no load opened here"}}},
		{"newer, forged fence", true, rec6, 6, "t6x", map[string]want{
			proto.OpLoad: {err: "or another fence", read: true}, proto.OpEnd: {err: "or another fence", read: true}, "*": {err: "no load opened here"}}},
		{"nothing here, proven", false, rec5, 5, "t5", map[string]want{
			proto.OpLoad: {newer: true, read: true}, proto.OpEnd: {newer: true, read: true}, "*": {err: "no blocks loaded here"}}},
		{"nothing here, forged", false, rec5, 5, "t6", map[string]want{
			proto.OpLoad: {err: "or another fence", read: true}, proto.OpEnd: {err: "or another fence", read: true}, "*": {err: "no blocks loaded here"}}},
	} {
		for _, op := range []string{proto.OpLoad, proto.OpTask, proto.OpCommit, proto.OpSave, proto.OpEnd} {
			w, ok := c.ops[op]
			if !ok {
				w = c.ops["*"]
			}
			read := false
			r := &proto.Request{Op: op, Job: "j", Epoch: c.epoch, Fence: c.fence}
			newer, err := checkFence(c.have, 5, "t5", r, func(want int) (proto.Lease, error) {
				read = true
				if w := map[bool]int{true: c.epoch, false: 0}[op == proto.OpLoad]; want != w {
					t.Errorf("%s %s: the record read waiting for epoch %d, want %d", c.name, op, want, w)
				}
				return c.rec, nil
			})
			switch {
			case w.err == "" && err != nil, w.err != "" && (err == nil || !strings.Contains(err.Error(), w.err)):
				t.Errorf("%s, %s: %v, want %q", c.name, op, err, w.err)
			case newer != w.newer || read != w.read:
				t.Errorf("%s, %s: newer %v (want %v), record read %v (want %v)", c.name, op, newer, w.newer, read, w.read)
			}
		}
	}
	// A record that cannot be read refuses what needs it.
	_, err := checkFence(true, 5, "t5", &proto.Request{Op: proto.OpLoad, Job: "j", Epoch: 6, Fence: "t6"},
		func(int) (proto.Lease, error) { return proto.Lease{}, errors.New("bucket gone") })
	if err == nil || !strings.Contains(err.Error(), "bucket gone") {
		t.Fatalf("an unreadable record: %v", err)
	}
}

// TestReplyBy: a request stops its work a tenth of its time before its
// deadline, at least 100 ms and at most 5 s before.
func TestReplyBy(t *testing.T) {
	now := time.Unix(1000, 0)
	for left, early := range map[time.Duration]time.Duration{
		2 * time.Minute: 5 * time.Second, 10 * time.Second: time.Second, time.Second: 100 * time.Millisecond, 0: 100 * time.Millisecond} {
		if got := now.Add(left).Sub(replyBy(now, now.Add(left))); got != early {
			t.Errorf("%v left: stops %v early, want %v", left, got, early)
		}
	}
}
