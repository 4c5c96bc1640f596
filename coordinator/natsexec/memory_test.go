package natsexec_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/emsf/emsf/coordinator/coordtest"
	"github.com/emsf/emsf/coordinator/natsexec"
	"github.com/emsf/emsf/coordinator/owners"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/worker/wire"
)

// TestOwnersStoreHoldsTwoCheckpoints: checkpoints replace each other. A
// fit of 7 iterations with a checkpoint every 2 writes checkpoints 0, 2,
// 4, 6 and the last version 7; afterwards the Object Store holds each
// shard once and the objects of versions 6 and 7 only (and the row
// lists): the last checkpoint and the one before, which a run falls back
// to when the last fails its check (TestOwnersCorruptCheckpoint). The
// model is still bitwise the local fit's.
func TestOwnersStoreHoldsTwoCheckpoints(t *testing.T) {
	const iters = 7
	shards := ownersData(t, 120, 2, 3)
	init := factor.NewRandom(120, 4, 2, factor.TieNone, 5)
	want, _ := fitLocal(t, shards, init, iters)
	lc := ownersCluster(t, 2, natsexec.Config{})
	md := init.Clone()
	const job = "owners-one-checkpoint"
	if _, err := lc.Exec.FitOwners(context.Background(), md, shards, natsexec.OwnersOptions{
		Job: job, Options: owners.Options{Converger: factor.Converger{MaxIter: iters}, GroupNNZ: ownersGroupNNZ, ColBlocks: 5, CheckpointEvery: 2}}); err != nil {
		t.Fatal(err)
	}
	coordtest.SameModel(t, "one checkpoint", md, want)

	js, err := jetstream.New(dial(t, lc))
	if err != nil {
		t.Fatal(err)
	}
	obs, err := js.ObjectStore(context.Background(), wire.DefaultObjectBucket)
	if err != nil {
		t.Fatal(err)
	}
	infos, err := obs.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var versions, shardObjs []string
	for _, in := range infos {
		switch {
		case strings.HasPrefix(in.Name, "shards/"):
			shardObjs = append(shardObjs, in.Name)
		case strings.HasPrefix(in.Name, "owners/"+job+"/"):
			v, _, _ := strings.Cut(strings.TrimPrefix(in.Name, "owners/"+job+"/"), "/")
			if !slices.Contains(versions, v) {
				versions = append(versions, v)
			}
		}
	}
	slices.Sort(versions)
	if !slices.Equal(versions, []string{"6", "7", "rows"}) {
		t.Errorf("checkpoint versions in the store: %v, want the last one (7), the one before (6) and the row lists", versions)
	}
	if len(shardObjs) != len(shards) {
		t.Errorf("%d shard objects for %d shards", len(shardObjs), len(shards))
	}
}

// TestOwnersOneWorkerServesNoSlice: on one worker every K̂ and D̂ slice of
// the owners exchange is folded by the task that made it (the worker owns
// every block and group, and computes the shards in the canonical order),
// so none is served and held until the commit; the model is bitwise the
// local fit's.
func TestOwnersOneWorkerServesNoSlice(t *testing.T) {
	const iters = 3
	for _, cells := range []int{1, 2} {
		shards := ownersDataGrid(t, 150, 2, 4, 4, cells)
		init := factor.NewRandom(150, 4, 2, factor.TieNone, 5)
		want, _ := fitLocal(t, shards, init, iters)
		lc := ownersCluster(t, 1, natsexec.Config{})
		md := init.Clone()
		if _, err := lc.Exec.FitOwners(context.Background(), md, shards, natsexec.OwnersOptions{
			Job: "owners-no-slice", Options: owners.Options{Converger: factor.Converger{MaxIter: iters}, GroupNNZ: ownersGroupNNZ, ColBlocks: 3, CheckpointEvery: 10}}); err != nil {
			t.Fatal(err)
		}
		coordtest.SameModel(t, "one worker", md, want)
		st := lc.Workers[0].Stats()
		if st.BytesSent != 0 || st.SlicesFolded == 0 {
			t.Errorf("column cells %d: the worker served %d bytes of slices and folded %d at their tasks, want none served", cells, st.BytesSent, st.SlicesFolded)
		}
	}
}
