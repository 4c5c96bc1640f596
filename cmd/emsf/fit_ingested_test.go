package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/shard"
)

// TestFitIngestedBitwise: `emsf fit --nats` on 1, 2 and 3 real `emsf
// worker` processes runs from metadata (the workers ingest the dataset,
// cut the row groups, draw the init and hold the model) and writes, byte
// for byte, the file the local `emsf fit --plain` writes; with column
// cells too. A dataset with a bad row fails naming file, row and value,
// and writes nothing.
func TestFitIngestedBitwise(t *testing.T) {
	c := newOwnersCase(t, 7, 5, 400)
	local := filepath.Join(c.dir, "local.arrow")
	want, err := os.ReadFile(local)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("P=%d", p), func(t *testing.T) {
			url, _ := embeddedNATS(t, true)
			c.workers(t, url, p, nil)
			out := filepath.Join(c.dir, fmt.Sprintf("cluster-%d.arrow", p))
			coord := startProc(t, "coordinator", c.bin, append(c.fitArgs, "--out", out, "--nats", url, "--min-workers", fmt.Sprint(p),
				"--col-blocks", "3", "--checkpoint-every", "2", "--job", fmt.Sprintf("ingested-%d", p))...)
			if err := coord.wait(t, "coordinator"); err != nil {
				t.Fatalf("coordinator: %v\n%s", err, coord.out.String())
			}
			log := coord.out.String()
			if !strings.Contains(log, "cluster fit from metadata") {
				t.Fatalf("the fit did not run from metadata:\n%s", log)
			}
			got, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				c.check(t, out, "from metadata", log)
				t.Fatalf("P=%d: %s (%d bytes) is not the local fit's file (%d bytes), though the factors are equal\n%s", p, out, len(got), len(want), log)
			}
		})
	}
	t.Run("col-cells", func(t *testing.T) {
		args := append(c.fitArgs[:len(c.fitArgs):len(c.fitArgs)], "--col-cells", "2")
		lc := filepath.Join(c.dir, "local-cells.arrow")
		if msg, err := exec.Command(c.bin, append(args, "--out", lc, "--quiet")...).CombinedOutput(); err != nil {
			t.Fatalf("local fit: %v\n%s", err, msg)
		}
		url, _ := embeddedNATS(t, true)
		c.workers(t, url, 2, nil)
		out := filepath.Join(c.dir, "cluster-cells.arrow")
		if msg, err := exec.Command(c.bin, append(args, "--out", out, "--nats", url, "--min-workers", "2", "--job", "ingested-cells")...).CombinedOutput(); err != nil {
			t.Fatalf("cluster fit: %v\n%s", err, msg)
		}
		sameFile(t, out, lc)
	})
	t.Run("dataset out", func(t *testing.T) {
		// --out DIR/ and --out nats-obj://: the workers write the parts;
		// each dataset assembles into the local file, and a fit into a
		// file leaves no part of its job's dataset in the Object Store.
		url, nc := embeddedNATS(t, true)
		c.workers(t, url, 2, nil)
		dir := filepath.Join(c.dir, "model-ds") + "/"
		obj := "nats-obj://emsf-models/fit/ds"
		for i, out := range []string{dir, obj, filepath.Join(c.dir, "cluster-file.arrow")} {
			args := append(c.fitArgs[:len(c.fitArgs):len(c.fitArgs)], "--out", out, "--nats", url, "--min-workers", "2",
				"--job", fmt.Sprintf("ingested-ds-%d", i))
			if msg, err := exec.Command(c.bin, args...).CombinedOutput(); err != nil {
				t.Fatalf("cluster fit --out %s: %v\n%s", out, err, msg)
			}
		}
		for _, ds := range []string{dir, obj} {
			file := filepath.Join(t.TempDir(), "assembled.arrow")
			if msg, err := exec.Command(c.bin, "model", "assemble", ds, "--out", file, "--nats", url).CombinedOutput(); err != nil {
				t.Fatalf("model assemble %s: %v\n%s", ds, err, msg)
			}
			sameFile(t, file, local)
		}
		for _, name := range blobNames(t, nc) {
			if strings.Contains(name, ".model/") {
				t.Errorf("the fits left %s in the Object Store", name)
			}
		}
		// A dataset is never written over.
		args := append(c.fitArgs[:len(c.fitArgs):len(c.fitArgs)], "--out", obj, "--nats", url, "--min-workers", "2", "--job", "ingested-ds-again")
		if msg, err := exec.Command(c.bin, args...).CombinedOutput(); err == nil || !strings.Contains(string(msg), "holds a model dataset already") {
			t.Fatalf("a second fit into %s: %v\n%s", obj, err, msg)
		}
		args[len(args)-7] = dir
		if msg, err := exec.Command(c.bin, args...).CombinedOutput(); err == nil || !strings.Contains(string(msg), "is not empty") {
			t.Fatalf("a second fit into %s: %v\n%s", dir, err, msg)
		}
	})
	t.Run("bad row", func(t *testing.T) {
		bad := filepath.Join(c.dir, "bad.csv")
		data, err := os.ReadFile(c.fitArgs[2])
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.SplitAfter(string(data), "\n")
		lines[40] = "3,0,-7\n"
		if err := os.WriteFile(bad, []byte(strings.Join(lines, "")), 0o644); err != nil {
			t.Fatal(err)
		}
		url, _ := embeddedNATS(t, true)
		c.workers(t, url, 2, nil)
		out := filepath.Join(c.dir, "bad.arrow")
		args := append([]string{"fit", "--input", bad}, c.fitArgs[3:]...)
		msg, err := exec.Command(c.bin, append(args, "--out", out, "--nats", url, "--min-workers", "2", "--job", "ingested-bad")...).CombinedOutput()
		if err == nil || !strings.Contains(string(msg), "bad.csv") || !strings.Contains(string(msg), "-7") {
			t.Fatalf("a bad row: %v\n%s", err, msg)
		}
		if _, err := os.Stat(out); err == nil {
			t.Fatalf("the failed fit wrote %s", out)
		}
		if left, _ := filepath.Glob(filepath.Join(c.dir, ".emsf-parts-*")); len(left) > 0 {
			t.Fatalf("the failed fit left %v", left)
		}
	})
}

