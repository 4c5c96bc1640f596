package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/factor"
)

// PublishOptions configures PublishFile.
type PublishOptions struct {
	// Prefix and Name address the model's transitions subject.
	Prefix, Name string
	// Read says how to read the file (format, column names, bounds).
	Read arrowio.ReadOptions
	// MaxRows bounds the rows per message (default: as many as fit in the
	// server's max payload).
	MaxRows int
	// MsgIDPrefix, when set, gives message k the JetStream message id
	// MsgIDPrefix-k, so that publishing the same file again within the
	// stream's duplicate window (2 minutes) stores nothing twice.
	MsgIDPrefix string
	// Create lets the stream be created when no emsf serve answers for
	// the name and its stream does not exist yet (without it, that is an
	// error: most likely a mistyped name).
	Create bool
	// AllowRejects sends a file some of whose rows the service will
	// reject (outside its size or limits): without it such a file sends
	// nothing and PublishFile returns a *RejectsError.
	AllowRejects bool
	// AutoIDs reads columns of ids as ids (arrowio.ScanAutoIDs) and sends
	// them as they are (utf8 columns); Read's vocabularies, when set, do
	// the same for their columns. A running emsf serve that counts a kind
	// by the other (indices where the file has ids, or ids where it has
	// indices; Status.IDs) is sent nothing (an error); one with no counts
	// yet takes up the file's.
	AutoIDs bool
}

// RejectsError says that rows of a file would be rejected by the service
// (PublishOptions.AllowRejects unset): nothing was sent.
type RejectsError struct {
	Path          string
	Rows, Outside int64
	// Reasons are the first few rows' reasons.
	Reasons []string
}

func (e *RejectsError) Error() string {
	return fmt.Sprintf("service: publish %s: %d of %d transitions would be rejected by emsf serve, nothing sent (give --allow-rejects to send the rest): %s",
		e.Path, e.Outside, e.Rows, strings.Join(e.Reasons, "; "))
}

// NoServiceError says that no emsf serve answers for a model name whose
// stream does not exist.
type NoServiceError struct{ Name, Subject string }

func (e *NoServiceError) Error() string {
	return fmt.Sprintf("service: no emsf serve answers for model %s (on %s) and it has no stream yet: start 'emsf serve --name %s' first, check the name, or give --create to create the stream anyway",
		e.Name, e.Subject, e.Name)
}

// maxReasons is how many rejected rows a RejectsError names.
const maxReasons = 3

// PublishResult says what PublishFile sent.
type PublishResult struct {
	Rows              int64
	Messages          int
	Duplicates        int
	Bytes             int64
	FirstSeq, LastSeq uint64
	Stream, Subject   string
	RowsPerMessage    int
	MaxPayload        int64
	DuplicateRows     int64
	// Outside counts the rows the running service will reject (outside
	// its fixed size or its limits, or past its count limit), Reasons
	// names the first few.
	Outside int64
	Reasons []string
	// Served is false when no emsf serve answered for the name (the
	// transitions wait in the stream until one starts).
	Served bool
}

