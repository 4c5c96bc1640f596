// Package natsexec is the coordinator's NATS side: an Executor that hands
// tasks to emsf workers (package worker) as requests to their queue group,
// a Checkpointer that keeps job state in a JetStream KV bucket, and an
// embedded NATS server for single-machine cluster runs and tests.
//
// Data plane: shards are uploaded once per job to the Object Store bucket
// as "shards/<checksum>" (skipped when an object of that name and size is
// there already, so a rerun uploads nothing) and cached by the workers.
// Each iteration's model version is served by the coordinator from memory
// as a raw model blob (worker.EncodeRawModel; CRC-32C plus a nonce as its
// digest) that workers pull in chunk requests below max payload (the
// reader sets the pace: no slow-consumer drops). Tasks also carry the
// CRC-32C of each K block and of the shard's rows of D (worker protocol
// 1.1, "model parts"): a worker fetches only the byte ranges its shard
// reads, K while it computes, and derives its shard's rows of D from the
// previous iteration when their CRC matches; a 1.0 worker ignores them
// and pulls the whole blob. A worker's partial too
// large for its reply is served by the worker the same way (a raw partial
// the coordinator reads in place). Nothing on an iteration's critical path
// is written to JetStream storage. The checkpoint of iteration v, the
// Arrow model file "models/<job>/<v>" with its SHA-256 digest in the job
// state, is stored in the background while iteration v+1 runs; the next
// commit waits for it, and the last commit stores before it returns. A
// version loaded by Resume is read from that object. Object Store chunks
// are as large as max payload allows (at most 1 MiB), and its Get uses an
// ordered consumer with flow control. With an older worker protocol,
// large partials still go through "partials/..." objects in a memory
// bucket. No message exceeds the server's max payload.
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
// Job state: the KV bucket holds one key per job (the JSON of
// coordinator.JobState). Begin takes the key's revision; every Commit is
// an Update on the revision of the previous write, so a coordinator that
// was paused while another took over the job fails instead of committing
// twice. Committed iterations are announced on <prefix>.jobs.<job>.committed.
package natsexec