// TestFitIngestedIDs: a dataset of three files (CSV, Parquet, Arrow)
// whose states and actions are user ids, in an order that is not their
// sorted one, fitted on 1 and 3 `emsf worker` processes from metadata
// (the workers build the vocabulary; the coordinator reads no data),
// gives byte for byte the local fit's file, ids included; --out DIR/
// gives a dataset that assembles into it, and the fit leaves no range of
// the vocabulary in the Object Store.
func TestFitIngestedIDs(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(8, 9))
	n, u := 150, 3
	names := make([]string, n)
	for i, k := range rng.Perm(n) {
		names[i] = fmt.Sprintf("page/%03d", k)
	}
	states, err := shard.NewVocab(names)
	if err != nil {
		t.Fatal(err)
	}
	actions, err := shard.NewVocab([]string{"right", "left", "stay"})
	if err != nil {
		t.Fatal(err)
	}
	for k, format := range []string{"csv", "parquet", "arrow"} {
		w, err := arrowio.NewTransitionWriterIDs(filepath.Join(data, fmt.Sprintf("part-%d.%s", k, format)), format, states, actions)
		if err != nil {
			t.Fatal(err)
		}
		for q := range 1500 {
			i := rng.IntN(n)
			if err := w.Write(i, rng.IntN(u), (i+rng.IntN(9))%n, 1, int64(q), 0); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"fit", "--input", data, "--order", "4", "--iters", "4", "--tol", "0", "--seed", "3", "--shard-nnz", "300", "--plain"}
	local := filepath.Join(dir, "local.arrow")
	if msg, err := exec.Command(bin, append(args, "--out", local, "--quiet")...).CombinedOutput(); err != nil {
		t.Fatalf("local fit: %v\n%s", err, msg)
	}
	if mf, err := arrowio.ReadModel(local); err != nil || mf.States.Len() != n || mf.Actions.Len() != u {
		t.Fatalf("the local model: %v (%v)", mf, err)
	}
	for _, p := range []int{1, 3} {
		t.Run(fmt.Sprintf("P=%d", p), func(t *testing.T) {
			url, nc := embeddedNATS(t, true)
			c := &ownersCase{bin: bin, dir: dir}
			c.workers(t, url, p, nil)
			out := filepath.Join(dir, fmt.Sprintf("cluster-%d.arrow", p))
			msg, err := exec.Command(bin, append(args, "--out", out, "--nats", url, "--min-workers", fmt.Sprint(p), "--job", fmt.Sprintf("ids-%d", p))...).CombinedOutput()
			if err != nil || !strings.Contains(string(msg), "cluster fit from metadata") {
				t.Fatalf("cluster fit: %v\n%s", err, msg)
			}
			sameFile(t, out, local)
			ds := filepath.Join(dir, fmt.Sprintf("cluster-%d-ds", p)) + "/"
			if msg, err := exec.Command(bin, append(args, "--out", ds, "--nats", url, "--min-workers", fmt.Sprint(p), "--job", fmt.Sprintf("ids-ds-%d", p))...).CombinedOutput(); err != nil {
				t.Fatalf("cluster fit --out %s: %v\n%s", ds, err, msg)
			}
			file := filepath.Join(t.TempDir(), "assembled.arrow")
			if msg, err := exec.Command(bin, "model", "assemble", ds, "--out", file).CombinedOutput(); err != nil {
				t.Fatalf("model assemble %s: %v\n%s", ds, err, msg)
			}
			sameFile(t, file, local)
			for _, name := range blobNames(t, nc) {
				if strings.HasPrefix(name, "ids/") {
					t.Errorf("the fit left %s in the Object Store", name)
				}
			}
		})
	}
}

// blobNames lists the objects of the bucket emsf-blobs.
func blobNames(t *testing.T, nc *nats.Conn) []string {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	obs, err := js.ObjectStore(context.Background(), "emsf-blobs")
	if err != nil {
		t.Fatal(err)
	}
	infos, err := obs.List(context.Background())
	if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
		t.Fatal(err)
	}
	var names []string
	for _, info := range infos {
		names = append(names, info.Name)
	}
	return names
}
