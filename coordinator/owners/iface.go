package owners

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/emsf/emsf/worker/wire/proto"
)

// Cluster is the sequencer's view of the workers (natsexec adapts NATS to
// it; the tests, a fake cluster).
type Cluster interface {
	// Census returns the ids (sorted) of the workers admitted now, those
	// that answered a hello on their own owners subject with
	// proto.Protocol, waiting until at least want of them answer. An
	// error that Fatal wrapped ends the fit (no workers within the wait);
	// any other fails the phase.
	Census(ctx context.Context, want int) ([]string, error)
	// Ask sends r to worker id and returns its reply, whose Error may be
	// set. An error that wraps ErrUnreachable says that nothing serves
	// the worker's owners subject any more; one that wraps ErrBadReply,
	// that its answer could not be read.
	Ask(ctx context.Context, id string, r *proto.Request) (*proto.Reply, error)
	// Guard runs f with a context that ends as soon as a worker of ids
	// leaves or freezes, or the connection to the workers is reset, and
	// returns f's error with that cause wrapped in.
	Guard(ctx context.Context, ids []string, f func(ctx context.Context) error) error
	// Strike counts a bad answer of worker id (quarantining it after a
	// few); Quarantine quarantines it at once; Quarantined lists the
	// quarantined, who are placed no more.
	Strike(id string, err error)
	Quarantine(id string, err error)
	Quarantined() []string
	// Bytes is what the coordinator's connection has moved so far.
	Bytes() int64
}

// Store keeps the job's record (with compare-and-set: the lease) and its
// objects.
type Store interface {
	// Record returns the job's record, nil when it has none.
	Record(ctx context.Context) (*Record, error)
	// Begin writes the first record of this run, taking the job over
	// from any earlier run.
	Begin(ctx context.Context, r *Record) error
	// Save writes r with compare-and-set on this run's last write: an
	// error that wraps ErrLeaseLost says another run wrote since (it
	// holds the job now).
	Save(ctx context.Context, r *Record) error
	// Announce publishes r, the record last written (best effort).
	Announce(r *Record)
	// Put stores an object.
	Put(ctx context.Context, name string, data []byte) error
	// Delete removes an object; one that does not exist is no error.
	Delete(ctx context.Context, name string) error
	// Repair stores object name again from what it was made of (a shard
	// object from the data the coordinator holds) after a worker found
	// it corrupt; an error that wraps ErrNoRepair when the store cannot.
	Repair(ctx context.Context, name string) error
}

// Model is where the job's model comes from and goes to. Today the
// coordinator holds it (natsexec's adapter of a *factor.Model); when the
// owners create the initial model and write its parts, Model becomes a
// request to them, and the sequencer does not change.
type Model interface {
	// Initial stores the initial model as checkpoint 0 of plan p (the
	// objects proto.KObject(job, 0, kb, c) and proto.DObject(job, 0, g))
	// and returns the CRC of each.
	Initial(ctx context.Context, p *Plan) (kcrc [][]string, dcrc []string, err error)
	// Final takes the model out at checkpoint c, which holds every
	// column block and row group at c.Version.
	Final(ctx context.Context, p *Plan, c Checkpoint) error
}

// Clock is the sequencer's time: the pass's backups and the stragglers'
// costs are measured with it.
type Clock interface {
	Now() time.Time
	// Sleep waits d, or until ctx ends (its error).
	Sleep(ctx context.Context, d time.Duration) error
}

// RealClock is the wall clock.
type RealClock struct{}

// Now returns time.Now().
func (RealClock) Now() time.Time { return time.Now() }

