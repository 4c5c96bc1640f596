// Package ingestwire holds the messages of the distributed ingest: what a
// coordinator (coordinator/ingest) asks the workers (worker.IngestNode)
// and what they answer, and what workers pull from each other. It is
// pure data (no NATS): the NATS adapters (worker's ingest endpoint,
// coordinator/natsexec) carry these as JSON, except the shuffle's
// segments and tail rows, which are binary (segment.go).
//
// The ingest turns a dataset into exactly the shards a local fit builds
// from it (loadData + shard.SplitGrid), on the workers:
//
//  1. list: a worker lists the dataset (its files, sizes, formats); a
//     dataset of user ids then has its vocabulary built and each split's
//     ids numbered (ids.go), and passes 1 and 2 read each split on the
//     worker holding its ids;
//  2. scan (pass 1): each split is read and summarized (shard.Summary);
//     the coordinator fixes n, u, the fingerprint, the first data error,
//     and plans row buckets per action and which worker reduces each;
//  3. plan (pass 2): every worker maps its splits (rows routed to the
//     reducer of their (action, row) bucket, in segments numbered by
//     (split, seq) in a bounded outbox) and pulls its buckets' segments
//     from every mapper, feeding them to shard.Counter in split order:
//     each row sees its transitions in arrival order;
//  4. cut: the coordinator chains shard.CutStep over each action's
//     buckets in row order (the carry passed from bucket to bucket);
//  5. build: the worker of each shard's first row builds it, pulling the
//     rows of a shard that runs into later buckets (tail), cuts its column
//     cells and reports its lines (shard.Line);
//  6. commit: shard IDs in order; builders keep their shards for the fit
//     and store them in the Object Store.
package ingestwire

import (
	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/shard"
)

// Ops of the ingest endpoint (header Op).
const (
	OpList   = "list"
	OpScan   = "scan"
	OpPlan   = "plan"
	OpStatus = "status"
	OpPull   = "pull"
	OpCut    = "cut"
	OpBuild  = "build"
	OpTail   = "tail"
	OpCommit = "commit"
	OpEnd    = "end"
	// The start of a fit whose coordinator holds no shard (after the
	// ingest): the row groups of D cut from the shards, and the initial
	// model drawn, by the workers (GroupsRequest, InitRequest).
	OpGroups = "groups"
	OpInit   = "init"
	// The end of such a fit: the owners write the model's parts from the
	// last checkpoint (PartsRequest).
	OpParts = "parts"
)

// Header names of the ingest endpoint's messages.
const (
	HeaderOp    = "Emsf-Ingest-Op"
	HeaderError = "Emsf-Ingest-Error"
	// HeaderStale marks an error reply to a request of an older epoch
	// than the worker's.
	HeaderStale = "Emsf-Ingest-Stale"
)

// Sets of transitions: a fit without holdout has only Train; with
// --holdout, Train and Held are the two parts and All is both together
// (the refit on all data), as loadData's train, holdout and all().
const (
	SetTrain = 0
	SetHeld  = 1
	SetAll   = 2
)

// ListRequest asks a worker to list a dataset.
type ListRequest struct {
	Job    string `json:"job"`
	Input  string `json:"input"`
	Format string `json:"format,omitempty"`
}

// ListReply is the dataset's files in order.
type ListReply struct {
	Files []arrowio.DataFile `json:"files"`
}

// ScanRequest is pass 1 of one split.
type ScanRequest struct {
	Job   string              `json:"job"`
	File  arrowio.DataFile    `json:"file"`
	Split arrowio.Split       `json:"split"`
	Read  arrowio.ReadOptions `json:"read"`
	// IDs, for a dataset of user ids, is the vocabulary the split is
	// numbered by (the worker holds the split's ids: IDScan).
	IDs *SplitIDs `json:"ids,omitempty"`
}

// ScanReply is a split's summary, or the data error that stopped it.
type ScanReply struct {
	Summary shard.Summary `json:"summary"`
	ScanIssue
}

// ScanIssue is what stopped a read of a split, if anything.
type ScanIssue struct {
	// RowError is a bad row of the split, its Row counted from the
	// split's first row (arrowio.SplitRowError); Error a data error of a
	// whole split (exact as it is).
	RowError *arrowio.InputError `json:"row_error,omitempty"`
	Error    *arrowio.InputError `json:"error,omitempty"`
	// ReadWhole: the split cannot be read on its own (arrowio.ErrReadWhole).
	ReadWhole string `json:"read_whole,omitempty"`
	// StringIDs, set beside RowError or Error, says that the error is a
	// column of an index group ("states", "actions": GroupNames) read as
	// integers that holds user ids (arrowio.StringIDsError): a job that
	// accepts ids reads that group as ids.
	StringIDs string `json:"string_ids,omitempty"`
}

