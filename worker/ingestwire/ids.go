package ingestwire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/shard"
)

// The vocabulary phase of a dataset whose states or actions are named by
// user ids (run before pass 1; coordinator/ingest's ids.go has the
// argument). Its outcome is the sorted vocabulary of every id group,
// held in ranges by owners, and for each split the dataset index of each
// of its ids, held by the worker that read the split, with the split's
// rows (passes 1 and 2 take them from there):
//
//  1. idscan: each split is read with fresh vocabularies; its worker (the
//     split's holder) keeps the split's distinct ids sorted and its rows
//     numbered by them, and replies with a sample of the ids;
//  2. idcut: the coordinator cuts each group's id space into ranges at
//     quantiles of the samples (splitters); each holder cuts its splits'
//     ids at them and says how many fall in each range;
//  3. idrange: the owner of each (group, range) pulls that range's ids
//     from every holder (IDPull, KindIDs), merges them into the range's
//     sorted vocabulary (shard.Merge), and ranks each holder's ids in it;
//  4. idtrans: with each range's offset (the counts of the ranges before
//     it), each holder pulls its splits' ranks from the owners
//     (KindRanks): the dataset index of every id of its splits.
//
// The vocabulary is the sorted set of the ids, a function of the data
// only: the splitters, the splits and the workers decide where work is
// done, never an index.
const (
	OpIDScan  = "idscan"
	OpIDCut   = "idcut"
	OpIDRange = "idrange"
	OpIDTrans = "idtrans"
	// OpIDPull is a worker's pull from another (IDPullRequest).
	OpIDPull = "idpull"
)

// Id groups: the state and next_state columns share one vocabulary, the
// action column has its own.
const (
	GroupStates  = 0
	GroupActions = 1
)

// GroupNames are the groups' names in messages (ScanIssue.StringIDs).
var GroupNames = [2]string{"states", "actions"}

// Group returns the group of a name of GroupNames, or -1.
func Group(name string) int {
	for g, n := range GroupNames {
		if n == name {
			return g
		}
	}
	return -1
}

// IDGroups says, per group, whether its columns hold user ids.
type IDGroups [2]bool

// Any reports whether some group holds ids.
func (g IDGroups) Any() bool { return g[0] || g[1] }

// ReadOptions returns read with a fresh vocabulary for each group of ids.
func (g IDGroups) ReadOptions(read arrowio.ReadOptions) arrowio.ReadOptions {
	read.StateIDs, read.ActionIDs = nil, nil
	if g[GroupStates] {
		read.StateIDs = &shard.Vocab{}
	}
	if g[GroupActions] {
		read.ActionIDs = &shard.Vocab{}
	}
	return read
}

// SplitIDs names the vocabulary phase a read of a split in pass 1 or 2
// is numbered by: the groups of ids and the phase's epoch.
type SplitIDs struct {
	Groups IDGroups `json:"groups"`
	Epoch  int      `json:"epoch"`
}

// IDScanRequest is step 1 for one split, in vocabulary epoch Epoch:
// the reply's sample holds at most Sample ids per group.
type IDScanRequest struct {
	Job    string              `json:"job"`
	Epoch  int                 `json:"epoch"`
	File   arrowio.DataFile    `json:"file"`
	Split  arrowio.Split       `json:"split"`
	Read   arrowio.ReadOptions `json:"read"`
	Groups IDGroups            `json:"groups"`
	Sample int                 `json:"sample"`
}

// IDScanReply is the split's rows and, per group, a sample of its
// distinct ids (evenly spaced in their sorted order); or what stopped
// its read.
type IDScanReply struct {
	Rows   int64       `json:"rows"`
	Sample [2][]string `json:"sample"`
	ScanIssue
}

// IDCutRequest is step 2 on a holder: the ids of each of Splits (held
// there) are cut at Splitters[g] (range r holds the ids in
// [Splitters[g][r-1], Splitters[g][r]), the first and last open).
type IDCutRequest struct {
	Job       string      `json:"job"`
	Epoch     int         `json:"epoch"`
	Splits    []int       `json:"splits"`
	Splitters [2][]string `json:"splitters"`
}

// IDCutReply is, per group, per split of the request (in its order), per
// range, the number of the split's ids in the range.
type IDCutReply struct {
	Counts [2][][]int64 `json:"counts"`
}

// IDSource is a holder of a split's ids: Count of them in the range.
type IDSource struct {
	Split  int    `json:"split"`
	Worker string `json:"worker"`
	Count  int64  `json:"count"`
}

// IDRangeRequest is step 2 for range Range of group Group: its ids are
// pulled from Sources (replies of at most PullBytes). With Bucket set,
// the range's sorted ids are also put into that Object Store bucket as
// proto.VocabObject(Job, Group, Range).
type IDRangeRequest struct {
	Job       string     `json:"job"`
	Epoch     int        `json:"epoch"`
	Group     int        `json:"group"`
	Range     int        `json:"range"`
	Sources   []IDSource `json:"sources"`
	PullBytes int        `json:"pull_bytes"`
	Bucket    string     `json:"bucket,omitempty"`
}

