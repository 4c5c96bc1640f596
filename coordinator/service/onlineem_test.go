package service

import (
	"strings"
	"testing"
	"time"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/factor"
)

// onlineEMFromVersion is what an online-em retrain computes from version
// prev (nil: the first version's random init), which had taken units
// unit transitions of the counts seen: the version grown and smoothed as
// every warm start is, online EM resumed at units with the statistics
// re-derived from it, and the new rows fed in the table's order.
func onlineEMFromVersion(t *testing.T, cfg Config, prev *factor.Model, units int64, seen, fresh rows, n, u int) (*factor.Model, factor.OnlineEMStats) {
	t.Helper()
	md := factor.NewRandom(n, cfg.Order, u, cfg.Tie, cfg.Seed)
	if prev != nil {
		var err error
		if md, err = prev.Grow(n, u); err != nil {
			t.Fatal(err)
		}
		if err := md.Smooth(WarmSmoothing); err != nil {
			t.Fatal(err)
		}
	}
	o, err := factor.ResumeOnlineEM(md, cfg.OnlineEM, units, blocksOf(seen, u))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range blocksOf(fresh, u) {
		for r, i := range b.Rows {
			for p := b.Ptr[r]; p < b.Ptr[r+1]; p++ {
				if err := o.Add(int(i), b.Action, int(b.Cols[p]), b.Vals[p]); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	return o.Model(), o.Stats()
}

// Online-em mode: each version is the previous one plus online EM over
// the counts that arrived after it, going on from its step t (Units),
// bitwise (the retrain and this test run the same operations in the
// same order); a restarted service goes on from the stored version and
// counts exactly as a running one does, so its next version is bitwise
// the same too.
func TestServeOnlineEM(t *testing.T) {
	nc, _ := server(t)
	cfg := Config{Name: "oem", Order: 3, Seed: 2, Mode: ModeOnlineEM, UseWorkers: WorkersNever, CheckpointEvery: time.Hour,
		OnlineEM: factor.OnlineEMOptions{GammaExp: 0.7, BurnIn: 50, Floor: 1e-4}}
	r := start(t, nc, cfg)
	batches := []rows{randomRows(4, 300, 9, 2), randomRows(5, 200, 9, 2), randomRows(6, 150, 11, 3)}
	var seen rows
	var prev *factor.Model
	var units int64
	for k, fresh := range batches {
		if k == 2 {
			// Restart between versions 2 and 3 (the third batch is
			// published while no service runs).
			r.stop(t)
		}
		seq := publish(t, nc, "oem", fresh.arrow(t))
		if k == 2 {
			start(t, nc, cfg)
		}
		waitSeq(t, nc, "oem", seq)
		v, err := retrain(t, nc, "oem")
		if err != nil {
			t.Fatal(err)
		}
		want, st := onlineEMFromVersion(t, cfg, prev, units, seen, fresh, v.N, v.U)
		if v.Mode != ModeOnlineEM || v.Version != k+1 || v.Units != units+int64(len(fresh)) || st.Units != v.Units || int64(v.Iterations) != st.MSteps {
			t.Fatalf("version %d: %+v; want units %d and %d M-steps", k+1, v, units+int64(len(fresh)), st.MSteps)
		}
		if k == 0 && st.MSteps != int64(len(fresh))-cfg.OnlineEM.BurnIn+1 {
			t.Errorf("version 1: %d M-steps, want one per unit transition from the burn-in on", st.MSteps)
		}
		got := fetch(t, nc, "oem", v.Version)
		if !got.Equal(want) {
			t.Fatalf("version %d is not version %d plus online EM over the new counts from step %d", k+1, k, units)
		}
		seen, prev, units = append(seen, fresh...), got, v.Units
	}
}

// In online-em mode a count is a number of unit transitions: a row with
// a fractional count is rejected (naming it), the others are kept; a
// count above onlineEMChunk is taken in parts.
func TestServeOnlineEMFractionalCount(t *testing.T) {
	nc, _ := server(t)
	start(t, nc, Config{Name: "oemf", Order: 2, Mode: ModeOnlineEM, UseWorkers: WorkersNever})
	b := &arrowio.TransitionBatch{State: []int32{0, 1, 2}, Action: []int32{0, 0, 0}, Next: []int32{1, 2, 0}, Count: []float64{2, 1.5, onlineEMChunk + 3}}
	data, err := arrowio.EncodeTransitionsPayload(b, 0, b.Len())
	if err != nil {
		t.Fatal(err)
	}
	st := waitSeq(t, nc, "oemf", publish(t, nc, "oemf", data))
	if st.Transitions != 2 || st.Rejected != 1 || !strings.Contains(st.LastRejection, "row 2: count 1.5") {
		t.Fatalf("status %+v: want row 2 (count 1.5) rejected, 2 kept", st)
	}
	v, err := retrain(t, nc, "oemf")
	if err != nil || v.Units != onlineEMChunk+5 {
		t.Fatalf("retrain: %+v, %v; want %d unit transitions", v, err, onlineEMChunk+5)
	}
}

// Bad online EM settings: one error naming the setting and the value.
func TestServeOnlineEMConfig(t *testing.T) {
	nc, _ := server(t)
	for _, c := range []struct {
		opts factor.OnlineEMOptions
		want string
	}{
		{factor.OnlineEMOptions{GammaExp: 0.5}, "OnlineEM.GammaExp 0.5: must be in (0.5, 1]"},
		{factor.OnlineEMOptions{GammaExp: 1.2}, "OnlineEM.GammaExp 1.2"},
		{factor.OnlineEMOptions{BurnIn: -3}, "OnlineEM.BurnIn -3: must be >= 1"},
		{factor.OnlineEMOptions{Floor: 1}, "OnlineEM.Floor 1: must be in (0, 1)"},
		{factor.OnlineEMOptions{Floor: -1e-9}, "OnlineEM.Floor -1e-09"},
	} {
		_, err := New(t.Context(), nc, Config{Name: "oemc", Mode: ModeOnlineEM, OnlineEM: c.opts})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v; want an error with %q", c.opts, err, c.want)
		}
	}
	if _, err := New(t.Context(), nc, Config{Name: "oemc", Mode: "online"}); err == nil || !strings.Contains(err.Error(), `Mode "online": want refit, incremental or online-em`) {
		t.Errorf("mode online: %v", err)
	}
}
