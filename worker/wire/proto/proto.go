// Package proto is the part of emsf's cluster protocol that needs no
// connection: the messages of the owners exchange (Request, Reply and
// their parts), the partial labels of both exchanges, the names of the
// objects the owners exchange stores, and the fence that ties every
// owners operation to the job's current epoch. Package wire carries them
// over NATS (subjects, headers, blobs); the coordinator's decisions
// (coordinator/owners) and the workers speak them, and the tests of those
// decisions drive fake workers with them, with nothing running.
//
// # The owners exchange
//
// `emsf fit --exchange owners`: the coordinator only sequences. Every
// column block of every K block has an owner worker that holds its rows
// of K^T and folds its K̂; every row group of D (a shard, or the column
// cells of one row range: shard.SplitGrid) has an owner that holds its
// rows of D and folds its D̂. A worker is admitted to a job only after it
// answers a hello (OpHello) on its own owners subject with this
// package's Protocol. Once per epoch:
//
//  0. load (coordinator → every worker): the worker's column blocks and
//     row groups (read from a checkpoint) and the epoch's layout (column
//     blocks, row groups and their owners, each K block's shards and
//     their workers).
//
// Per iteration:
//
//  1. task (coordinator → the shard's worker): the worker gathers the
//     rows of D and K its shard reads from their owners (its own
//     directly), computes the partial, serves its D̂ slice and the K̂
//     slice of every column block as blobs and answers with the small
//     Reply (label, Y, Σx, loglik, nonzeros). A slice of a block or group
//     the task's worker owns itself is folded there at once when its fold
//     is due at that shard, and not served; for each K̂ slice it serves,
//     the worker tells the block's owner (wire.ReadySubject, a hint),
//     which pulls and folds the slices that are due while the pass runs,
//     so that slices do not pile up until the commit (worker/ownfold.go,
//     ownpull.go);
//  2. the coordinator folds Y and the scalars in the canonical order and
//     checks Σx;
//  3. commit (coordinator → each owner): the owner pulls its blocks' and
//     groups' slices from the workers the layout names, folds them in the
//     canonical order (factor.ColumnFold for K̂; a group's D̂ left to
//     right over its cells), commits its columns with the global Y
//     (factor.CommitKRows) and its rows (factor.CommitRow), and answers
//     with one digest of their CRCs (the CRCs themselves in checkpoint
//     commits). Checkpoints replace each other: once the job's record
//     names a new one, the coordinator deletes the objects of the one
//     before.
//
// Nothing in the coordinator's messages grows with the number of states
// n or of column blocks: per iteration they carry m-vectors, scalars and
// CRCs, one task per shard and one commit per owner. Checkpoints (every k
// iterations, and the last) are objects written by the owners (KObject,
// DObject); after a fault every worker reloads what the new placement
// gives it from the last checkpoint and the coordinator replays the
// iterations since, which gives the same bits (every sum's order is the
// plan's).
//
// # Fencing
//
// Every request of a job, end included, carries the job's epoch (≥ 1)
// and the epoch's token (Request.Fence, a random secret the coordinator
// draws for each epoch). The job record in the KV bucket carries the
// epoch and FenceOf(token) (a SHA-256: the record does not reveal the
// token). A worker refuses a request of an older epoch than its own, of
// its epoch with another token, and of no epoch; it takes up a newer
// epoch only from a load whose epoch and token the job record names, and
// ends a job only when the record still names the epoch and token of the
// end: only the coordinator that holds the job's compare-and-set lease
// (the last writer of the record) moves or ends its workers. See
// coordinator/owners for why.
package proto

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
)

// Protocol is the version of the owners exchange this package speaks: a
// worker answers hello with it and the coordinator admits only workers of
// its own. 2: every request is fenced (epoch ≥ 1 and token), hello. 3: a
// task carries a nonce its answer's label repeats (Label.Nonce), and
// ready notices name row groups too (D̂ slices pulled early). 4: a task's
// answer carries the digest of its partial (Reply.Out), and a task may be
// a verification (Request.Verify: computed, folded and served nowhere).
const Protocol = 4