// IDRangeReply is the range's number of distinct ids, and the bytes of
// their UTF-8.
type IDRangeReply struct {
	Count int64 `json:"count"`
	Bytes int64 `json:"bytes"`
}

// IDOwner is a range of a group's vocabulary: its owner, its first index
// (Offset: the ids of the ranges before it) and its number of ids.
type IDOwner struct {
	Worker string `json:"worker"`
	Offset int64  `json:"offset"`
	Count  int64  `json:"count"`
}

// IDTransRequest is step 3 on a holder: for each of Splits (held there),
// the ranks of its ids are pulled from the owners of every range with
// some of them (Counts[g][k][r]: ids of Splits[k] in range r of g).
type IDTransRequest struct {
	Job       string       `json:"job"`
	Epoch     int          `json:"epoch"`
	Splits    []int        `json:"splits"`
	Counts    [2][][]int64 `json:"counts"`
	Owners    [2][]IDOwner `json:"owners"`
	PullBytes int          `json:"pull_bytes"`
}

// Kinds of IDPullRequest.
const (
	// KindIDs: a holder's ids of Split in Range, sorted (AppendIDs).
	KindIDs = "ids"
	// KindRanks: an owner's ranks, in its range, of the ids of Split
	// (AppendRanks), in the order of KindIDs.
	KindRanks = "ranks"
)

// IDPullRequest pulls items [From, …) of a list of Kind; the reply
// (binary) holds at most MaxBytes of them (at least one when there is
// one), its header a PullReply (Next: the item after the last; Done: no
// item at or after Next).
type IDPullRequest struct {
	Job      string `json:"job"`
	Epoch    int    `json:"epoch"`
	Kind     string `json:"kind"`
	Group    int    `json:"group"`
	Split    int    `json:"split"`
	Range    int    `json:"range"`
	From     int    `json:"from"`
	MaxBytes int    `json:"max_bytes"`
}

// AppendIDs appends ids, each as its length (uvarint) and its bytes.
func AppendIDs(buf []byte, ids ...[]byte) []byte {
	for _, id := range ids {
		buf = binary.AppendUvarint(buf, uint64(len(id)))
		buf = append(buf, id...)
	}
	return buf
}

// IDSize is the bytes AppendIDs takes for id.
func IDSize(id []byte) int {
	var tmp [binary.MaxVarintLen64]byte
	return binary.PutUvarint(tmp[:], uint64(len(id))) + len(id)
}

var errBadIDs = errors.New("ingestwire: bad id list")

// EachID calls fn with each id of data (AppendIDs), in order; the slices
// alias data.
func EachID(data []byte, fn func(id []byte) error) error {
	for len(data) > 0 {
		n, k := binary.Uvarint(data)
		if k <= 0 || n > shard.MaxIDBytes || uint64(len(data)-k) < n {
			return fmt.Errorf("%w: at %d bytes from its end", errBadIDs, len(data))
		}
		if err := fn(data[k : k+int(n)]); err != nil {
			return err
		}
		data = data[k+int(n):]
	}
	return nil
}

// AppendRanks appends int32 ranks, little-endian.
func AppendRanks(buf []byte, ranks ...int32) []byte {
	for _, r := range ranks {
		buf = binary.LittleEndian.AppendUint32(buf, uint32(r))
	}
	return buf
}

// Ranks decodes AppendRanks's bytes, appending to dst.
func Ranks(dst []int32, data []byte) ([]int32, error) {
	if len(data)%4 != 0 {
		return nil, fmt.Errorf("ingestwire: bad rank list: %d bytes", len(data))
	}
	for k := 0; k < len(data); k += 4 {
		dst = append(dst, int32(binary.LittleEndian.Uint32(data[k:])))
	}
	return dst, nil
}

// ReadIDs calls fn with each id of r (AppendIDs's bytes), in order,
// streaming: fn's slice is valid during the call only.
func ReadIDs(r io.Reader, fn func(id []byte) error) error {
	br := bufio.NewReader(r)
	buf := make([]byte, shard.MaxIDBytes)
	for k := 0; ; k++ {
		n, err := binary.ReadUvarint(br)
		switch {
		case err == io.EOF:
			return nil
		case err != nil:
			return fmt.Errorf("%w: id %d: %w", errBadIDs, k, err)
		case n > shard.MaxIDBytes:
			return fmt.Errorf("%w: id %d of %d bytes", errBadIDs, k, n)
		}
		if _, err := io.ReadFull(br, buf[:n]); err != nil {
			return fmt.Errorf("%w: id %d: %w", errBadIDs, k, err)
		}
		if err := fn(buf[:n]); err != nil {
			return err
		}
	}
}
