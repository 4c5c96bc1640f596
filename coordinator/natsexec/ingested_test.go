package natsexec_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/coordinator/ingest"
	"github.com/emsf/emsf/coordinator/ingest/ingesttest"
	"github.com/emsf/emsf/coordinator/natsexec"
	"github.com/emsf/emsf/coordinator/owners"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
	"github.com/emsf/emsf/worker/wire"
	"github.com/emsf/emsf/worker/wire/proto"
)

// TestFitIngestedMatchesLocal: a fit whose coordinator holds metadata
// only (distributed ingest, row groups cut by the workers, the initial
// model drawn by them, the fitted one written by them from the last
// checkpoint into the parts of a model dataset in the Object Store, one
// part per block or parts of a few rows) gives the local fit's model bitwise
// (factor.NewRandom, factor.Fit, factor.Evaluate on the local shards):
// 1 to 3 workers, tie none and shared-k, column cells 1 and 2, float64
// and float32; and the row groups are shard.CutDGroups'.
func TestFitIngestedMatchesLocal(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	for trial, p := range []int{1, 2, 3, 2, 2} {
		tie := []factor.Tie{factor.TieNone, factor.TieSharedK}[trial%2]
		q := 1 + trial%2
		prec := factor.Float64
		if trial == 3 {
			prec = factor.Float32
		}
		n, u, m, target := 50+rng.IntN(150), 1+rng.IntN(3), 2+rng.IntN(4), 30+rng.IntN(100)
		if trial == 4 {
			// Hundreds of actions: more row groups and column blocks per
			// worker than one request carries (spreadChunk).
			u = 300
		}
		rows := ingesttest.RandomRows(rng, n, u, 1000+rng.IntN(3000), target, trial%2 == 0)
		dir := t.TempDir()
		files := ingesttest.Dataset(t, rng, dir, rows, 2)
		what := fmt.Sprintf("P=%d tie=%s q=%d m=%d %s", p, tie, q, m, prec)
		local := ingesttest.LocalShards(t, files, arrowio.ReadOptions{}, 0, 0, target, q)
		c := startIngestCluster(t, p, nil)
		ctx := context.Background()
		res, err := c.exec.Ingest(ctx, ingest.Options{Job: fmt.Sprintf("fi-%d", trial), Input: dir, Target: target, ColCells: q, Store: true})
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		job := fmt.Sprintf("fit-%d", trial)
		oj, err := c.exec.IngestedJob(ctx, job, res.Sets[0].Lines, tie)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		wantG, wantRows := shard.CutDGroups(local.Sets[0], tie)
		for g := range wantG {
			wantG[g].RowsCRC = wire.CRC(wire.EncodeCols(wantRows[g], nil))
		}
		if !reflect.DeepEqual(oj.Groups, wantG) {
			t.Fatalf("%s: row groups\n%+v\nwant\n%+v", what, oj.Groups, wantG)
		}
		seed := rng.Uint64()
		hdr := &factor.Model{N: res.N, M: m, U: res.U, Tie: tie, Seed: seed, Precision: prec, LogLik: math.NaN(), WKL: math.NaN()}
		out, err := c.exec.ModelParts(ctx, c.exec.JobModelURL(job), false)
		if err != nil {
			t.Fatal(err)
		}
		model := c.exec.NewDrawnModel(hdr, out.String(), "")
		if trial%2 == 1 {
			model.PartRows = 1 + rng.IntN(n/3)
		}
		conv := factor.Converger{MaxIter: 4}
		if _, err := c.exec.RunOwners(ctx, oj, hdr, model, natsexec.OwnersOptions{Job: job, WaitWorkers: 10 * time.Second,
			Options: owners.Options{Alpha: 1, Converger: conv, CheckpointEvery: 2, MinWorkers: p, Evaluate: true}}); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		man, err := arrowio.CommitModelDataset(ctx, out, &arrowio.ModelFile{Model: hdr}, model.Parts)
		if err != nil {
			t.Fatal(err)
		}
		if blocks := factor.NumD(u, tie) + factor.NumK(u, tie); model.PartRows == 0 && len(man.Parts) != blocks {
			t.Fatalf("%s: %d parts, want one for each of %d blocks", what, len(man.Parts), blocks)
		} else if model.PartRows > 0 && len(man.Parts) <= blocks {
			t.Fatalf("%s: %d parts of at most %d rows of n = %d for %d blocks", what, len(man.Parts), model.PartRows, n, blocks)
		}
		got, err := arrowio.ReadModelDataset(ctx, out)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}

		md := factor.NewRandom(local.N, m, local.U, tie, seed)
		md.SetPrecision(prec)
		blocks := shard.Blocks(local.Sets[0])
		if _, err := factor.Fit(ctx, md, blocks, factor.FitOptions{Alpha: 1, Converger: conv, Workers: 2}); err != nil {
			t.Fatal(err)
		}
		if err := factor.Evaluate(ctx, md, blocks, 2); err != nil {
			t.Fatal(err)
		}
		if !got.Model.Equal(md) {
			t.Fatalf("%s: the model differs from the local fit's", what)
		}
		if math.Float64bits(hdr.LogLik) != math.Float64bits(md.LogLik) || math.Float64bits(hdr.WKL) != math.Float64bits(md.WKL) || hdr.Iteration != md.Iteration {
			t.Fatalf("%s: loglik %v WKL %v after %d iterations, local %v %v after %d", what, hdr.LogLik, hdr.WKL, hdr.Iteration, md.LogLik, md.WKL, md.Iteration)
		}
	}
}

