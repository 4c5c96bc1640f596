package service

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/emsf/emsf/arrowio"
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
}

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
	// Outside counts the rows outside the running service's fixed size
	// (--states/--actions: it rejects them), FirstOutside names the first.
	Outside      int64
	FirstOutside string
}

// PublishFile sends the transitions of path to model opts.Name's stream as
// Arrow IPC stream payloads, each below the server's max payload, waiting
// for the stream's acknowledgement of each. The whole file is read and
// checked before the first message is sent, so a bad row publishes
// nothing. The stream is created when missing.
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
	// Pass 1: check every row, and against the running service's fixed
	// size when it has one (such rows are sent all the same: the service
	// rejects them and keeps the rest, as it does for any publisher).
	var st Status
	if m, err := nc.Request(StatusSubject(opts.Prefix, opts.Name), nil, 2*time.Second); err == nil {
		_ = json.Unmarshal(m.Data, &st)
	}
	err := arrowio.ScanTransitions(ctx, path, opts.Read, func(b *arrowio.TransitionBatch) error {
		for k := range b.Len() {
			i, a, j := b.State[k], b.Action[k], b.Next[k]
			var why string
			switch {
			case st.FixedStates > 0 && (int(i) >= st.FixedStates || int(j) >= st.FixedStates):
				why = fmt.Sprintf("state %d --> %d is outside the served model's %d states", i, j, st.FixedStates)
			case st.FixedActions > 0 && int(a) >= st.FixedActions:
				why = fmt.Sprintf("action %d is outside the served model's %d actions", a, st.FixedActions)
			default:
				continue
			}
			if res.Outside == 0 {
				res.FirstOutside = fmt.Sprintf("%s row %d: %s", path, b.FirstRow+k, why)
			}
			res.Outside++
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return res, fmt.Errorf("service: publish: %w", err)
	}
	cfg.Prefix, cfg.Name = opts.Prefix, opts.Name
	if err := RequireJetStream(ctx, js); err != nil {
		return res, err
	}
	if _, err := EnsureStream(ctx, js, cfg); err != nil {
		return res, err
	}
	// Pass 2: send.
	err = arrowio.ScanTransitions(ctx, path, opts.Read, func(b *arrowio.TransitionBatch) error {
		for lo := 0; lo < b.Len(); lo += maxRows {
			hi := min(lo+maxRows, b.Len())
			data, err := arrowio.EncodeTransitionsPayload(b, lo, hi)
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
