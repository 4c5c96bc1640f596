package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unsafe"
)

// The owners exchange (`emsf fit --exchange owners`): the coordinator
// only sequences. Every column block of every K block has an owner worker
// that holds its rows of K^T and folds its K̂; every row group of D (a
// shard, or the column cells of one row range: shard.SplitGrid) has an
// owner that holds its rows of D and folds its D̂. Once per epoch:
//
//  0. load (coordinator → every worker): the worker's column blocks and
//     row groups (read from a checkpoint) and the epoch's layout (column
//     blocks, row groups and their owners, each K block's shards and
//     their workers).
//
// Per iteration:
//
//  1. task (coordinator → the shard's worker, OwnSubject): the worker
//     gathers the rows of D and K its shard reads from their owners
//     (GatherSubject; its own directly), computes the partial, serves its
//     D̂ slice (DSliceName) and the K̂ slice of every column block
//     (SliceName) as blobs and answers with the small OwnReply (label, Y,
//     Σx, loglik, nonzeros). A slice of a block or group the task's
//     worker owns itself is folded there at once when its fold is due at
//     that shard, and not served; for each K̂ slice it serves, the worker
//     tells the block's owner (ReadySubject, a hint), which pulls and
//     folds the slices that are due while the pass runs, so that slices
//     do not pile up until the commit (worker/ownfold.go, ownpull.go);
//  2. the coordinator folds Y and the scalars in the canonical order and
//     checks Σx;
//  3. commit (coordinator → each owner): the owner pulls its blocks' and
//     groups' slices not folded yet from the workers the layout names,
//     folds them in the canonical order (factor.ColumnFold for K̂; a
//     group's D̂ left to right over its cells), commits its columns with
//     the global Y (factor.CommitKRows) and its rows (factor.CommitRow),
//     and answers with one digest of their CRCs (the CRCs themselves in
//     checkpoint commits). Checkpoints replace each other: once the job
//     records a new one, the coordinator deletes the objects of the one
//     before.
//
// Nothing in the coordinator's messages grows with the number of states
// n or of column blocks: per iteration they carry m-vectors, scalars and
// CRCs, one task per shard and one commit per owner. Checkpoints (every k
// iterations, and the last) are Object Store objects written by the
// owners (OwnersKObject, OwnersDObject); after a fault every worker
// reloads what the new placement gives it from the last checkpoint and
// the coordinator replays the iterations since, which gives the same bits
// (every sum's order is the plan's).

// OwnSubject is where worker id takes the owners exchange's requests
// (OwnRequest, JSON).
func OwnSubject(prefix, id string) string { return prefix + ".own." + id }

// GatherSubject is where worker id serves rows of the K blocks it owns:
// the request's body is little-endian int32 column indices, its headers
// HeaderOwnJob, HeaderOwnBlock and HeaderOwnVersion; the reply is the
// rows' float64 values (m per column, little-endian), or a reply with
// HeaderBlobError.
func GatherSubject(prefix, id string) string { return prefix + ".gather." + id }

// Gather request headers.
const (
	HeaderOwnJob     = "Emsf-Job"
	HeaderOwnBlock   = "Emsf-Block" // "kblock/c"
	HeaderOwnVersion = "Emsf-Version"
	HeaderOwnEpoch   = "Emsf-Epoch"
)

// OwnersKObject is the Object Store name of column block c of K block kb
// at model version v of a job: its rows of K^T, raw float64.
func OwnersKObject(job string, v, kb, c int) string {
	return "owners/" + job + "/" + strconv.Itoa(v) + "/k/" + strconv.Itoa(kb) + "/" + strconv.Itoa(c)
}

// OwnersDObject is the Object Store name of row group g's rows of D (the
// rows of its OwnersRowsObject in order, m values each, raw float64) at
// version v. Without column cells a group is one shard, and g its index.
func OwnersDObject(job string, v, g int) string {
	return "owners/" + job + "/" + strconv.Itoa(v) + "/d/" + strconv.Itoa(g)
}

// Operations of an OwnRequest.
const (
	OpLoad   = "load"
	OpTask   = "task"
	OpCommit = "commit"
	OpSave   = "save"
	OpEnd    = "end"
)

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

// SliceName is the name under which the worker that computed shard s in
// iteration iter of an epoch serves the K̂ slice of column block c (on
// BlobSubject(prefix, id+"-s")): a deterministic name, so that the
// coordinator never relays one reference per shard and block. A shard
// that touches no column of the block serves an empty slice.
func SliceName(job string, epoch, iter, s, c int) string {
	return job + "-" + strconv.Itoa(epoch) + "-" + strconv.Itoa(iter) + "-" + strconv.Itoa(s) + "-" + strconv.Itoa(c)
}

// SliceSubject is where worker id serves its K̂ slices.
func SliceSubject(prefix, id string) string { return BlobSubject(prefix, id+"-s") }

// RowGroup is row group G of D: rows in [Lo, Hi) of D block Action (the
// action; 0 under --tie shared-d), whose D̂ is summed over the shards
// Cells (the shards or column cells of one row range: shard.SplitGrid;
// under shared-d every action's shards that meet the rows) in order; with its owner worker, the CRC-32C of its rows of D at the
// version in question (CRC) and of its row list (RowsCRC,
// OwnersRowsObject). The owner holds the group's rows of D, serves them
// to the workers of its cells (gather, HeaderOwnBlock "d/G") and folds
// and commits the cells' D̂ slices (DSliceName) in cell order.
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