// Sleep waits d or until ctx ends.
func (RealClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Record is the job's record in the store: the commit record of the last
// committed version, the last checkpoint and the lease of the epoch.
type Record struct {
	// Status is "running", or how the fit ended (factor.Status).
	Status string
	// Version is the last committed version; ModelIteration the model's
	// iteration count there (warm starts included).
	Version        int
	ModelIteration int
	// LogLik is the log-likelihood of the pass that made Version (NaN:
	// not computed).
	LogLik float64
	// SumX is the data's Σc.
	SumX float64
	// Lease fences the epoch: its number and the FenceOf of its token.
	Lease proto.Lease
	// Checkpoint is the last complete checkpoint; CRCObject the object
	// that holds its CRC lists; ColBlocks the column blocks per K block.
	Checkpoint Checkpoint
	CRCObject  string
	ColBlocks  int
	// Previous is the checkpoint before Checkpoint, kept (its objects and
	// its CRC lists, proto.CRCObject(job, Previous.Version)) until a
	// later one is recorded, so that a run can fall back to it when
	// Checkpoint fails its check; nil when there is none.
	Previous *Checkpoint
	// Digests are the owners' digests of their blocks at Version, by
	// worker; Y the global Y by K block of the pass that made it.
	Digests map[string]string
	Y       [][]float64
}

// Checkpoint is a complete checkpoint: the CRC of every column block (by
// K block) and of every row group's rows of D at Version.
type Checkpoint struct {
	Version int
	KCRC    [][]string
	DCRC    []string
	// LogLik (NaN: not computed) and ModelIteration are the model's at
	// Version.
	LogLik         float64
	ModelIteration int
}

// Report is one committed iteration of a fit.
type Report struct {
	Iteration int
	Wall      time.Duration
	// Bytes is what the coordinator's connection sent and received for
	// the iteration (tasks, replies, commits; replays included).
	Bytes   int64
	Workers int
	Epoch   int
	// Rollbacks counts the fit's rollbacks so far, Rebalances its
	// re-placements for stragglers; Shards is how many shards each worker
	// computed in the iteration's pass.
	Rollbacks  int
	Rebalances int
	// Backups counts the tasks of stragglers that other workers took
	// (queued shards and backup copies) so far.
	Backups int
	Shards  map[string]int
	// Quarantined counts the workers quarantined so far.
	Quarantined int
	// Verifications counts the tasks computed again to check another
	// worker's answer so far (Options.Verify), Rogues the workers they
	// caught.
	Verifications, Rogues int
}

// Errors a Cluster or Store wraps.
var (
	// ErrUnreachable: nothing serves the worker's owners subject (NATS's
	// "no responders"). The worker is quarantined and its work placed
	// elsewhere.
	ErrUnreachable = errors.New("owners: the worker's owners subject has no responders")
	// ErrBadReply: a worker's answer could not be read. It counts as a
	// strike against the worker.
	ErrBadReply = errors.New("owners: unreadable reply")
	// ErrLeaseLost: another run of the job wrote its record since this
	// one's last write. The fit ends and leaves the workers to that run.
	ErrLeaseLost = errors.New("owners: another coordinator took the job over")
	// ErrNoRepair: the store cannot make a corrupt object again (it does
	// not hold what the object was made of).
	ErrNoRepair = errors.New("owners: the store cannot make the object again")
)

// CorruptError is an object of the store that failed its check (its CRC
// or digest, its size, or it was missing or did not decode) when a worker
// or the Model read it. An object of the last checkpoint makes the run
// fall back to the checkpoint before (or to the start); a shard object is
// repaired (Store.Repair).
type CorruptError struct {
	Object string
	Err    error
}

func (e *CorruptError) Error() string { return e.Err.Error() }
func (e *CorruptError) Unwrap() error { return e.Err }

// fatalError ends a fit instead of rolling it back.
type fatalError struct{ error }

func (e *fatalError) Unwrap() error { return e.error }

// Fatal marks err as ending the fit: the sequencer does not roll back.
func Fatal(err error) error {
	if err == nil {
		return nil
	}
	return &fatalError{err}
}

// IsFatal reports whether err ends a fit (Fatal, or a lost lease).
func IsFatal(err error) bool {
	var fe *fatalError
	return errors.As(err, &fe) || errors.Is(err, ErrLeaseLost)
}

// stalledError is a store write that was not acknowledged while the
// server answers (wire.StoreStalled: a full disk stalls writes).
type stalledError struct{ error }

func (e *stalledError) Unwrap() error { return e.error }

// Stalled marks err as a stalled store write: a rollback like any other,
// but the fit ends at the second in a row (a disk that is full stays
// full; a server that was only slow acknowledges the retry).
func Stalled(err error) error {
	if err == nil {
		return nil
	}
	return &stalledError{err}
}

// IsStalled reports whether err is a stalled store write (Stalled).
func IsStalled(err error) bool {
	var se *stalledError
	return errors.As(err, &se)
}

// WorkerError is a failure of one worker's request: the worker and what
// went wrong.
type WorkerError struct {
	Worker string
	Err    error
}

func (e *WorkerError) Error() string { return fmt.Sprintf("worker %s: %v", e.Worker, e.Err) }
func (e *WorkerError) Unwrap() error { return e.Err }

// nan is NaN, the value of a log-likelihood not computed.
var nan = math.NaN()