// Operations of a Request.
const (
	OpHello  = "hello"
	OpLoad   = "load"
	OpTask   = "task"
	OpCommit = "commit"
	OpSave   = "save"
	OpEnd    = "end"
)

// Ops lists every operation.
var Ops = []string{OpHello, OpLoad, OpTask, OpCommit, OpSave, OpEnd}

// ShardObject is the object name of a shard, by checksum (both
// exchanges).
func ShardObject(checksum string) string { return "shards/" + checksum }

// VocabObject is the object name of range r of the vocabulary of id
// group g (0 states, 1 actions) that epoch of ingest job's vocabulary
// phase built: its ids in order, each as its length (uvarint) and its
// UTF-8 bytes (ingestwire.AppendIDs). (Epochs cut other ranges: a late
// write of an older epoch never replaces a newer one's.)
func VocabObject(job string, epoch, g, r int) string {
	return "ids/" + job + "/" + strconv.Itoa(epoch) + "/" + strconv.Itoa(g) + "/" + strconv.Itoa(r)
}

// CRCLists is the object CRCObject: a checkpoint's CRC lists.
type CRCLists struct {
	KCRC [][]string `json:"k_crc"`
	DCRC []string   `json:"d_crc"`
}

// KObject is the object name of column block c of K block kb at model
// version v of a job: its rows of K^T, raw little-endian float64.
func KObject(job string, v, kb, c int) string {
	return "owners/" + job + "/" + strconv.Itoa(v) + "/k/" + strconv.Itoa(kb) + "/" + strconv.Itoa(c)
}

// DObject is the object name of row group g's rows of D (the rows of its
// RowsObject in order, m values each, raw little-endian float64) at
// version v.
func DObject(job string, v, g int) string {
	return "owners/" + job + "/" + strconv.Itoa(v) + "/d/" + strconv.Itoa(g)
}

// RowsObject is the object name of row group g's row list (the rows of D
// it holds, ascending, little-endian int32), written by whoever knows the
// rows (today the coordinator when the job starts or resumes).
func RowsObject(job string, g int) string {
	return "owners/" + job + "/rows/" + strconv.Itoa(g)
}

// CRCObject is the object name of the CRC lists of checkpoint v (JSON
// {"k_crc", "d_crc"}), which the job record names.
func CRCObject(job string, v int) string {
	return "owners/" + job + "/" + strconv.Itoa(v) + "/crcs"
}

// Digest is the model digest a partial of the owners exchange is
// labelled with: the version is the task's iteration − 1 of that epoch
// (every K row and D row it read was checked against the version's CRC or
// served by the owner of that version).
func Digest(epoch int) string { return "owners-e" + strconv.Itoa(epoch) }

// ColBlock is one column block [Lo, Hi) of K block KBlock, with its owner
// and the CRC-32C of its rows at the version in question.
type ColBlock struct {
	KBlock int    `json:"kblock"`
	C      int    `json:"c"`
	Lo     int    `json:"lo"`
	Hi     int    `json:"hi"`
	Owner  string `json:"owner"`
	CRC    string `json:"crc,omitempty"`
}

// KShape is one K block's shards in block order, with their nonzero
// counts (what an owner's fold needs) and the worker that computes each
// in the epoch (where the owner pulls their K̂ slices).
type KShape struct {
	KBlock  int      `json:"kblock"`
	Shards  []int    `json:"shards"`
	NNZ     []int    `json:"nnz"`
	Workers []string `json:"workers"`
}

