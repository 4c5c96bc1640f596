package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/shard"
	"github.com/emsf/emsf/worker"
)

// TestDataPutAndLoad: emsf data put uploads a directory's files as a
// dataset, emsf data list shows it, a local load of nats-obj://… is
// bitwise the load of the directory, and a part replaced after the
// listing is an error naming it.
func TestDataPutAndLoad(t *testing.T) {
	url, nc := embeddedNATS(t, true)
	rng := rand.New(rand.NewPCG(1, 2))
	dir := t.TempDir()
	var files []string
	for k, format := range []string{"csv", "parquet", "arrow"} {
		var rows [][4]float64
		for range 500 {
			rows = append(rows, [4]float64{float64(rng.IntN(80)), float64(rng.IntN(2)), float64(rng.IntN(80)), float64(1 + rng.IntN(3))})
		}
		p := filepath.Join(dir, fmt.Sprintf("p%d.%s", k, format))
		writeCountRows(t, p, format, rows, 1)
		files = append(files, p)
	}
	out := mustEmsf(t, append([]string{"data", "put", "--nats", url, "trips"}, files...)...)
	if !strings.Contains(out, "dataset trips: 3 parts") || !strings.Contains(out, "nats-obj://emsf-blobs/trips") {
		t.Fatalf("put: %s", out)
	}
	if out := mustEmsf(t, "data", "list", "--nats", url); !strings.Contains(out, "trips") || !strings.Contains(out, "3") {
		t.Fatalf("list: %s", out)
	}
	if out := mustEmsf(t, "data", "list", "--nats", url, "trips"); !strings.Contains(out, "datasets/trips/part-00001.parquet") {
		t.Fatalf("list trips: %s", out)
	}
	want, err := loadData(context.Background(), &inputFlags{input: dir}, 0.2, 3)
	if err != nil {
		t.Fatal(err)
	}
	in := &inputFlags{input: "nats-obj://emsf-blobs/trips", natsURL: url}
	got, err := loadData(context.Background(), in, 0.2, 3)
	if err != nil {
		t.Fatal(err)
	}
	got.file = want.file
	if !reflect.DeepEqual(got, want) {
		t.Fatal("the Object Store dataset loads differently from the directory")
	}
	// Replaced after the listing: the reader names the part.
	src, err := in.open(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer src.close()
	if err := os.WriteFile(files[0], []byte("state,action,next_state\n1,0,1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mustEmsf(t, append([]string{"data", "put", "--nats", url, "trips"}, files...)...)
	js, _ := jetstream.New(nc)
	err = worker.ScanDataFile(context.Background(), js, src.files[0], arrowio.ReadOptions{}, func(*arrowio.TransitionBatch) error { return nil })
	var ie *arrowio.InputError
	if !errors.As(err, &ie) || ie.File != "nats-obj://emsf-blobs/datasets/trips/part-00000.csv" || !errors.Is(err, shard.ErrInputChanged) {
		t.Fatalf("replaced part: %v", err)
	}
	// Usage errors.
	for _, args := range [][]string{
		{"data", "put", "--nats", url, "trips"},
		{"data", "put", "--nats", url, "bad/name", files[0]},
		{"data", "frob"},
	} {
		if code, _, _ := emsf(t, args...); code == 0 {
			t.Fatalf("%v: exit 0", args)
		}
	}
	if _, err := loadData(context.Background(), &inputFlags{input: "nats-obj://emsf-blobs/none", natsURL: url}, 0, 0); err == nil || !strings.Contains(err.Error(), "no such dataset") {
		t.Fatalf("missing dataset: %v", err)
	}
}
