// Package coordinator runs a fit as a map-reduce: it plans one task per
// shard and iteration, hands tasks to an Executor with a deadline (a
// lease), gathers one factor.Partial per shard, checks it, reduces in the
// canonical order (factor.ReducePlan), commits, checkpoints and announces.
//
// The Executor is the coordinator's only view of the workers, so the same
// loop runs against goroutines in this process (worker.Local) and against
// NATS workers (coordinator/natsexec); the tests run one body against
// both.
//
// # How tasks travel
//
// Tasks are requests to the workers' queue group with coordinator-owned
// deadlines, not a JetStream work queue. The coordinator already has to
// own leases and reassignment (it knows which shards are missing and when
// to give up on a worker), and the data behind a task (shard, model) lives
// in the Object Store anyway, so a durable task queue would add a second
// copy of the lease state (AckWait, MaxDeliver) that can disagree with the
// coordinator's. A request is answered by exactly one live member of the
// queue group; a worker that dies leaves its requests unanswered, and the
// task is handed out again (to whichever worker the server picks; a task
// that failed on a worker carries that worker in its Avoid list so that it
// is recomputed elsewhere when possible) when the lease runs out, or
// sooner when the executor notices the worker is gone (natsexec probes the
// worker holding a task with $SRV.PING every second: no responders means
// its connection closed). At most a
// window of tasks is outstanding (2 per live worker), so tasks do not wait
// in worker buffers until their deadline passes.
//
// One pass is run by a scheduler (scheduler.go): it hands out, leases,
// retries, holds and folds, and its timing is named there. The executor
// ends a task at its lease; the scheduler's own check, a safety net for
// executors that miss it, runs every TaskTimeout/4 (at least every 10 ms)
// and hands out again a task whose lease ran out more than a second ago.
//
// # Invariants
//
//   - Partials are folded in the canonical order of factor.ReducePlan
//     ("tree-v1": a fixed binary tree over reduction groups of shards,
//     from the manifest and Options.GroupNNZ), whatever order they arrive
//     in, so the committed model is bitwise identical to factor.Fit on the
//     same shards with the same GroupNNZ, for any number of workers and
//     any failures. Shards are handed out in that order and a partial is
//     folded as soon as its turn comes; early arrivals wait, at most a
//     window of them.
//   - The EM loop (iterations, Σx check, commit, convergence) is
//     factor.Loop; the coordinator is its Stepper (publish the model, run
//     the pass over the executor) and adds checkpoints, reports and resume
//     through factor.LoopHooks. It is a factor.ActionFilter: once an
//     action of a SQUAREM fit without ties stopped, its shards are no
//     longer handed out (the plan's other trees, ReducePlan.Only, as
//     they were: the same bits).
//   - Each (job, iteration, shard) is reduced at most once: a partial for
//     another iteration, for a shard already merged or already held is
//     dropped (counted in IterReport.Dropped).
//   - A partial is checked before it is held: action and nonzero count as
//     in the manifest, Σx equal to the shard's Σcount (to 1e-12 relative,
//     as factor.CheckSumX); and when merged, by factor.Reducer.Merge
//     (dimensions, indices, finite and non-negative values; an executor may
//     check the values as each partial arrives, in parallel, with
//     factor.CheckPartialValues, and the merge then checks the rest with
//     MergeChecked, as natsexec does). A failed check
//     is an error naming worker and shard; the shard is handed out again
//     (IterReport.Rejected) and the pass goes on.
//   - After each commit a Checkpointer (optional) records the job state;
//     the NATS one commits with compare-and-set on the KV revision. A fit
//     with SQUAREM or the held-out rule hands it its loop state
//     (factor.LoopState; Options.SaveLoopState), which it keeps at
//     resume points (LoopCheckpoint); Resume goes on from the last one,
//     bitwise.
package coordinator
