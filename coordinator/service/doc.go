// Package service is emsf's service mode (DESIGN.md §6): a long-running
// process that owns one model name, counts the transitions that arrive on
// a JetStream stream, retrains when asked or when a policy says so, and
// publishes versioned models that agents fetch.
//
// # Names
//
// For model NAME under subject prefix P (default "emsf"):
//
//	P.NAME.transitions   stream subject: payloads are CSV (header state,
//	                     action, next_state[, count]) or Arrow IPC (stream
//	                     or file) with those columns; header Emsf-Format
//	                     (csv, arrow, arrows) overrides detection
//	P.NAME.retrain       request: retrain once ingestion reached the stream's
//	                     last sequence (or RetrainRequest's after_seq); the
//	                     reply is a Version (JSON) or a micro error
//	P.NAME.status        request: the service's Status (JSON)
//	P.NAME.model         announcements: one Version (JSON) per new version
//
// The stream is StreamName(P, NAME) (file storage, created by the service
// or by the first publisher). Both request subjects are endpoints of a
// nats.go micro service named "emsf-serve", so `nats micro ls` lists it.
// Model versions are Arrow model files (arrowio.EncodeModel) in the Object
// Store bucket ModelBucket as "NAME/models/<version>", and the KV bucket
// StateBucket holds "NAME.latest", the Version JSON of the newest one.
//
// # Exactly once
//
// The service's state is a count table (shard.Table: one entry per
// distinct transition, total count and the part no version has seen yet)
// plus the stream sequence S of the last message it includes. Both are
// written together, as one Arrow file (arrowio.WriteCounts) with S and
// the latest version number in its metadata, to the object "NAME/state":
// every CheckpointEvery while data arrives (at least CheckpointCost times
// as long as the last checkpoint took, so that checkpoints of a large
// table take a bounded share of the time), after every new version and
// at shutdown. The file is streamed into the Object Store as it is
// encoded, never whole in memory. An Object Store put becomes visible
// only when its last chunk and the meta message are stored, so a crash
// leaves the old checkpoint or the new one, never a mix. A restarted
// service loads it and consumes the stream from S+1 with an ordered
// consumer, so every message is counted exactly once: those up to S are
// in the table, those after are replayed. A message is applied whole (all
// its accepted rows) or not at all, so a crash between two messages is
// the only kind there is. Each total is the sum of its counts in stream
// order (shard.Table), so a replay gives the bits an uninterrupted run
// gives, whatever the counts.
//
// A vocabulary (string ids, specs/ask-the-model.md §2.3; ids.go) is in
// the same object, so that ids and counts are those of one sequence: the
// service keeps it beside the table (not in it: it grows append-only in
// stream order, while the table is sorted), storeCheckpoint gives
// arrowio.WriteCounts its rows after the count rows, and load reads them
// back with the table (docs/formats.md, "Counts checkpoint").
//
// # Storage that stops growing
//
// Once a checkpoint holding the counts up to S is stored, the stream's
// messages up to S are purged (StreamPurge, default PurgeCheckpointed;
// StreamKeep messages below S are kept as a margin): the stream holds
// what no checkpoint holds yet, bounded by the ingest rate times the
// checkpoint interval. Nothing is lost to a kill -9: of the service,
// because the purge follows the stored checkpoint (a crash between the two
// leaves messages the next checkpoint purges); of the server, because
// JetStream acknowledged the checkpoint's put before the purge was asked
// (a server that loses acknowledged writes in an OS crash needs
// sync_interval: always, which the embedded server sets). Read your
// writes is unchanged: purging keeps the stream's last sequence. Since the
// checkpoint is then the only copy of what it holds, a service whose
// checkpoint is missing or unusable over a purged stream does not start
// (it names the problem) instead of counting what is left. The
// checkpoint is one object, replaced at every write (the Object Store
// purges the old chunks), and the model versions beyond the last
// KeepVersions (default DefaultKeepVersions) are deleted as each new one
// is made: the Object Store stops growing too. (A refit on the cluster's
// workers stores its shards in the executor's bucket; those are
// natsexec's to collect.)
//
// # Memory
//
// The count table holds 20 bytes a distinct transition and 12 a row of
// an action (the fit's CSR: 12 and 12) outside the Go heap, plus a buffer
// of rows not merged yet (8 bytes a row with unit counts, 16 otherwise;
// BufferRows or a sixteenth of the distinct transitions): at most twice
// the CSR plus a fixed amount (measured in docs/benchmarks.md, soak). A
// retrain reads the counts in place (shard.Table.Freeze: the refit's
// shards alias the table) while ingestion goes on into the buffer; when
// the buffer is full during a long fit, ingestion waits (Status.Paused)
// and the messages wait in the stream, so memory stays bounded. The fit's
// own working memory (the model, factor's column index of the shards) is
// not the table's.
//
// # Stopping
//
// When Run's context ends (emsf serve: SIGINT or SIGTERM), the service
// stops taking requests and messages (those not counted stay in the
// stream), refuses the retrain requests it holds with code 503 (the one
// running, those queued behind it and those waiting for a sequence),
// cancels the fit in progress and waits for it (a refit sees it within an
// iteration; its counts stay pending), then writes the last checkpoint and
// purges, each with a context of its own bounded by StopTimeout: a stop is
// never an error, and a checkpoint or a version being stored when the stop
// comes is finished, not cut off.
//
// A new version is made in this order: the model object is stored, then
// the checkpoint (the version number recorded; pending, the counts that
// arrived during the fit), and only then the service's state changes;
// then NAME.latest (compare-and-set on its revision: a second service that
// took the name over makes this one stop), then the announcement. A crash
// after the checkpoint is repaired at start-up (NAME.latest is re-written
// and announced); a crash before it leaves an unrecorded model object that
// the next version of that number overwrites.
//
// # Retraining
//
// Mode refit runs batch EM (factor.Fit, or coordinator.Fit on the
// cluster's workers when emsf workers answer on the connection) over all
// counts, warm-started from the latest version; the shard layout is
// shard.Split's, so the two give bitwise the same model. With
// Config.Quality (emsf serve's default: DefaultQuality, emsf fit's
// defaults) it estimates as emsf fit does: shard.SplitCounts holds a
// fraction of every count out, unit by unit from a stream of the entry's
// own seeded by Seed, so a retrain of the same counts splits them alike
// and a count that grows keeps the sides of its units (emsf fit splits
// its input's rows; a count table has none). The refit runs on the rest:
// the first version from factor.NewSeeded, MAP-EM (Quality.Prior) with
// the held-out stopping rule on the split (Validation.EarlyStop; the
// coordinator holds the model, so on workers too, bitwise); rows without
// counts get the marginal (SetUnseenRows), and the rule tuned on the
// split is stored with all the counts (NewSmoothing), so queries answer
// with it. The version records how the refit ended, the iterate kept,
// the validation score and the rule. Mode incremental
// commits the counts that arrived since the latest version with learning
// rate Alpha (one commit of factor.Incremental): old data is not revisited.
// Mode online-em feeds them to online EM (factor.OnlineEM with
// Config.OnlineEM; online-em-nmf_003, related-methods spec §2.7), in the
// count table's (action, state, next) order, each count c as c unit
// transitions (so counts must be integers: ingestion rejects the others
// in this mode). Its state is the latest version's model and its step
// counter t, stored as Version.Units; the running statistics are not
// stored but re-derived at every retrain by factor.ResumeOnlineEM: the
// version's rows scaled by their shares of the counts that version saw
// (the spec's parameter-averaging equivalence; the row masses are the
// ones γ_t = 1/t gives). A version is therefore a function of stored
// state only (previous version, Units, the checkpointed counts; a version
// of another mode has Units 0, and online EM starts at t = 0 from it): a
// restarted service makes bitwise the versions a running one makes. It is
// not bitwise one uninterrupted online EM pass (`emsf fit --incremental
// --online-em`) over the same stream: that one keeps its own row masses
// (recency-weighted when a < 1) and sees the arrival order, and each
// retrain applies the floor once more to rows no new count touches (they
// move by at most the floor). The floor must be > 0 here: with 0, a
// transition the model gives probability 0 would fail the retrain and,
// staying pending, every later one.
// The first version starts from factor.NewRandom with Seed (from
// factor.NewSeeded with Quality.Seeded); later ones
// from the latest version, grown if needed and mixed with the uniform
// distribution with weight WarmSmoothing (factor.Model.Smooth), so that a
// transition the latest version gives probability 0 can still be learnt.
//
// Transitions reaching states or actions the latest version does not have
// grow it (factor.Model.Grow documents how the new rows start), unless
// States or Actions fix the size: then such rows are rejected, counted in
// emsf_serve_transitions_rejected_total and reported (log and Status),
// and the rest of the message is kept. A payload that cannot be read at
// all is rejected whole (emsf_serve_messages_rejected_total).
//
// # Limits
//
// Nothing accepted can make a derived quantity infinite or a model
// unallocatable: a row is rejected (as above, with its reason) when its
// state or action is at or beyond MaxStates or MaxActions, when the model
// it would grow to exceeds MaxModelBytes (ModelBytes), or when its count
// would take the total above shard.MaxCount (2^53). A checkpoint that
// cannot be decoded or breaks the limits (only an older service can have
// written one) is not used: the counts are rebuilt from the whole stream.
//
// # Growing past one machine (design, not built)
//
// One process holds 20 bytes a distinct transition: 10^9 of them take
// 20 GB, and a refit's column index (factor) 16 GB more. Past one machine
// the counts are split over P service processes, the partitions of the
// model name, by (action, state range):
//
//   - The map. Fixed when the name is created and kept in KV
//     (NAME.partitions, written with wire.CompareAndSet): each action gets
//     a group of partitions (P/u of them when P > u; whole actions per
//     partition otherwise) and the group's states are cut into ranges. A
//     partition holds whole rows: the CSR rows its shards need and the D
//     rows it updates.
//   - Routing. NATS subject mapping routes by subject, not by a payload's
//     rows, so the cut is the publisher's: emsf publish (PublishFile)
//     splits each batch by (action, state) and sends part p to
//     P.NAME.transitions.<p> with header Emsf-Partition: <p>/<P>/<map
//     revision>; the stream's subjects become P.NAME.transitions.>. A
//     partition rejects rows outside its range like rows outside the
//     model's size. A client that cannot cut sends to P.NAME.transitions
//     and a router (one more consumer, stateless) cuts for it.
//   - Exactly once, per partition. Partition p consumes its subject with an
//     ordered consumer filtered on it; its checkpoint NAME/state/<p> holds
//     its counts and the last sequence of its subject it includes, and its
//     purge names its subject (JetStream purge by subject and sequence).
//     Partitions ingest independently: the ingest rate grows with P.
//   - Retrain. A coordinator (the partition 0 process) takes a retrain
//     request, reads each subject's last sequence (read your writes per
//     partition), asks every partition to Freeze once it has counted that
//     far, and runs the owners exchange (DESIGN.md §5.2) with the
//     partitions as its workers: a partition's frozen blocks are its
//     shards (shard.Split over its rows), its D rows are its own, the K
//     column blocks of an action are owned within its group; only K
//     columns and K̂ slices move, never counts, and the coordinator folds
//     m-vectors and scalars. The version is written in parts by the owners
//     with a manifest (§5.3). The shard layout is a function of the data and
//     the map: for a fixed map a version is bitwise the same whatever the
//     placement or failures (invariant 4); it is the one-process version
//     only when the map is one range.
//   - Changing the map happens at a version boundary: a partition that
//     gives a range away checkpoints it as its own object, the one that
//     takes it loads it, and publishers switch subjects when the map's
//     revision changes.
//
// What it costs per EM iteration at 10^9 transitions (the cost model,
// design B grouped: `emsf scaling --states 10000000 --actions 10 --order
// 32 --nnz 1e9 --nodes 1,4,16,64 --ns-per-nnz 150 --cores 16`): P = 1,
// 9.4 s of compute and nothing moves; P = 4, 2.8 s, nothing moves (whole
// actions per partition); P = 16, 0.59 s of compute and 1.9 GB in and out
// per node, 1.5 s an iteration at 10 Gbit/s (0.59 s at 100); P = 64,
// 0.15 s and 3.4 GB, 2.7 s at 10 Gbit/s (0.27 s at 100). Gathering the
// counts in one process instead (the star, design A) would move 26 GB
// per node and 100–1600 GB through the coordinator per iteration. Counts
// per partition: 20·10^9/P bytes (1.25 GB at P = 16).
//
// # Read your writes
//
// A retrain request is answered with a version that includes every
// message up to a stream sequence: RetrainRequest.AfterSeq, or the
// stream's last sequence when the request arrives. The request waits
// (parked, Status.CatchingUp) until ingestion reaches it, at most
// RetrainRequest.Wait (default DefaultCatchUpWait), then fails with code
// 504 naming the sequences. PublishFile returns the last sequence it
// reached.
//
// Ingestion, checkpoints and the service's state belong to one goroutine;
// a fit runs on a goroutine of its own, on a frozen view of the counts
// taken when it starts (shard.Table.Freeze), so ingestion goes on during
// a long refit. When it ends, the counts that arrived meanwhile become the
// pending ones, exactly as if they had arrived after it. One fit runs at a
// time: retrain requests that come during it are answered when it ends,
// with a further version when data arrived meanwhile. The retrain policy
// (Config.Policy: every N transitions, every T when any arrived) is one
// value whose Due decides, asked after each message, at each tick and
// when a fit ends. Status requests are answered at once from a snapshot
// of the Status taken after every event.
package service