// TestFitIngestedCorruptCheckpointAtFinal: in a fit from metadata, an
// object of the last checkpoint that fails its check while the workers
// write the model's parts makes the run fall back to the checkpoint
// before and replay (a worker's reply names the object: wire.IngestCorrupt),
// and the model is still the local fit's, bitwise.
func TestFitIngestedCorruptCheckpointAtFinal(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	const iters = 6
	n, u, m, target := 120, 2, 3, 80
	rows := ingesttest.RandomRows(rng, n, u, 3000, target, false)
	dir := t.TempDir()
	files := ingesttest.Dataset(t, rng, dir, rows, 2)
	local := ingesttest.LocalShards(t, files, arrowio.ReadOptions{}, 0, 0, target, 1)
	c := startIngestCluster(t, 2, nil)
	ctx := context.Background()
	res, err := c.exec.Ingest(ctx, ingest.Options{Job: "fc-ingest", Input: dir, Target: target, Store: true})
	if err != nil {
		t.Fatal(err)
	}
	job := "fit-corrupt-final"
	oj, err := c.exec.IngestedJob(ctx, job, res.Sets[0].Lines, factor.TieNone)
	if err != nil {
		t.Fatal(err)
	}
	hdr := &factor.Model{N: res.N, M: m, U: res.U, Tie: factor.TieNone, Seed: 9, LogLik: math.NaN(), WKL: math.NaN()}
	out, err := c.exec.ModelParts(ctx, c.exec.JobModelURL(job), false)
	if err != nil {
		t.Fatal(err)
	}
	model := c.exec.NewDrawnModel(hdr, out.String(), "")
	nc, err := nats.Connect("", nats.InProcessServer(c.srv))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	obs, err := js.ObjectStore(ctx, wire.DefaultObjectBucket)
	if err != nil {
		t.Fatal(err)
	}
	conv := factor.Converger{MaxIter: iters}
	spoiled := false
	if _, err := c.exec.RunOwners(ctx, oj, hdr, model, natsexec.OwnersOptions{Job: job, WaitWorkers: 10 * time.Second,
		Options: owners.Options{Alpha: 1, Converger: conv, CheckpointEvery: 2, MinWorkers: 2, Evaluate: true,
			Committed: func(_ context.Context, iter int) error {
				if iter == iters {
					spoilObject(t, obs, proto.KObject(job, iters, 0, 0))
					spoiled = true
				}
				return nil
			}}}); err != nil {
		t.Fatal(err)
	}
	if !spoiled {
		t.Fatal("the last checkpoint was never spoiled: the test proves nothing")
	}
	if _, err := arrowio.CommitModelDataset(ctx, out, &arrowio.ModelFile{Model: hdr}, model.Parts); err != nil {
		t.Fatal(err)
	}
	got, err := arrowio.ReadModelDataset(ctx, out)
	if err != nil {
		t.Fatal(err)
	}
	md := factor.NewRandom(local.N, m, local.U, factor.TieNone, 9)
	if _, err := factor.Fit(ctx, md, shard.Blocks(local.Sets[0]), factor.FitOptions{Alpha: 1, Converger: conv, Workers: 2}); err != nil {
		t.Fatal(err)
	}
	if !got.Model.Equal(md) {
		t.Fatal("after a corrupt checkpoint at the end, the model differs from the local fit's")
	}
}