// DSliceName is the name under which the worker that computed shard s in
// iteration iter of an epoch serves its D̂ slice of row group g (the
// shard's rows in the group, their D̂ and x) for the group's owner.
func DSliceName(job string, epoch, iter, s, g int) string {
	return job + "-" + strconv.Itoa(epoch) + "-" + strconv.Itoa(iter) + "-" + strconv.Itoa(s) + "-d" + strconv.Itoa(g)
}

// OwnersRowsObject is the Object Store name of row group g's row list
// (the rows of D it holds, ascending, little-endian int32), written by
// the coordinator when the job starts or resumes.
func OwnersRowsObject(job string, g int) string {
	return "owners/" + job + "/rows/" + strconv.Itoa(g)
}

// KBlockY is the global Y of one K block.
type KBlockY struct {
	KBlock int       `json:"kblock"`
	Y      []float64 `json:"y"`
}

// OwnRequest is a request of the owners exchange. Iteration is, for a
// task, the iteration computed (on version Iteration−1); for a commit,
// the version committed; for a load or save, the version loaded or saved.
type OwnRequest struct {
	Op        string  `json:"op"`
	Job       string  `json:"job"`
	Epoch     int     `json:"epoch"`
	Iteration int     `json:"iteration"`
	Bucket    string  `json:"bucket"`
	N         int     `json:"n"`
	M         int     `json:"m"`
	U         int     `json:"u"`
	Tie       string  `json:"tie"`
	GroupNNZ  int     `json:"group_nnz"`
	Alpha     float64 `json:"alpha"`
	// Precision is the model's (factor.Precision; "" is float64): owners
	// of a float32 model round what they commit.
	Precision string `json:"precision,omitempty"`
	// Deadline is when the coordinator stops waiting (Unix nanoseconds).
	Deadline int64 `json:"deadline"`

	// load: the blocks this worker owns from now on (loaded from
	// OwnersKObject of version Iteration), every K block's column blocks
	// with their owners (Layout[kblock][c]) and shards (Shapes): the
	// epoch's placement, fixed until the next load. save: the blocks to
	// store at version Iteration.
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

	// commit: the global Y of the owner's K blocks, whether to store the
	// committed blocks, and the shards whose slices another worker than
	// the layout's serves this iteration (a backup copy won).
	Y     []KBlockY     `json:"y,omitempty"`
	Save  bool          `json:"save,omitempty"`
	Moved []ShardWorker `json:"moved,omitempty"`
}

// ShardWorker names the worker that serves a shard's slices.
type ShardWorker struct {
	Shard  int    `json:"shard"`
	Worker string `json:"worker"`
}

// OwnReply answers an OwnRequest (Error set: it failed).
type OwnReply struct {
	Error  string `json:"error,omitempty"`
	Worker string `json:"worker"`
	// task.
	Label     string    `json:"label,omitempty"`
	Y         []float64 `json:"y,omitempty"`
	SumX      float64   `json:"sum_x,omitempty"`
	LogLik    float64   `json:"loglik,omitempty"`
	HasLogLik bool      `json:"has_loglik,omitempty"`
	NNZ       int       `json:"nnz,omitempty"`
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

// FloatBytes views xs as its bytes (little-endian machines: see
// LittleEndian; elsewhere it copies).
func FloatBytes(xs []float64) []byte {
	if len(xs) == 0 {
		return []byte{}
	}
	if LittleEndian {
		return unsafe.Slice((*byte)(unsafe.Pointer(&xs[0])), 8*len(xs))
	}
	b := make([]byte, 8*len(xs))
	for k, v := range xs {
		binary.LittleEndian.PutUint64(b[8*k:], math.Float64bits(v))
	}
	return b
}

// ReadFloats fills xs from little-endian float64 bytes.
func ReadFloats(xs []float64, b []byte) error {
	if len(b) != 8*len(xs) {
		return fmt.Errorf("wire: %d bytes for %d float64 values", len(b), len(xs))
	}
	if LittleEndian && len(xs) > 0 {
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&xs[0])), 8*len(xs)), b)
		return nil
	}
	for k := range xs {
		xs[k] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*k:]))
	}
	return nil
}

// EncodeCols writes column indices as little-endian int32s.
func EncodeCols(cols []int32, buf []byte) []byte {
	buf = buf[:0]
	for _, j := range cols {
		buf = binary.LittleEndian.AppendUint32(buf, uint32(j))
	}
	return buf
}

// DecodeCols reads column indices written by EncodeCols, each in [lo, hi).
func DecodeCols(b []byte, lo, hi int, into []int32) ([]int32, error) {
	if len(b)%4 != 0 {
		return nil, errors.New("wire: column list is not a multiple of 4 bytes")
	}
	into = into[:0]
	for k := 0; k < len(b); k += 4 {
		j := int32(binary.LittleEndian.Uint32(b[k:]))
		if int(j) < lo || int(j) >= hi {
			return nil, fmt.Errorf("wire: column %d outside [%d, %d)", j, lo, hi)
		}
		into = append(into, j)
	}
	return into, nil
}