// Any reports whether the read stopped.
func (s *ScanIssue) Any() bool { return s.RowError != nil || s.Error != nil || s.ReadWhole != "" }

// MapSplit is a split of pass 2 and what its mapper needs besides.
type MapSplit struct {
	arrowio.Split
	// Mapper is the index (in Plan.Workers) of the worker that maps it.
	Mapper int `json:"mapper"`
	// First is the dataset index (0-based) of the split's first
	// transition: the holdout draws start there.
	First int64 `json:"first"`
	// Rows and CRC are pass 1's: pass 2 must read the same.
	Rows int64         `json:"rows"`
	CRC  shard.RowsCRC `json:"crc"`
}

// Plan is pass 2 of an epoch: every worker maps its splits and reduces
// its buckets.
type Plan struct {
	Job   string `json:"job"`
	Epoch int    `json:"epoch"`
	// Workers are the worker ids, indexed by MapSplit.Mapper and
	// shard.Bucket.Reducer.
	Workers []string            `json:"workers"`
	Files   []arrowio.DataFile  `json:"files"`
	Splits  []MapSplit          `json:"splits"`
	Buckets []shard.Bucket      `json:"buckets"`
	Read    arrowio.ReadOptions `json:"read"`
	// N and U are the dataset's numbers of states and actions.
	N int `json:"n"`
	U int `json:"u"`
	// Holdout is the fraction held out (0: none), drawn per transition
	// from PCG(Seed, "hold") as loadData draws it.
	Holdout float64 `json:"holdout,omitempty"`
	Seed    uint64  `json:"seed,omitempty"`
	// Combine: every count is an integer and their sum ≤ 2^53, so a
	// mapper may sum a segment's duplicates (any order gives the same
	// bits).
	Combine bool `json:"combine,omitempty"`
	// Budgets (bytes): a mapper's outbox, a reducer's segments received
	// ahead of the split it feeds, a pull reply.
	OutboxBytes  int64 `json:"outbox_bytes"`
	AheadBytes   int64 `json:"ahead_bytes"`
	PullBytes    int   `json:"pull_bytes"`
	SegmentBytes int   `json:"segment_bytes"`
	// Window is how many splits a reducer pulls at once.
	Window int `json:"window"`
	// Target and ColCells are the shard layout (shard.SplitGrid).
	Target   int `json:"target"`
	ColCells int `json:"col_cells"`
	// IDs, for a dataset of user ids, is the vocabulary the splits are
	// numbered by; each split's mapper holds its ids.
	IDs *SplitIDs `json:"ids,omitempty"`
}

// Sets returns the sets of transitions the plan builds.
func (p *Plan) Sets() []int {
	if p.Holdout > 0 {
		return []int{SetTrain, SetHeld, SetAll}
	}
	return []int{SetTrain}
}

// PlanRequest starts pass 2 of an epoch on a worker: the plan is served
// by the coordinator as a blob (too large for a message at scale).
type PlanRequest struct {
	Job   string `json:"job"`
	Epoch int    `json:"epoch"`
	// Blob is the subject the plan's JSON is fetched from, Size its
	// length, CRC its wire.CRC.
	Blob string `json:"blob"`
	Size int    `json:"size"`
	CRC  string `json:"crc"`
}

// StatusRequest asks how far a worker is with pass 2 of an epoch; the
// reply waits up to WaitMillis for news.
type StatusRequest struct {
	Job        string `json:"job"`
	Epoch      int    `json:"epoch"`
	WaitMillis int    `json:"wait_ms"`
}

// StatusReply is a worker's progress in pass 2.
type StatusReply struct {
	// Mapped is how many of its splits the worker has read (and checked
	// against pass 1) and all reducers have pulled; Maps how many it has.
	Mapped int `json:"mapped"`
	Maps   int `json:"maps"`
	// Reduced: every segment of its buckets received and counted.
	Reduced bool `json:"reduced"`
	// Transitions it reduced, per set.
	Transitions []int64 `json:"transitions,omitempty"`
	// Error ends the epoch: Input, when set, is a data error (a file
	// changed since pass 1): it ends the job.
	Error string              `json:"error,omitempty"`
	Input *arrowio.InputError `json:"input,omitempty"`
	// Peer names a worker this one could not reach.
	Peer string `json:"peer,omitempty"`
}

