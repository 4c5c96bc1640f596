// Package natsexec is the coordinator's NATS side: an Executor that hands
// tasks to emsf workers (package worker) as requests to their queue group,
// a Checkpointer that keeps job state in a JetStream KV bucket, and an
// embedded NATS server for single-machine cluster runs and tests.
//
// Data plane: shards are uploaded once per job to the Object Store bucket
// as "shards/<checksum>" (skipped when an object of that name and size is
// there already, so a rerun uploads nothing) and cached by the workers.
// Each iteration's model version is served by the coordinator from memory
// as a raw model blob (wire.EncodeRawModel; CRC-32C plus a nonce as its
// digest) that workers pull in chunk requests below max payload (the
// reader sets the pace: no slow-consumer drops). Tasks also carry the
// CRC-32C of each K block and of the shard's rows of D ("model parts"): a
// worker fetches only the byte ranges its shard reads, K while it
// computes, and derives its shard's rows of D from the previous iteration
// when their CRC matches. A worker's partial too large for its reply is
// served by the worker the same way (a raw partial the coordinator reads
// in place). Nothing on an iteration's critical path
// is written to JetStream storage. The checkpoint of iteration v, the
// Arrow model file "models/<job>/<v>" with its SHA-256 digest in the job
// state, is stored in the background while iteration v+1 runs; the next
// commit waits for it, and the last commit stores before it returns. A
// version loaded by Resume is read from that object. Object Store chunks
// are as large as max payload allows (at most 1 MiB), and its Get uses an
// ordered consumer with flow control. No message exceeds the server's max
// payload. Workers of protocol 1.x (no partial labels, Object Store
// partials, chunk requests without a length) are not spoken to any more:
// their partials fail the label check.
//
// Authenticity: every partial reply carries its proto.Label (job,
// iteration, shard, the checksum of the shard computed and the digest of
// the model version computed on); the executor drops a partial whose label
// is not exactly the task's, whose transfer CRC or encoding is wrong,
// whose values fail factor.CheckPartialValues, or whose log-likelihood is
// NaN where the iteration asked for it, and reports it as the task's
// error (the coordinator hands the task out again). A worker with
// Config.QuarantineAfter such partials (default 3) is quarantined: logged
// with its id, left out of direct hand-outs, named in every task's Avoid,
// and its answers are dropped.
//
// Shard affinity: the first hand-out of shard k goes to the k-th worker of
// the last census (sorted ids) on its own subject <prefix>.task.<id>, so
// every worker gets its share each iteration and its cached shards are
// reused; a retry, or a worker that no longer answers, goes to the queue
// group. The last census is the latest of Workers' own (refreshed in the
// background every PingEvery) and a caller's Census: a caller that waited
// with Census until its workers answered hands that census to the fit.
//
// Liveness: while a task is outstanding the executor sends a $SRV.PING to
// the worker holding it every ProbeEvery (the worker of a direct hand-out,
// or the one that announces on the task's Started inbox that it took a
// queue-group hand-out); "no responders" means the worker's connection is
// gone, and the task fails at once and is handed out again instead of
// waiting for its lease.
//
// Storage faults: every write and read of the buckets that fails is
// wrapped by wire.StoreErr (storeErr): the error names the bucket and the
// object or key, and a full store (the server's or the account's limit,
// a disk with no space left) says how full the account and the bucket's
// stream are and what to do; a permanent fault is owners.Fatal, which
// ends an owners fit at once. Load compares each shard object's digest
// with the shard's bytes, not only its size, and stores a damaged one
// again; a shard that a worker finds corrupt during an owners fit is
// stored again from the shards the coordinator holds (ownersStore.Repair).
//
// Job state: the KV bucket holds one key per job (the JSON of
// coordinator.JobState). Begin takes the key's revision; every Commit is
// an Update on the revision of the previous write, so a coordinator that
// was paused while another took over the job fails instead of committing
// twice. Committed iterations are announced on <prefix>.jobs.<job>.committed.
//
// Resume points: a fit with loop state (factor.LoopState: SQUAREM, the
// held-out rule) hands it to every Commit; it is encoded and stored only
// at the job's first commit, its last, and when the fit has run
// resumeEvery (20) times the last point's cost since (Config.ResumeEvery),
// as objects models/<job>/<v>.state, .cycle and .best beside the version's
// model, which then stays until the next point (persistModel keeps it;
// dropResume removes a point's objects once a newer one is recorded).
// The record names the last point (JobState.Loop); Resume goes on from it.
//
// Files by concern: config.go (Config), exec.go (Executor, New, Close),
// storage.go (shards and model versions: Object Store and served blobs),
// census.go (which workers are alive), dispatch.go (tasks out, partials
// in, liveness probes), quarantine.go (rejected partials and quarantined
// workers), checkpoint.go (job state in KV, commits, resume),
// embedded.go and local.go (an embedded server and in-process cluster),
// owners.go (FitOwners: the owners exchange, where workers own column
// blocks of K and the coordinator only sequences: the NATS adapters of
// the sequencer in coordinator/owners, which makes every decision; see
// its comment), ingest.go (Ingest: the distributed ingest of
// coordinator/ingest over NATS, the shards built on the workers).
// Nothing here imports package worker: the protocol is worker/wire and
// worker/wire/proto, and a local cluster's workers are started by
// whoever builds one (StartLocalCluster's StartWorker).
//
// Everything above is the coordinator exchange (`fit --exchange
// coordinator`, the default): the coordinator serves each model version
// and reads back every partial, so its traffic grows with n and with the
// number of workers. FitOwners is the exchange that scales out.
package natsexec
