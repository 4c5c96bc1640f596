package service

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
)

// HeaderFormat names a transitions payload's format (csv, arrow for an IPC
// file, arrows for an IPC stream); without it the format is detected.
const HeaderFormat = "Emsf-Format"

// consume starts an ordered consumer from the sequence after the
// checkpoint and a goroutine (counted in wg) that hands its messages to
// msgs; stop ends it (once: later calls do nothing).
func (s *Service) consume(ctx context.Context, wg *sync.WaitGroup) (<-chan jetstream.Msg, func(), error) {
	ocfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{TransitionsSubject(s.cfg.Prefix, s.cfg.Name)},
		DeliverPolicy: jetstream.DeliverAllPolicy}
	if s.seq > 0 {
		ocfg.DeliverPolicy, ocfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, s.seq+1
	}
	cons, err := s.st.JS.OrderedConsumer(ctx, StreamName(s.cfg.Prefix, s.cfg.Name), ocfg)
	if err != nil {
		return nil, nil, fmt.Errorf("service: consumer: %w", err)
	}
	it, err := cons.Messages(jetstream.PullMaxBytes(32 << 20))
	if err != nil {
		return nil, nil, fmt.Errorf("service: consumer: %w", err)
	}
	msgs := make(chan jetstream.Msg)
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(msgs)
		for {
			m, err := it.Next()
			if err != nil {
				if errors.Is(err, jetstream.ErrMsgIteratorClosed) || ctx.Err() != nil {
					return
				}
				s.log.Warn("consumer", "error", err)
				select {
				case <-time.After(250 * time.Millisecond):
				case <-ctx.Done():
					return
				}
				continue
			}
			select {
			case msgs <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	return msgs, sync.OnceFunc(it.Stop), nil
}

// ingest counts one message: every row inside the model's size, or none
// when the payload cannot be read. The table and the sequence change
// together.
func (s *Service) ingest(ctx context.Context, m jetstream.Msg) {
	meta, err := m.Metadata()
	if err != nil {
		s.log.Error("message without metadata: skipped", "error", err)
		return
	}
	seq := meta.Sequence.Stream
	if seq <= s.seq {
		return // counted already (cannot happen with an ordered consumer from s.seq+1)
	}
	if seq > s.seq+1 {
		s.log.Warn("stream sequences missing (removed by the stream's limits before they were counted)", "from", s.seq+1, "to", seq-1)
	}
	if s.cfg.IngestDelay > 0 {
		select {
		case <-time.After(s.cfg.IngestDelay):
		case <-ctx.Done():
			return // not counted: the next run replays it
		}
	}
	format := ""
	if h := m.Headers(); h != nil {
		format = h.Get(HeaderFormat)
	}
	rows, ids, err := s.parse(ctx, seq, format, m.Data())
	if ctx.Err() != nil {
		return // stopping: not counted, the next run replays it
	}
	s.count(seq, rows, ids, err)
}

// count applies message seq: its rows (their ids in ids's vocabularies),
// or err when its payload could not be read (then none of them).
func (s *Service) count(seq uint64, rows *arrowio.TransitionBatch, ids msgIDs, err error) {
	s.seq, s.dirty = seq, true
	s.m.seq.Set(float64(seq))
	byID := ids.states != nil || ids.actions != nil || s.stateIDs != nil || s.actionIDs != nil
	if err == nil && byID {
		if terr := s.takeIDs(ids); terr != nil {
			err = fmt.Errorf("%s message %d: %w", StreamName(s.cfg.Prefix, s.cfg.Name), seq, terr)
		}
	}
	if err != nil {
		s.rejectedMsg++
		s.lastReject = err.Error()
		s.m.rejectedMsgs.Inc()
		s.log.Warn("message rejected: none of its rows counted", "seq", seq, "error", err)
		return
	}
	var bad int64
	var first string
	for k := range rows.State {
		i, a, j := int(rows.State[k]), int(rows.Action[k]), int(rows.Next[k])
		var r rowIDs
		if byID {
			r = s.mapRow(ids, i, a, j)
			i, a, j = r.i, r.a, r.j
		}
		reason, why := s.outside(i, a, j)
		if c := rows.Count[k]; reason == "" && s.cfg.Mode == ModeOnlineEM && c != math.Trunc(c) {
			reason, why = reasonInvalid, fmt.Sprintf("count %v: online-em mode takes a count c as c unit transitions: want an integer", c)
		}
		if reason == "" {
			if err := s.table.Add(i, a, j, rows.Count[k]); errors.Is(err, shard.ErrCountLimit) {
				reason, why = reasonCount, fmt.Sprintf("count %v would take the model's total count %v above the limit %v", rows.Count[k], s.table.Sum(), float64(shard.MaxCount))
			} else if err != nil {
				reason, why = reasonInvalid, err.Error()
			} else if byID {
				// Counted: its new ids take the indices it was counted at.
				if err := s.intern(r); err != nil {
					s.fatal = fmt.Errorf("service: message %d row %d: %w", seq, k+1, err)
				}
			}
		}
		if reason != "" {
			s.m.rejected.WithLabelValues(reason).Inc()
			if bad < maxLoggedRejects {
				s.log.Warn("transition rejected", "seq", seq, "row", k+1, "reason", reason, "error", why)
			}
			if bad == 0 {
				first = fmt.Sprintf("message %d row %d: %s", seq, k+1, why)
			}
			bad++
		}
	}
	s.m.ingested.Add(float64(int64(len(rows.State)) - bad))
	if bad > 0 {
		s.rejected += bad
		s.lastReject = first
		s.log.Warn("transitions rejected, the rest of the message kept", "seq", seq, "rejected", bad, "kept", int64(len(rows.State))-bad, "first", first)
	}
	_, pending := s.table.Added()
	s.m.pending.Set(float64(pending))
}

// maxLoggedRejects is how many rejected rows of one message are logged
// one by one (all are counted, and the message's total is logged).
const maxLoggedRejects = 5

// outside says why transition i --a--> j is outside the model's size ("" when
// it is not): a fixed size (--states, --actions), the limits (--max-states,
// --max-actions), or a model that would exceed --max-model-bytes.
func (s *Service) outside(i, a, j int) (reason, why string) {
	c := &s.cfg
	switch {
	case c.States > 0 && i >= c.States:
		return reasonState, fmt.Sprintf("state %d is outside the model's %d states (--states)", i, c.States)
	case c.States > 0 && j >= c.States:
		return reasonState, fmt.Sprintf("next_state %d is outside the model's %d states (--states)", j, c.States)
	case c.Actions > 0 && a >= c.Actions:
		return reasonAction, fmt.Sprintf("action %d is outside the model's %d actions (--actions)", a, c.Actions)
	case i >= c.MaxStates:
		return reasonState, fmt.Sprintf("state %d is beyond the limit of %d states (--max-states)", i, c.MaxStates)
	case j >= c.MaxStates:
		return reasonState, fmt.Sprintf("next_state %d is beyond the limit of %d states (--max-states)", j, c.MaxStates)
	case a >= c.MaxActions:
		return reasonAction, fmt.Sprintf("action %d is beyond the limit of %d actions (--max-actions)", a, c.MaxActions)
	}
	n, u := s.dims()
	n2, u2 := max(n, i+1, j+1), max(u, a+1)
	if n2 == n && u2 == u {
		return "", ""
	}
	if b := factor.ModelBytes(n2, s.order(), u2, s.tie()); b > c.MaxModelBytes {
		return reasonSize, fmt.Sprintf("transition %d --%d--> %d would grow the model to %d states and %d actions, %d bytes, above the limit of %d bytes (--max-model-bytes)",
			i, a, j, n2, u2, b, c.MaxModelBytes)
	}
	return "", ""
}

// order and tie are the model's: the latest version's, or the flags'
// before the first.
func (s *Service) order() int {
	if s.model != nil {
		return s.model.M
	}
	return s.cfg.Order
}

func (s *Service) tie() factor.Tie {
	if s.model != nil {
		return s.model.Tie
	}
	return s.cfg.Tie
}

// parse reads a whole payload into rows (nothing is counted before the
// whole payload has been read).
func (s *Service) parse(ctx context.Context, seq uint64, format string, data []byte) (*arrowio.TransitionBatch, msgIDs, error) {
	format = strings.TrimSpace(format)
	if format != "" {
		f, err := arrowio.NormalizeFormat(format)
		if err != nil {
			return nil, msgIDs{}, fmt.Errorf("header %s: %w", HeaderFormat, err)
		}
		format = f
	}
	var rows arrowio.TransitionBatch
	name := fmt.Sprintf("%s message %d", StreamName(s.cfg.Prefix, s.cfg.Name), seq)
	// The kinds the service counts by ids are read as ids; a column of
	// ids of another kind is read again as ids when the service can take
	// them up (takeIDs), else the message is refused with the row, column
	// and value that named one.
	byID := [2]bool{s.stateIDs != nil, s.actionIDs != nil} // states, actions
	for {
		var read arrowio.ReadOptions
		if byID[0] {
			read.StateIDs = &shard.Vocab{}
		}
		if byID[1] {
			read.ActionIDs = &shard.Vocab{}
		}
		rows = arrowio.TransitionBatch{}
		err := arrowio.ScanTransitionsReader(ctx, bytes.NewReader(data), name, format, read, func(b *arrowio.TransitionBatch) error {
			rows.State = append(rows.State, b.State...)
			rows.Action = append(rows.Action, b.Action...)
			rows.Next = append(rows.Next, b.Next...)
			rows.Count = append(rows.Count, b.Count...)
			return nil
		})
		var se *arrowio.StringIDsError
		if !errors.As(err, &se) {
			if err != nil {
				return nil, msgIDs{}, err
			}
			return &rows, msgIDs{states: read.StateIDs, actions: read.ActionIDs}, nil
		}
		k := 0
		if se.Actions {
			k = 1
		}
		if byID[k] {
			return nil, msgIDs{}, err // cannot happen: a column read as ids raises none
		}
		if why := s.indicesOnly(se.Actions); why != "" {
			return nil, msgIDs{}, fmt.Errorf("%w: %s", err, why)
		}
		byID[k] = true
	}
}