// PublishFile sends the transitions of path to model opts.Name's stream as
// Arrow IPC stream payloads, each below the server's max payload, waiting
// for the stream's acknowledgement of each. The whole file is read and
// checked before the first message is sent, so a bad row publishes
// nothing; so does a row the running service would reject (its Status
// says its size and limits), unless opts.AllowRejects. When no service
// answers and the stream does not exist, it returns a *NoServiceError
// unless opts.Create; otherwise the stream is created when missing.
// res.LastSeq is the stream sequence reached (a retrain with that
// after_seq includes every row sent).
func PublishFile(ctx context.Context, nc *nats.Conn, path string, opts PublishOptions, cfg StoreConfig) (PublishResult, error) {
	res := PublishResult{Stream: StreamName(opts.Prefix, opts.Name), Subject: TransitionsSubject(opts.Prefix, opts.Name), MaxPayload: nc.MaxPayload()}
	maxRows := int((nc.MaxPayload() - 4096) / arrowio.PayloadRowBytes)
	if opts.MaxRows > 0 {
		maxRows = min(maxRows, opts.MaxRows)
	}
	if maxRows < 1 {
		return res, fmt.Errorf("service: publish: the server's max payload %d is too small", nc.MaxPayload())
	}
	res.RowsPerMessage = maxRows
	// Pass 1: check every row, and against the running service's size
	// and limits (rows it would reject are not sent without
	// AllowRejects).
	js, err := jetstream.New(nc)
	if err != nil {
		return res, fmt.Errorf("service: publish: %w", err)
	}
	var st Status
	m, err := nc.Request(StatusSubject(opts.Prefix, opts.Name), nil, 2*time.Second)
	if err == nil {
		res.Served = json.Unmarshal(m.Data, &st) == nil
	}
	var rows int64
	var chk *rowCheck
	pass1 := func(read arrowio.ReadOptions) error {
		rows, res.Outside, res.Reasons, chk = 0, 0, nil, newRowCheck(&st)
		return arrowio.ScanTransitions(ctx, path, read, func(b *arrowio.TransitionBatch) error {
			if read.StateIDs != nil || read.ActionIDs != nil {
				rows += int64(b.Len()) // ids: sent as they are, the service's limits are on indices
				return nil
			}
			return checkRows(path, b, chk, &rows, &res)
		})
	}
	read := opts.Read
	if read.BatchRows <= 0 {
		// Batches of whole messages: each batch is cut into messages of
		// maxRows, so only the file's last message is short, whatever
		// batch size the reader would choose for the file's size.
		read.BatchRows = maxRows * max(1, arrowio.DefaultBatchRows/maxRows)
	}
	if opts.AutoIDs {
		read, err = arrowio.ScanAutoIDs(read, pass1)
	} else {
		err = pass1(read)
	}
	if err != nil {
		return res, err
	}
	if res.Served {
		if err := checkIDKinds(path, opts.Name, &st, read); err != nil {
			return res, err
		}
	}
	if !res.Served && !opts.Create {
		if err := RequireJetStream(ctx, js); err != nil {
			return res, err
		}
		if _, err := js.Stream(ctx, res.Stream); errors.Is(err, jetstream.ErrStreamNotFound) {
			return res, &NoServiceError{Name: opts.Name, Subject: StatusSubject(opts.Prefix, opts.Name)}
		}
	}
	if res.Outside > 0 && !opts.AllowRejects {
		return res, &RejectsError{Path: path, Rows: rows, Outside: res.Outside, Reasons: res.Reasons}
	}
	cfg.Prefix, cfg.Name = opts.Prefix, opts.Name
	if err := RequireJetStream(ctx, js); err != nil {
		return res, err
	}
	if _, err := EnsureStream(ctx, js, cfg); err != nil {
		return res, err
	}
	// Pass 2: send.
	err = arrowio.ScanTransitions(ctx, path, read, func(b *arrowio.TransitionBatch) error {
		for lo := 0; lo < b.Len(); lo += maxRows {
			hi := min(lo+maxRows, b.Len())
			// The vocabularies are complete after pass 1: the indices of
			// this read are pass 1's, and the ids go out as they came.
			data, err := arrowio.EncodeTransitionsPayloadIDs(b, lo, hi, read.StateIDs, read.ActionIDs)
			if err != nil {
				return err
			}
			msg := nats.NewMsg(res.Subject)
			msg.Data = data
			msg.Header.Set(HeaderFormat, arrowio.FormatArrowStream)
			var popts []jetstream.PublishOpt
			if opts.MsgIDPrefix != "" {
				popts = append(popts, jetstream.WithMsgID(fmt.Sprintf("%s-%d", opts.MsgIDPrefix, res.Messages)))
			}
			ack, err := js.PublishMsg(ctx, msg, popts...)
			if err != nil {
				return fmt.Errorf("service: publish rows %d..%d of %s: %w", b.FirstRow+lo, b.FirstRow+hi-1, path, err)
			}
			if res.FirstSeq == 0 {
				res.FirstSeq = ack.Sequence
			}
			res.LastSeq = max(res.LastSeq, ack.Sequence)
			res.Messages++
			res.Bytes += int64(len(data))
			res.Rows += int64(hi - lo)
			if ack.Duplicate {
				res.Duplicates++
				res.DuplicateRows += int64(hi - lo)
			}
		}
		return nil
	})
	return res, err
}

