package arrowio

import (
	"bytes"
	"reflect"
	"testing"
)

func TestTransitionsPayloadRoundTrip(t *testing.T) {
	b := &TransitionBatch{
		State:  []int32{0, 1, 2, 3},
		Action: []int32{1, 0, 1, 0},
		Next:   []int32{3, 2, 1, 0},
		Count:  []float64{1, 2.5, 1, 4},
	}
	data, err := EncodeTransitionsPayload(b, 1, 4)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > 1024+3*PayloadRowBytes {
		t.Errorf("payload of 3 rows is %d bytes, more than the documented bound", len(data))
	}
	var got TransitionBatch
	err = ScanTransitionsReader(t.Context(), bytes.NewReader(data), "msg", "", ReadOptions{}, func(r *TransitionBatch) error {
		got.State = append(got.State, r.State...)
		got.Action = append(got.Action, r.Action...)
		got.Next = append(got.Next, r.Next...)
		got.Count = append(got.Count, r.Count...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := TransitionBatch{State: b.State[1:], Action: b.Action[1:], Next: b.Next[1:], Count: b.Count[1:]}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("read back %+v, want %+v", got, want)
	}
	if _, err := EncodeTransitionsPayload(b, 2, 5); err == nil {
		t.Error("rows past the end: no error")
	}
}