// RowGroup is row group G of D: rows in [Lo, Hi) of D block Action (the
// action; 0 under --tie shared-d), whose D̂ is summed over the shards
// Cells (the shards or column cells of one row range: shard.SplitGrid;
// under shared-d every action's shards that meet the rows) in order;
// with its owner worker, the CRC-32C of its rows of D at the version in
// question (CRC) and of its row list (RowsCRC, RowsObject). The owner
// holds the group's rows of D, serves them to the workers of its cells
// and folds and commits the cells' D̂ slices in cell order.
type RowGroup struct {
	G       int    `json:"g"`
	Action  int    `json:"action"`
	Lo      int    `json:"lo,omitempty"`
	Hi      int    `json:"hi,omitempty"`
	Cells   []int  `json:"cells,omitempty"`
	Owner   string `json:"owner,omitempty"`
	CRC     string `json:"crc,omitempty"`
	RowsCRC string `json:"rows_crc,omitempty"`
}

// KBlockY is the global Y of one K block.
type KBlockY struct {
	KBlock int       `json:"kblock"`
	Y      []float64 `json:"y"`
}

// ShardWorker names the worker that serves a shard's slices.
type ShardWorker struct {
	Shard  int    `json:"shard"`
	Worker string `json:"worker"`
}

// Request is a request of the owners exchange. Iteration is, for a task,
// the iteration computed (on version Iteration−1); for a commit, the
// version committed; for a load or save, the version loaded or saved.
type Request struct {
	Op  string `json:"op"`
	Job string `json:"job"`
	// Epoch and Fence fence the request (see the package doc): the
	// job's epoch (≥ 1) and the epoch's token.
	Epoch int    `json:"epoch"`
	Fence string `json:"fence,omitempty"`
	// JobsBucket is the KV bucket of the coordinator's job record (a
	// worker proves epochs against its own, and says so when they
	// differ).
	JobsBucket string  `json:"jobs_bucket,omitempty"`
	Iteration  int     `json:"iteration"`
	Bucket     string  `json:"bucket"`
	N          int     `json:"n"`
	M          int     `json:"m"`
	U          int     `json:"u"`
	Tie        string  `json:"tie"`
	GroupNNZ   int     `json:"group_nnz"`
	Alpha      float64 `json:"alpha"`
	// Precision is the model's (factor.Precision; "" is float64): owners
	// of a float32 model round what they commit.
	Precision string `json:"precision,omitempty"`
	// Deadline is when the coordinator stops waiting (Unix nanoseconds).
	Deadline int64 `json:"deadline"`

	// load: the blocks this worker owns from now on (loaded from
	// KObject of version Iteration), every K block's column blocks with
	// their owners (Layout[kblock][c]) and shards (Shapes): the epoch's
	// placement, fixed until the next load. save: the blocks to store at
	// version Iteration.
	Blocks []ColBlock   `json:"blocks,omitempty"`
	Layout [][]ColBlock `json:"layout,omitempty"`
	Shapes []KShape     `json:"shapes,omitempty"`

	// Groups: in a load, every row group of D with its owner and its
	// CRC at version Iteration (the epoch's placement, as Layout is for
	// K); in a save, the groups to store at version Iteration.
	Groups []RowGroup `json:"groups,omitempty"`

	// task: the shard, and where it is.
	Shard         int    `json:"shard"`
	ShardObject   string `json:"shard_object,omitempty"`
	ShardChecksum string `json:"shard_checksum,omitempty"`
	WithLogLik    bool   `json:"with_loglik,omitempty"`
	// Nonce is the task's (Label.Nonce), which its answer repeats.
	Nonce string `json:"nonce,omitempty"`
	// Verify asks for the task's answer only (owners.Options.Verify):
	// the worker computes the partial and answers with its digest, but
	// folds none of it into the blocks and groups it owns, serves no
	// slice and announces nothing.
	Verify bool `json:"verify,omitempty"`

	// commit: the global Y of the owner's K blocks, whether to store the
	// committed blocks, and the shards whose slices another worker than
	// the layout's serves this iteration (a backup copy won).
	Y     []KBlockY     `json:"y,omitempty"`
	Save  bool          `json:"save,omitempty"`
	Moved []ShardWorker `json:"moved,omitempty"`
}

