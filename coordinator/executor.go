package coordinator

import (
	"context"
	"time"

	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
	"github.com/emsf/emsf/worker/wire"
	"github.com/emsf/emsf/worker/wire/proto"
)

// Executor runs tasks on workers. Implementations: worker.Local (in this
// process) and natsexec.Executor (NATS workers).
type Executor interface {
	// Load makes the shards of a job available to the workers, once per
	// job. It returns the bytes it moved.
	Load(ctx context.Context, job string, shards []*shard.Shard) (int64, error)
	// Publish makes md the model that tasks of the given iteration run on.
	// The executor must not keep a reference to md past the call (the
	// coordinator commits into it). It returns the bytes it moved.
	Publish(ctx context.Context, job string, iteration int, md *factor.Model) (int64, error)
	// Submit hands a task out and returns at once; deliver is called with
	// its result, or with an error result when ctx ends first (ctx carries
	// the task's deadline). deliver may be called late; the coordinator
	// drops what it no longer needs.
	Submit(ctx context.Context, t wire.Task, deliver func(wire.Result))
	// Workers returns the number of workers alive now.
	Workers(ctx context.Context) (int, error)
}

// JobState is what a Checkpointer records after each commit.
type JobState struct {
	Job      string            `json:"job"`
	Params   map[string]string `json:"params,omitempty"`
	Manifest *shard.Manifest   `json:"manifest,omitempty"`
	// ManifestObject names where a Checkpointer keeps the manifest when it
	// is too large to keep inline.
	ManifestObject string `json:"manifest_object,omitempty"`
	// ReduceOrder and GroupNNZ name the order of the sums
	// (factor.ReduceOrder, factor.ReducePlan): a job resumes only under
	// the same order, or its bits would change mid-fit.
	ReduceOrder string `json:"reduce_order,omitempty"`
	GroupNNZ    int    `json:"group_nnz,omitempty"`
	// Iteration is the last committed iteration of the job.
	Iteration int `json:"iteration"`
	// ModelIteration is md.Iteration after that commit (it includes
	// iterations of a warm start).
	ModelIteration int `json:"model_iteration"`
	// ModelObject and ModelDigest name the committed model.
	ModelObject string    `json:"model_object,omitempty"`
	ModelDigest string    `json:"model_digest,omitempty"`
	LogLik      *float64  `json:"loglik,omitempty"` // nil when not computed
	SumX        float64   `json:"sum_x"`
	Status      string    `json:"status"`
	Updated     time.Time `json:"updated"`
	// Owners is the last checkpoint of a job of the owners exchange
	// (natsexec.FitOwners); nil for the coordinator exchange.
	Owners *OwnersCheckpoint `json:"owners,omitempty"`
	// Loop is the last resume point of a fit with acceleration or a
	// held-out rule (its loop state, factor.LoopState); nil for plain
	// EM, which resumes from the last committed model.
	Loop *LoopCheckpoint `json:"loop,omitempty"`
}

// LoopCheckpoint is where a fit with loop state (factor.LoopState) can
// resume from: a committed iteration (a resume point) whose model
// object the Checkpointer keeps, with the loop state of that iteration:
// its scalars (factor's encoding, opaque here; an object, since they grow
// with the actions) and its points as model objects, each named with its
// SHA-256 digest (hex), the points' empty where the state has none. A Checkpointer may take resume points at
// some iterations only (the points cost as much to store as the model):
// a resumed fit then redoes the iterations after the last, bitwise.
type LoopCheckpoint struct {
	Iteration      int      `json:"iteration"`
	ModelIteration int      `json:"model_iteration"`
	ModelObject    string   `json:"model_object"`
	ModelDigest    string   `json:"model_digest"`
	LogLik         *float64 `json:"loglik,omitempty"`
	SumX           float64  `json:"sum_x"`
	StateObject    string   `json:"state_object"`
	StateDigest    string   `json:"state_digest"`
	CycleObject    string   `json:"cycle_object,omitempty"`
	CycleDigest    string   `json:"cycle_digest,omitempty"`
	BestObject     string   `json:"best_object,omitempty"`
	BestDigest     string   `json:"best_digest,omitempty"`
}

// OwnersCheckpoint is where a job of the owners exchange can go on from:
// the model version whose column blocks and row groups of D are stored
// as objects (proto.KObject, proto.DObject; DCRC by group) with
// these CRCs,
// and the epoch last used (a resumed or rolled back job takes the next:
// workers refuse requests of older epochs).
type OwnersCheckpoint struct {
	Version int `json:"version"`
	// Lease is the epoch placed last and the fence of its token (the
	// JSON keys "epoch" and "fence"): workers take up an epoch, and end
	// a job, only when this record names it (proto.Lease).
	proto.Lease
	ColBlocks int        `json:"col_blocks"`
	KCRC      [][]string `json:"k_crc,omitempty"`
	DCRC      []string   `json:"d_crc,omitempty"`
	// CRCObject, when set, names the Object Store object that holds KCRC
	// and DCRC (JSON {"k_crc", "d_crc"}): they grow with the column blocks
	// and row groups and change only at checkpoints, so the commit record
	// written every iteration names them instead of carrying them.
	CRCObject string `json:"crc_object,omitempty"`
	// LogLik and ModelIteration are the model's at Version (the loop
	// goes on from them).
	LogLik         *float64 `json:"loglik,omitempty"`
	ModelIteration int      `json:"model_iteration"`
	// The commit record of the last committed iteration (JobState.
	// Iteration): each owner's digest of its committed blocks (the
	// CRC-32C of their CRCs) by worker, and the global Y by K block.
	Digests map[string]string `json:"digests,omitempty"`
	Y       [][]float64       `json:"y,omitempty"`
	// Previous is the checkpoint before Version, whose objects are kept
	// (a run falls back to it when one of the last fails its check); its
	// CRC lists are in the object proto.CRCObject(job, its version).
	Previous *OwnersPrevious `json:"previous,omitempty"`
}

// OwnersPrevious is the checkpoint before the last (OwnersCheckpoint).
type OwnersPrevious struct {
	Version        int        `json:"version"`
	LogLik         *float64   `json:"loglik,omitempty"`
	ModelIteration int        `json:"model_iteration"`
	KCRC           [][]string `json:"-"`
	DCRC           []string   `json:"-"`
}

// Checkpointer records job state durably. Begin is called once before the
// first iteration, Commit after every committed iteration (md is the new
// model; st.Iteration says which; ls the loop's state beyond md, or nil:
// its points are valid only during the call). Commit must fail when
// another coordinator committed the job since this one's last call.
type Checkpointer interface {
	Begin(ctx context.Context, st *JobState) error
	Commit(ctx context.Context, st *JobState, md *factor.Model, ls *factor.LoopState) error
}