// checkRows checks the rows of b against what the running service
// accepts (chk), counting them in rows and the rejected ones in res.
func checkRows(path string, b *arrowio.TransitionBatch, chk *rowCheck, rows *int64, res *PublishResult) error {
	for k := range b.Len() {
		*rows++
		why := chk.check(int(b.State[k]), int(b.Action[k]), int(b.Next[k]), b.Count[k])
		if why == "" {
			continue
		}
		if len(res.Reasons) < maxReasons {
			res.Reasons = append(res.Reasons, fmt.Sprintf("%s row %d: %s", path, b.FirstRow+k, why))
		}
		res.Outside++
	}
	return nil
}

// rowCheck predicts which rows a running service rejects, from its Status
// (a zero Status, no service, rejects nothing): outside its fixed size or
// its limits, or past its count limit. It follows the model's growth over
// the rows it accepts, as the service does.
type rowCheck struct {
	st    *Status
	n, u  int
	count float64
}

func newRowCheck(st *Status) *rowCheck {
	return &rowCheck{st: st, n: st.States, u: st.Actions, count: st.Count}
}

// check returns why the service would reject i --a--> j with count c
// ("" when it would not) and counts the row when it would not.
func (r *rowCheck) check(i, a, j int, c float64) string {
	st := r.st
	switch {
	case st.FixedStates > 0 && (i >= st.FixedStates || j >= st.FixedStates):
		return fmt.Sprintf("state %d --> %d is outside the served model's %d states", i, j, st.FixedStates)
	case st.FixedActions > 0 && a >= st.FixedActions:
		return fmt.Sprintf("action %d is outside the served model's %d actions", a, st.FixedActions)
	case st.MaxStates > 0 && (i >= st.MaxStates || j >= st.MaxStates):
		return fmt.Sprintf("state %d --> %d is beyond the served model's limit of %d states (--max-states)", i, j, st.MaxStates)
	case st.MaxActions > 0 && a >= st.MaxActions:
		return fmt.Sprintf("action %d is beyond the served model's limit of %d actions (--max-actions)", a, st.MaxActions)
	case st.MaxCount > 0 && c > st.MaxCount-r.count:
		return fmt.Sprintf("count %v would take the served model's total count %v above the limit %v", c, r.count, st.MaxCount)
	}
	n, u := max(r.n, i+1, j+1), max(r.u, a+1)
	if tie, err := factor.ParseTie(st.Tie); err == nil && st.Order > 0 && st.MaxModelBytes > 0 && (n > r.n || u > r.u) &&
		factor.ModelBytes(n, st.Order, u, tie) > st.MaxModelBytes {
		return fmt.Sprintf("transition %d --%d--> %d would grow the served model to %d states and %d actions, above its limit of %d bytes (--max-model-bytes)",
			i, a, j, n, u, st.MaxModelBytes)
	}
	r.n, r.u, r.count = n, u, r.count+c
	return ""
}

// checkIDKinds refuses a file whose states or actions are named another
// way (ids or indices) than the running service st counts them, when it
// has counted some (a service with no counts takes up the file's).
func checkIDKinds(path, name string, st *Status, read arrowio.ReadOptions) error {
	if st.Transitions == 0 && st.Latest == nil {
		return nil
	}
	for _, k := range []struct {
		kind    string
		fileIDs bool
	}{{"states", read.StateIDs != nil}, {"actions", read.ActionIDs != nil}} {
		served := slices.Contains(strings.Split(st.IDs, ","), k.kind)
		switch {
		case k.fileIDs && !served:
			return fmt.Errorf("service: publish: %s names %s by ids, and emsf serve %s counts integer %s indices: nothing sent", path, k.kind, name, strings.TrimSuffix(k.kind, "s"))
		case !k.fileIDs && served:
			return fmt.Errorf("service: publish: %s names %s by integer indices, and emsf serve %s counts %s ids (--ids string sends every value as an id): nothing sent", path, k.kind, name, strings.TrimSuffix(k.kind, "s"))
		}
	}
	return nil
}