// PullRequest is a reducer's pull of its segments of a split from the
// split's mapper, from sequence number From on; the reply (binary:
// segments, see EncodeSegments) holds at most MaxBytes (and at least one
// segment when there is one). From acknowledges the segments before it:
// the mapper drops them.
type PullRequest struct {
	Job      string `json:"job"`
	Epoch    int    `json:"epoch"`
	Split    int    `json:"split"`
	Reducer  int    `json:"reducer"`
	From     int    `json:"from"`
	MaxBytes int    `json:"max_bytes"`
	// WaitMillis bounds how long the mapper waits for a segment.
	WaitMillis int `json:"wait_ms"`
}

// PullReply is the header of a pull's reply.
type PullReply struct {
	// Next is the sequence number after the last segment in the reply;
	// Done: the split has no segment for the reducer at or after Next.
	Next int  `json:"next"`
	Done bool `json:"done"`
}

// CutRequest is one link of an action's cut chain: bucket Bucket of set
// Set, entered with the nonzeros Carry of the shard open before it.
type CutRequest struct {
	Job    string `json:"job"`
	Epoch  int    `json:"epoch"`
	Set    int    `json:"set"`
	Bucket int    `json:"bucket"`
	Carry  int64  `json:"carry"`
}

// CutReply is the rows of the bucket that start a shard, and the carry
// after its last row.
type CutReply struct {
	Cuts  []int32 `json:"cuts"`
	Carry int64   `json:"carry"`
	// Rows is the bucket's rows with a nonzero.
	Rows int `json:"rows"`
}

// BuildShard is a row shard to build: rows [First, End) of an action
// (End = -1: to the action's last row), shard rows [RowLo, RowHi) in its
// manifest line; its rows from bucket Bucket (the builder's) on, and
// those in the Tails.
type BuildShard struct {
	Set    int    `json:"set"`
	Action int    `json:"action"`
	Bucket int    `json:"bucket"`
	First  int32  `json:"first"`
	End    int32  `json:"end"`
	RowLo  int    `json:"row_lo"`
	RowHi  int    `json:"row_hi"`
	Tails  []Tail `json:"tails,omitempty"`
}

// Tail is rows of a shard held by another bucket's reducer.
type Tail struct {
	Bucket int    `json:"bucket"`
	Worker string `json:"worker"`
}

// BuildRequest asks a worker to build row shards.
type BuildRequest struct {
	Job    string       `json:"job"`
	Epoch  int          `json:"epoch"`
	Shards []BuildShard `json:"shards"`
}

// BuildReply is, per row shard, its column cells' lines (IDs unset).
type BuildReply struct {
	Lines [][]shard.Line `json:"lines"`
}

// TailRequest asks a bucket's reducer for its rows [From, End) of set
// Set (End = -1: to the bucket's last row), as CSR rows (EncodeRows): at
// most MaxBytes of them (at least one row), the next request asking from
// the row after the last one received.
type TailRequest struct {
	Job      string `json:"job"`
	Epoch    int    `json:"epoch"`
	Set      int    `json:"set"`
	Bucket   int    `json:"bucket"`
	From     int32  `json:"from"`
	End      int32  `json:"end"`
	MaxBytes int    `json:"max_bytes"`
}

// CommitRequest gives a worker the IDs of the cells it built (by build
// request of the epoch in the order they came, then row shard, then
// cell) and has it keep them for the fit and, with Store, put them into
// the Object Store bucket.
type CommitRequest struct {
	Job    string    `json:"job"`
	Epoch  int       `json:"epoch"`
	IDs    [][][]int `json:"ids"`
	Store  bool      `json:"store,omitempty"`
	Bucket string    `json:"bucket,omitempty"`
}

// CommitReply says what the worker stored.
type CommitReply struct {
	Stored      int   `json:"stored"`
	StoredBytes int64 `json:"stored_bytes"`
}

// EndRequest ends a job's ingest on a worker: its state is dropped (the
// shards it committed stay in its cache for the fit).
type EndRequest struct {
	Job string `json:"job"`
}

// RowRange is one row range of D whose row groups a worker cuts
// (shard.CutRange): the shards Cells (by index, with their Checksums,
// whose objects are proto.ShardObject of them) of D block DBlock, cut
// into at most Q groups numbered from G0.
type RowRange struct {
	DBlock    int      `json:"dblock"`
	Cells     []int    `json:"cells"`
	Checksums []string `json:"checksums"`
	Q         int      `json:"q"`
	G0        int      `json:"g0"`
}

// GroupsRequest has a worker cut the row groups of Ranges from their
// shards (its cache, else the Object Store bucket Bucket) and store each
// group's row list as proto.RowsObject(Job, g).
type GroupsRequest struct {
	Job    string     `json:"job"`
	Bucket string     `json:"bucket,omitempty"`
	Ranges []RowRange `json:"ranges"`
}

