// Package wire is the cluster protocol of emsf: the messages the
// coordinator (coordinator/natsexec) and the workers (package worker)
// exchange over NATS, their encodings and the chunked pulls of blobs. Both
// sides import it; nothing else defines a subject, header or message. Its
// part that needs no connection (the owners exchange's messages, partial
// labels, object names) is package wire/proto, which the coordinator's
// decisions (coordinator/owners) speak without NATS.
//
// # Version
//
// ServiceVersion, announced by every worker in its micro service info, is
// 2.0.0. Changes from 1.1: every partial reply carries its Label; a partial
// too large for the reply is always a raw partial blob (no Object Store
// partials, no partials bucket); every blob chunk request names its
// length. Workers of 1.x are not spoken to: their partials fail the label
// check and they are quarantined.
//
// # Subjects (prefix P, default "emsf")
//
//   - P.task: tasks, to the workers' queue group QueueGroup(P) ("P-workers",
//     the prefix's dots made '_'); P.task.<id>: tasks for worker <id> only
//     (shard affinity). Request: the JSON of a TaskRequest. Reply: the
//     partial in Arrow IPC (arrowio.EncodePartial) in the body, or an empty
//     body with HeaderBlob, HeaderBlobSize and HeaderBlobCRC naming a raw
//     partial blob (EncodeRawPartial) the worker serves; either way
//     HeaderPartialOf is the partial's Label, HeaderWorker the worker's id,
//     and HeaderComputeNanos, HeaderModelNanos, HeaderEncodeNanos,
//     HeaderFetchBytes its timings and bytes. An error reply is micro's
//     (Nats-Service-Error-Code CodeDeclined, CodeExpired or CodeFailed).
//   - TaskRequest.Started (an inbox): the worker that takes a queue-group
//     task publishes its id there first, so that the coordinator can probe
//     it with $SRV.PING.emsf-worker.<id>.
//   - P.blob.<id>.<name>: blob <name> held in memory by process <id>
//     (BlobServer): the coordinator's raw model of the iteration
//     (EncodeRawModel), a worker's raw partial. Request body "off,len" (at
//     most BlobChunk, below the server's max payload); reply the bytes, or
//     an empty body with HeaderBlobError. Body "drop" (no reply): the
//     reader has the blob, the owner may forget it. FetchBlob and
//     FetchBlobRange pull with a window of requests in flight; the reader
//     sets the pace.
//   - P.jobs.<job>.committed: the job state (JSON) of each committed
//     iteration.
//   - $SRV.PING/INFO/STATS.emsf-worker: discovery (micro), metadata
//     "prefix" = P.
//
// # Messages
//
// Task and Result are the coordinator's view of a task and its answer
// (coordinator.Executor speaks them); TaskRequest is a task on the wire:
// the shard (Object Store name ShardObject(checksum) and checksum), the
// model version (served blob, size, digest RawDigest, or an Object Store
// Arrow file ModelObject(job, v) with its SHA-256), the model parts (the
// CRC-32C of each K block and of the shard's rows of D, so that a worker
// pulls only what its shard reads and derives its rows of D), deadline,
// attempt and the workers to avoid. A proto.Label names what a partial answers
// and what it was computed from: job, iteration, shard, shard checksum,
// model digest; the coordinator drops a partial whose label is not exactly
// its task's.
//
// # Buckets
//
// DefaultObjectBucket (Object Store: shards, Arrow models for resume,
// manifests; chunks of at most MaxChunk below the max payload, PutObject)
// and DefaultKVBucket (KV: one job state per job, committed with
// compare-and-set on the revision). A model dataset (arrowio: parts and a
// manifest) can live under a prefix of any bucket, nats-obj://BUCKET/PREFIX:
// ObjectParts is its arrowio.PartSink and PartSource (part F is object
// PREFIX/F, put as it is written; the manifest's put is the commit).
package wire
