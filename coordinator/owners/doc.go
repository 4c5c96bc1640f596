// Package owners makes the decisions of the owners exchange (`emsf fit
// --exchange owners`), apart from its plumbing: it plans a job from shard
// metadata, places it on workers, runs each pass (with backup copies of
// stragglers' tasks), checks every answer, folds the scalars in the
// canonical order, and sequences commits, checkpoints, rollbacks and
// replays. It imports nothing of NATS (TestNoNATS): it reaches the
// workers, the job's record and its objects through three small
// interfaces, which coordinator/natsexec adapts to NATS and the tests of
// this package to a fake cluster and store (harness_test.go, in the style
// of nomad's scheduler Harness: "kill worker 2 at the commit of iteration
// 5", "lose the record write of version 6", a coordinator paused while
// another takes the job over, a worker that never answers, one that
// answers the census but serves nothing, one that lies), event by event,
// asserting the committed sequence and the bits of the fitted model.
//
//   - Cluster: the census of admitted workers, asking one worker one
//     operation (proto.Request → proto.Reply), a guard that ends a phase
//     as soon as a placed worker leaves, strikes and quarantine.
//   - Store: the job's record, written with compare-and-set on this
//     run's last write (the lease: a run that another took the job from
//     fails at its next write, ErrLeaseLost), and objects.
//   - Model: where the initial model comes from (checkpoint 0) and where
//     the fitted one goes. The sequencer holds no row of D or column of
//     K: Run takes a model header (shape, iteration, log-likelihood) and
//     refuses one with factors.
//
// # What the sequencer holds: metadata
//
// Run plans from a Job: shard lines and row groups of D, no shard. Its
// contract with whoever builds the shards (today natsexec from the
// coordinator's shards; with distributed ingest, the workers that build
// them):
//
//   - shard.Info per shard, in shard order with ID = index: Action,
//     RowLo/RowHi, ColLo/ColHi (a column cell of shard.SplitGrid, or the
//     whole [0, n)), NNZ, Sum (Σcount in storage order), Checksum (the
//     shard object proto.ShardObject(Checksum) the workers read), Rows (its
//     rows with a nonzero) and DataTerm (its share of the data term, with
//     its row range's row totals: factor.DataTerms). The sequencer folds
//     Σx and the data term from these in shard order (Plan.Sums), which is
//     factor.Loop's sum over the blocks, bit for bit.
//   - shard.DGroup per row group of D (shard.CutDGroups: each row range's
//     present rows cut into as many groups as a range has column cells,
//     or under --tie shared-d every action's rows): DBlock, Cells (the
//     shards whose D̂ it folds, in order), Lo/Hi (first row, last + 1),
//     Rows (count) and RowsCRC, the CRC-32C of its row list as stored in
//     proto.RowsObject(job, g) (little-endian int32, ascending) by
//     whoever knows the rows.
//   - Job.Holders, optionally: the worker that already holds each shard
//     (built or cached there). Assign keeps a shard there when that costs
//     the balance at most one shard's time.
//
// NewPlan checks the metadata (ranges within the model's shape, groups
// naming shards of their D block in order, every shard with rows in a
// group) and returns one error naming the bad line. natsexec.RunOwners
// runs a Job built elsewhere (its shard objects and row lists stored by
// their builders; a builder of one row range cuts its groups with
// shard.CutRange); natsexec.FitOwners builds one from the shards a
// coordinator holds.
//
// # The decisions
//
// Plan (NewPlan): the reduce order (factor.PlanReduce over actions and
// nonzeros: the local fit's), each K block's shards, column blocks of K.
// Placement (Assign): whole actions per worker when u ≥ P, else a group
// of workers per K block, a grid p_r × p_c over column cells (GridCols);
// row groups and column blocks owned round the group. A pass (pass.go):
// every worker computes its shards in plan order, an idle one takes a
// straggler's queued shards and backs up its running task (first answer
// wins: a copy computes the same bits). Checks (check.go): a task's
// answer carries its label (job, iteration, shard, checksum, epoch),
// dimensions, finite non-negative Y, Σx and nonzeros equal to the shard
// line's; a commit's and a save's name only blocks and groups the worker
// owns. Rebalance: a worker at least twice as slow as the median is
// re-placed at a checkpoint when a placement by measured costs is
// predicted to end the pass in under 3/4 of the time. Rollback: any
// failed phase bumps the epoch, places the job on the workers admitted
// now (quarantined ones left out) from the last checkpoint, replays the
// iterations since and checks each replayed pass's scalars against the
// first; a checkpoint counts only once the record names it.
//
// # Fencing: who may move the workers
//
// Every request to a worker, end included, carries the job's epoch (≥ 1)
// and a token: 128 random bits the sequencer draws for each epoch. Before
// it sends a load of a new epoch, the sequencer writes the job's record
// with compare-and-set, and the record holds the epoch and
// proto.FenceOf(token), a SHA-256 of the token, not the token. A worker
// (worker/fence.go) refuses a request with no epoch or token, of an
// older epoch than its own, or of its epoch with another token; it takes
// up a newer epoch only from a load whose epoch and token the job's record
// names; and it ends a job only when the record still names the end's
// epoch and token. Gathers of rows carry the token, and the slices an
// epoch serves are named with a key derived from it (proto.SliceKey), so
// that no one without it can read or drop them.
//
// Why the record decides, and why it keeps a hash: a worker must not
// take up an epoch that no coordinator wrote (a forged "future" epoch
// would make it drop its blocks and refuse the real coordinator until the
// fit gave up), and the epoch alone proves nothing, since anyone who reads
// the job's record or its commit announcements knows it. Trusting the
// first load of an epoch would let a forged future load in. A token kept
// in the record in clear would be read by anyone who can read the
// bucket. Kept as a hash, the record (written only by the holder of the
// compare-and-set lease) names the one token a worker may accept, and
// whoever can only publish on the owners subjects, or read the bucket,
// changes nothing: TestOwnersForgedOperations (natsexec) sends ends,
// loads, tasks, commits, saves and gathers with missing, old, current
// and future epochs all through a fit, and the model keeps its bits
// with no rollback. A coordinator that lost the lease (another resumed
// the job: its compare-and-set write came last) can neither move nor end
// the workers, and Run does not try: it leaves them to the other
// (TestRunTakenOver, TestOwnersTakenOver). The price is one KV read per
// worker per epoch (a load re-reads the record for up to 2 s while it
// names an older epoch: a KV replica that has not caught up). What this
// does not stop: a client that can subscribe to the owners subjects sees
// the tokens of the requests it reads, and one that can write the job's
// bucket can take the job over as any coordinator can; NATS permissions
// (deploy/) keep both to the coordinators.
//
// # Storage faults
//
// The Store's errors and the workers' are classified in one place
// (worker/wire.ClassifyStore, a pure function of the error: the server's
// JetStream error codes and words). A permanent fault, a store with no
// room (the server's max_file_store, the account's limits, the bucket's
// max bytes, a disk with no space left) or JetStream disabled, ends the
// fit at once with one error that names the store, the object, how full
// the server says it is and what to do: the adapters mark their own as
// Fatal, and a worker's reply carries it (proto.Reply.Fault), so nothing
// rolls back eight times to say "insufficient resources" nor waits for
// workers that can no longer write. Anything else is transient: the
// rollback that follows backs off (Backoff: none the first time since a
// commit, then 250 ms doubling to 4 s), so a store that restarts has
// about 16 s to come back within the default 8 rollbacks.
//
// An object that fails its check when it is read (a CRC or digest that
// does not match, a wrong size, missing) is a CorruptError naming it. An
// object of the last checkpoint makes the run fall back to the checkpoint
// before (and a second one, to the start: the Model stores the initial
// model again, drawn or held, the same bits), whose placement replays the
// iterations since; a shard object is stored again from the data
// (Store.Repair: natsexec from the shards the coordinator cut), or the
// fit ends naming it and the way out when the coordinator does not hold
// the data.
//
// Why two checkpoints, and only two. Checkpoints replace each other, so
// that the store holds the data once and not one model per checkpoint
// (issue 25). Keeping only the last would leave nothing to go back to
// when it is damaged: the loads would fail the same way until the fit
// gave up. So the record names the last checkpoint and the one before
// (Record.Previous), and the objects of a checkpoint are deleted only
// once two later ones are recorded; the sequencer keeps the pass records
// since the one before, so that a fall back to it replays with every
// pass checked against its first computation. A checkpoint counts only
// once the owners wrote every object and reported its CRC and the record
// names it: the one before stays until then, so at any time at least one
// intact checkpoint is known, and the store holds at most two (plus the
// one being written), 2 × n·m·8 bytes per D and K block. Going further
// back than two brings nothing a start from the initial model does not:
// when both are damaged the run replays from checkpoint 0, which the
// Model can always store again (passes with no record left are replayed
// unchecked). The model is taken out (Model.Final) only after every
// object of the checkpoint passed its check, so a damaged last
// checkpoint found at the very end still falls back.
//
// # Admission and quarantine
//
// The Cluster's census admits a worker only once it answered a hello on
// its own owners subject with proto.Protocol (and the job bucket the
// coordinator uses), so that a stray service that answers $SRV.PING as
// an emsf worker but serves nothing is never placed. A placed worker
// whose owners subject then has no responders while it still answers
// pings (ErrUnreachable) is quarantined at once, one whose answers fail
// the checks (or cannot be read) after three: either way the rollback
// that follows places its work on the others, and it is not asked again.
package owners