// GroupsReply lists the groups cut, range by range (RowsCRC set).
type GroupsReply struct {
	Groups [][]shard.DGroup `json:"groups"`
}

// InitGroup is a row group of D whose rows of the initial model a worker
// draws: its row list is proto.RowsObject(job, G), of CRC RowsCRC.
type InitGroup struct {
	G       int    `json:"g"`
	DBlock  int    `json:"dblock"`
	RowsCRC string `json:"rows_crc"`
}

// InitBlock is a column block of K (rows [Lo, Hi) of K^T block KBlock).
type InitBlock struct {
	KBlock int `json:"kblock"`
	C      int `json:"c"`
	Lo     int `json:"lo"`
	Hi     int `json:"hi"`
}

// InitRequest has a worker draw its pieces of the random initial model
// (factor.NewRandom(N, M, U, Tie, Seed), bitwise: factor.RandomDRows,
// RandomKRows with the K blocks' column sums Sums) and store them as
// checkpoint 0 of the owners exchange (proto.DObject(Job, 0, g),
// proto.KObject(Job, 0, kb, c)); Precision "float32" rounds them as
// factor.RoundFactors does.
type InitRequest struct {
	Job       string      `json:"job"`
	Bucket    string      `json:"bucket,omitempty"`
	N         int         `json:"n"`
	M         int         `json:"m"`
	U         int         `json:"u"`
	Tie       string      `json:"tie"`
	Seed      uint64      `json:"seed"`
	Precision string      `json:"precision,omitempty"`
	Sums      [][]float64 `json:"sums,omitempty"`
	Groups    []InitGroup `json:"groups,omitempty"`
	Blocks    []InitBlock `json:"blocks,omitempty"`
}

// InitReply gives the CRC of each object stored, in the request's order.
type InitReply struct {
	DCRC []string `json:"d_crc,omitempty"`
	KCRC []string `json:"k_crc,omitempty"`
}

// PartsRequest has a worker write parts of a model dataset from
// checkpoint Version of the owners exchange of Job (its objects in
// Bucket): each part into the Object Store dataset Out
// (nats-obj://BUCKET/PREFIX, whose bucket exists), in Format (arrowio's
// ModelArrow or ModelParquet). The model's shape and init (N, M, U, Tie,
// Seed, Precision) give the rows of D that no row group holds: the fit
// never moved them from factor.NewRandom's.
type PartsRequest struct {
	Job       string      `json:"job"`
	Bucket    string      `json:"bucket,omitempty"`
	Version   int         `json:"version"`
	N         int         `json:"n"`
	M         int         `json:"m"`
	U         int         `json:"u"`
	Tie       string      `json:"tie"`
	Seed      uint64      `json:"seed"`
	Precision string      `json:"precision,omitempty"`
	Format    string      `json:"format,omitempty"`
	Out       string      `json:"out"`
	Parts     []PartPiece `json:"parts"`
}

// PartPiece is one part: rows [Lo, Hi) of block Block of factor D or K.
// A D part lists the row groups whose rows lie in [Lo, Hi), by their
// first row; a K part the column blocks that tile [Lo, Hi), in order.
type PartPiece struct {
	Factor string       `json:"factor"`
	Block  int          `json:"block"`
	Lo     int          `json:"lo"`
	Hi     int          `json:"hi"`
	Groups []PieceGroup `json:"groups,omitempty"`
	Cols   []PieceCols  `json:"cols,omitempty"`
}

// PieceGroup is a row group of D in a part: its row list is
// proto.RowsObject(job, G) (Rows rows, CRC RowsCRC), its rows of the
// checkpoint proto.DObject(job, version, G) (CRC CRC).
type PieceGroup struct {
	G       int    `json:"g"`
	Rows    int    `json:"rows"`
	RowsCRC string `json:"rows_crc"`
	CRC     string `json:"crc"`
}

// PieceCols is a column block of K in a part: rows [Lo, Hi) of K^T block
// kb, the checkpoint's object proto.KObject(job, version, kb, C) (CRC
// CRC).
type PieceCols struct {
	C   int    `json:"c"`
	Lo  int    `json:"lo"`
	Hi  int    `json:"hi"`
	CRC string `json:"crc"`
}

// PartsReply gives the manifest line of each part written, in the
// request's order.
type PartsReply struct {
	Parts []arrowio.ModelPart `json:"parts"`
}

// Reply is the envelope of every JSON reply: an error, or the answer.
type Reply[T any] struct {
	Error string `json:"error,omitempty"`
	Stale bool   `json:"stale,omitempty"`
	Value *T     `json:"value,omitempty"`
}