// Reply answers a Request (Error set: it failed).
type Reply struct {
	Error  string `json:"error,omitempty"`
	Worker string `json:"worker"`
	// Fault classes Error when the coordinator must act on it (Fault*);
	// Object names the object of a FaultCorrupt.
	Fault  string `json:"fault,omitempty"`
	Object string `json:"object,omitempty"`
	// hello: the owners protocol the worker speaks (Protocol) and the KV
	// bucket it proves epochs against.
	Protocol   int    `json:"protocol,omitempty"`
	JobsBucket string `json:"jobs_bucket,omitempty"`
	// task.
	Label     string    `json:"label,omitempty"`
	Y         []float64 `json:"y,omitempty"`
	SumX      float64   `json:"sum_x,omitempty"`
	LogLik    float64   `json:"loglik,omitempty"`
	HasLogLik bool      `json:"has_loglik,omitempty"`
	NNZ       int       `json:"nnz,omitempty"`
	// Out is the digest of the task's whole partial (wire.PartialDigest:
	// D̂, x, K̂ and their indices), which two workers computing the same
	// task give bit for bit.
	Out string `json:"out,omitempty"`
	// Nanoseconds spent gathering K and computing.
	GatherNanos  int64 `json:"gather_ns,omitempty"`
	ComputeNanos int64 `json:"compute_ns,omitempty"`
	// commit: Digest is the CRC-32C of the committed blocks' CRCs (in
	// K block and column block order) and then of the committed row
	// groups' (in group order); Blocks and Groups, in a commit that
	// stores a checkpoint, the blocks and groups with their CRCs (so the
	// coordinator's bytes per iteration do not grow with the number of
	// column blocks). save: the blocks and groups stored, with their
	// CRCs.
	Digest string     `json:"digest,omitempty"`
	Blocks []ColBlock `json:"blocks,omitempty"`
	Groups []RowGroup `json:"groups,omitempty"`
}

// Lease is the fence of a job's epoch as the job record (KV) holds it:
// the epoch and FenceOf its token.
type Lease struct {
	Epoch int    `json:"epoch"`
	Fence string `json:"fence,omitempty"`
}

// NewToken draws an epoch's token: 128 random bits.
func NewToken() string { return rand.Text() }

// FenceOf is what the job record holds of token: its SHA-256 in hex.
func FenceOf(token string) string {
	sum := sha256.Sum256([]byte("emsf-owners-fence\x00" + token))
	return hex.EncodeToString(sum[:])
}

// SliceKey is the key in the names of the slices served in the epoch
// of token (wire.SliceName): derived from the token, not from its fence,
// so that the job's record does not reveal it.
func SliceKey(token string) string {
	sum := sha256.Sum256([]byte("emsf-owners-slices\x00" + token))
	return hex.EncodeToString(sum[:8])
}

// RecordLease reads the lease out of a job record (the JSON of
// coordinator.JobState, whose "owners" object embeds a Lease).
func RecordLease(record []byte) (Lease, error) {
	var r struct {
		Owners *Lease `json:"owners"`
	}
	if err := json.Unmarshal(record, &r); err != nil {
		return Lease{}, fmt.Errorf("proto: job record: %w", err)
	}
	if r.Owners == nil {
		return Lease{}, fmt.Errorf("proto: job record of no owners exchange")
	}
	return *r.Owners, nil
}

// Faults a Reply names (Reply.Fault) where its Error is one the
// coordinator acts on rather than rolling back and trying again
// (wire.ClassifyStore decides).
const (
	// FaultStoreFull: a write to the JetStream store was refused for want
	// of room. Permanent: the fit ends with the worker's error.
	FaultStoreFull = "store-full"
	// FaultStoreDisabled: JetStream is not enabled on the server (a full
	// disk disables it). Permanent.
	FaultStoreDisabled = "store-disabled"
	// FaultStoreStalled: a write to the store was not acknowledged while
	// the server answers (a full disk). The fit ends at the second in a
	// row.
	FaultStoreStalled = "store-stalled"
	// FaultCorrupt: an object the request read failed its check (its
	// digest or CRC, or it did not decode); Reply.Object names it.
	FaultCorrupt = "corrupt"
)
