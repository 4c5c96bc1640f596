package service

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/micro"
)

// RetrainRequest is the optional JSON body of a retrain request. With no
// body (or AfterSeq 0) the version includes every message the stream held
// when the request arrived: the service looks the stream's last sequence
// up and waits for ingestion to reach it, at most Wait (default
// DefaultCatchUpWait), before it retrains.
type RetrainRequest struct {
	// AfterSeq is the stream sequence the version must include (emsf
	// publish prints the one it reached); 0: the stream's last.
	AfterSeq uint64 `json:"after_seq,omitempty"`
	// Wait is how long to wait for ingestion to reach AfterSeq, as a Go
	// duration ("90s"); the reply is an error (code 504) after it.
	Wait string `json:"wait,omitempty"`
}

// DefaultCatchUpWait is how long a retrain request waits for ingestion to
// reach its sequence when it does not say.
const DefaultCatchUpWait = 2 * time.Minute

// parked is a retrain request waiting for ingestion to reach after.
type parked struct {
	req      micro.Request
	after    uint64
	since    time.Time
	deadline time.Time
}

// retrainRequest decodes a retrain request's body and resolves AfterSeq 0
// to the stream's last sequence now (it runs on the request's goroutine:
// the stream lookup is a round trip). It returns the micro error code of
// an error.
func (s *Service) retrainRequest(ctx context.Context, body []byte) (parked, string, error) {
	var rr RetrainRequest
	if len(body) > 0 {
		if err := json.Unmarshal(body, &rr); err != nil {
			return parked{}, "400", fmt.Errorf("service: %s: retrain request: want empty or JSON {\"after_seq\": N, \"wait\": \"90s\"}: %w", s.cfg.Name, err)
		}
	}
	wait := DefaultCatchUpWait
	if rr.Wait != "" {
		d, err := time.ParseDuration(rr.Wait)
		if err != nil || d < 0 {
			return parked{}, "400", fmt.Errorf("service: %s: retrain request: wait %q: want a duration >= 0 such as \"90s\"", s.cfg.Name, rr.Wait)
		}
		wait = d
	}
	p := parked{after: rr.AfterSeq, since: time.Now()}
	p.deadline = p.since.Add(wait)
	if p.after == 0 {
		ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		info, err := s.stream.Info(ictx)
		if err != nil {
			return parked{}, "503", fmt.Errorf("service: %s: retrain: the stream's last sequence: %w", s.cfg.Name, err)
		}
		p.after = info.State.LastSeq
	}
	return p, "", nil
}

// retrainAfter retrains for a request once ingestion has reached its
// sequence, parking it until then.
func (s *Service) retrainAfter(ctx context.Context, p parked, req micro.Request) {
	p.req = req
	if s.seq >= p.after {
		s.retrain(ctx, "request", req)
		return
	}
	s.parked = append(s.parked, p)
}

// unpark hands the parked requests whose sequence ingestion has reached
// to retrain, and fails those past their deadline.
func (s *Service) unpark(ctx context.Context, now time.Time) {
	if len(s.parked) == 0 {
		return
	}
	var late []parked
	keep := s.parked[:0]
	for _, p := range s.parked {
		switch {
		case s.seq >= p.after:
			s.retrain(ctx, "request", p.req)
		case now.After(p.deadline):
			late = append(late, p)
		default:
			keep = append(keep, p)
		}
	}
	clear(s.parked[len(keep):])
	s.parked = keep
	if len(late) == 0 {
		return
	}
	// A status request after the reply sees the request gone (status is
	// served from the snapshot, taken otherwise after this loop turn).
	s.snapshot()
	for _, p := range late {
		_ = p.req.Error("504", fmt.Sprintf("service: %s: ingestion reached stream sequence %d of the %d asked for within %v; ask again later (or retrain with --after-seq %d)",
			s.cfg.Name, s.seq, p.after, p.deadline.Sub(p.since).Round(time.Millisecond), s.seq), nil)
	}
}
