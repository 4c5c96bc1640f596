// Package worker executes tasks of a fit: the statistics of one shard under
// one model version (factor.Compute), returned as a factor.Partial.
//
// It holds the two sides a coordinator can talk to:
//
//   - Local, an in-process pool of goroutines that computes tasks on shards
//     and models held in memory (the executor of `emsf fit` without NATS
//     and of the coordinator's tests);
//   - Worker, a NATS micro service ("emsf-worker", discoverable with
//     $SRV.PING/INFO/STATS) whose "task" endpoint listens on
//     <prefix>.task in the queue group <prefix>-workers, and whose
//     "task-direct" endpoint listens on <prefix>.task.<id> (shard
//     affinity). A task message is a small JSON TaskRequest naming a shard
//     (Object Store name and checksum) and a model version (a blob the
//     coordinator serves from memory, or an Object Store name, with its
//     digest); the worker fetches each once and caches it (shards by
//     checksum for the life of the process, the model of the current
//     version only, overwritten in place), computes, and replies with the
//     Partial in Arrow IPC (arrowio.EncodePartial) when it fits in the
//     server's max payload, else serves it from memory as a raw partial
//     blob named in the reply headers (see blob.go). Every reply carries
//     the partial's proto.Label (job, iteration, shard, shard checksum, model
//     digest) in the Emsf-Partial-Of header.
//
// Model parts (parts.go): a task names, besides the whole model blob, the CRC-32C of each K block and of
// its shard's rows of D. The worker then fetches only the K block of the
// shard's action, computing while it arrives (factor.ComputeStreamed), and
// derives the shard's rows of D from the rows and statistics it kept from
// computing the same shard on the previous version (factor.CommitRow, the
// coordinator's own commit arithmetic), fetching them only when their CRC
// does not match (first iteration, a shard that moved, a shared D).
//
// The owners exchange (owners.go; protocol in wire/proto): the
// worker's "own" endpoint (<prefix>.own.<id>) loads column blocks of K
// from a checkpoint, computes a shard on rows of D it keeps and K rows it
// gathers from their owners (<prefix>.gather.<id> serves its own blocks'
// rows), commits the shard's rows of D and serves the K̂ slices, and, as
// an owner, pulls and folds its blocks' slices in the canonical order
// (factor.ColumnFold) and commits them. Its requests run on goroutines of
// their own; a load of a newer epoch cancels what the older epoch runs.
//
// Memory (docs/scaling.md, "Memory per node"): a worker holds its shards
// as the kernel's column index only (ownShardOf: no decoded copy, no
// row-major arrays), its share of the blocks and their folds, and one
// task's rows of D and K. The slices are what would pile up: a task folds
// those of its own blocks and groups at once when due (ownfold.go) and
// announces the others to their owners, which pull them while the pass
// runs (ownpull.go); the commit pulls what is left. emsf worker runs the
// collector at GOGC 25.
//
// The distributed ingest (ingest_node.go, ingest.go; messages in package
// ingestwire): IngestNode is a worker's side without transport — pass 1
// scans of splits, a mapper that routes its splits' transitions into
// (split, seq) segments in an outbox bounded in bytes, a reducer that
// pulls its segments of every split (a bounded window ahead) and counts
// them in split order with shard.Counter, the links of the cut chains,
// builders and commits; the "ingest" subscription
// (<prefix>.ingest.<job>.<id>) serves it over NATS, each request on a
// goroutine of its own. Committed shards go to the shard cache (tasks
// find them by checksum) and, when asked, to the Object Store. Datasets
// in the Object Store (dataset.go): PutDataset, ListObjectDataset,
// ScanDataFile.
//
// The protocol (subjects, headers, TaskRequest, labels, raw models and
// partials, blobs) lives in package wire, which the coordinator's NATS
// executor (coordinator/natsexec) imports too. Wire schemas of shards,
// partials and models live in arrowio.
package worker
