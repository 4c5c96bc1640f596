package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/emsf/emsf/coordinator/coordtest"
	"github.com/emsf/emsf/coordinator/service"
)

// `emsf serve --mode online-em` with its flags: two retrains of an emsf
// serve process, the second going on from the first's step t.
func TestServeOnlineEMProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test")
	}
	bin := buildBinary(t)
	url, nc := embeddedNATS(t, false)
	startServe(t, bin, url, "oem", "--mode", "online-em", "--gamma-exp", "0.9", "--burn-in", "10", "--online-em-floor", "1e-3")
	dir := t.TempDir()
	units := 0
	for k, n := range []int{40, 25} {
		var b strings.Builder
		b.WriteString("state,action,next_state,count\n")
		for r := range n {
			fmt.Fprintf(&b, "%d,0,%d,%d\n", r%5, (r*3+k)%5, 1+r%2)
			units += 1 + r%2
		}
		path := filepath.Join(dir, fmt.Sprintf("t%d.csv", k))
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(bin, "publish", "--nats", url, "--name", "oem", "--input", path, "--create").CombinedOutput(); err != nil {
			t.Fatalf("emsf publish: %v\n%s", err, out)
		}
		coordtest.CheckFor(t, coordtest.Patience, func() error {
			st, err := serveStatus(nc, "oem")
			if err != nil || st.StreamSeq != uint64(k+1) {
				return fmt.Errorf("counted up to %d (%v)", st.StreamSeq, err)
			}
			return nil
		})
		out, err := exec.Command(bin, "retrain", "--nats", url, "--name", "oem").CombinedOutput()
		if err != nil {
			t.Fatalf("emsf retrain: %v\n%s", err, out)
		}
		var v service.Version
		if err := json.Unmarshal(out, &v); err != nil {
			t.Fatalf("emsf retrain output %q: %v", out, err)
		}
		if v.Version != k+1 || v.Mode != service.ModeOnlineEM || v.Units != int64(units) {
			t.Fatalf("retrain %d: %+v; want mode online-em, %d unit transitions", k+1, v, units)
		}
	}
}
