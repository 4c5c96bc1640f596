package service

import (
	"strings"
	"testing"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/coordinator/natsexec"
)

// TestServeStoreFull: a retrain whose model version finds the JetStream
// store full fails with one error that names the store and says it is
// full (not a raw "insufficient resources"), makes no version, and the
// service keeps answering.
func TestServeStoreFull(t *testing.T) {
	srv, err := natsexec.StartEmbedded(natsexec.EmbeddedConfig{StoreDir: t.TempDir(), NoSync: true, MaxStore: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	nc := connect(t, srv.ClientURL())
	// n = 400, m = 48: D and K are 2·400·48·8 = 307 200 bytes, more than
	// the whole store.
	start(t, nc, Config{Name: "full", Order: 48, MaxIter: 2, UseWorkers: WorkersNever})
	b := &arrowio.TransitionBatch{}
	for i := range 400 {
		b.State = append(b.State, int32(i))
		b.Action = append(b.Action, 0)
		b.Next = append(b.Next, int32((i*7+1)%400))
		b.Count = append(b.Count, 1)
	}
	data, err := arrowio.EncodeTransitionsPayload(b, 0, b.Len())
	if err != nil {
		t.Fatal(err)
	}
	waitSeq(t, nc, "full", publish(t, nc, "full", data))
	v, err := retrain(t, nc, "full")
	if err == nil {
		t.Fatalf("retrain made version %+v in a store of 256 KiB", v)
	}
	msg := err.Error()
	for _, want := range []string{"full", "Object Store bucket", ModelObject("full", 1)} {
		if !strings.Contains(msg, want) {
			t.Errorf("retrain error %q does not say %q", msg, want)
		}
	}
	if st := status(t, nc, "full"); st.Latest != nil || st.Transitions != 400 {
		t.Errorf("after the failed retrain: %+v, want no version and the 400 transitions counted", st)
	}
}
