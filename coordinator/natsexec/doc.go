// Package natsexec is the coordinator's NATS side: an Executor that hands
// tasks to emsf workers (package worker) as requests to their queue group,
// a Checkpointer that keeps job state in a JetStream KV bucket, and an
// embedded NATS server for single-machine cluster runs and tests.
//
// Data plane: shards are uploaded once per job to the Object Store bucket
// as "shards/<checksum>" (skipped when an object of that name and size is
// there already, so a rerun uploads nothing); the model each iteration
// runs on is stored once as "models/<job>/<v>" (v = committed iterations
// of the job; the object written by the checkpoint of iteration v is the
// one iteration v+1 runs on) and named in every task with its SHA-256
// digest; partials come back inline, or, when they exceed the server's
// max payload, through "partials/..." objects in a separate bucket with
// memory storage (they live for one iteration: the coordinator deletes each
// after reading it, and a TTL removes what a crash left behind). The Object Store chunks
// objects (128 KiB) and checks their digest; its Get uses an ordered
// consumer with flow control, so large transfers are not dropped as slow
// consumers. No message exceeds the server's max payload.
//
// Job state: the KV bucket holds one key per job (the JSON of
// coordinator.JobState). Begin takes the key's revision; every Commit is
// an Update on the revision of the previous write, so a coordinator that
// was paused while another took over the job fails instead of committing
// twice. Committed iterations are announced on <prefix>.jobs.<job>.committed.
package natsexec
