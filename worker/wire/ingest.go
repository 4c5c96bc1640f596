package wire

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/emsf/emsf/worker/ingestwire"
)

// The distributed ingest's transport (messages in package ingestwire): a
// worker serves IngestSubject(prefix, job, its id); a request names its
// op in the header ingestwire.HeaderOp and is JSON, and so is its reply,
// except the segments of a pull and the rows of a tail, which are binary
// with the pull's ingestwire.PullReply in the header HeaderPull. An error
// reply has an empty body and the error in ingestwire.HeaderError, its
// kind in HeaderIngestCode.

// IngestSubject is the subject of worker id's ingest endpoint for job.
func IngestSubject(prefix, job, id string) string { return prefix + ".ingest." + job + "." + id }

// HeaderPull carries a pull reply's ingestwire.PullReply (JSON);
// HeaderIngestCode an error reply's kind.
// HeaderIngestObject the object an IngestCorrupt reply found corrupt.
const (
	HeaderPull         = "Emsf-Ingest-Pull"
	HeaderIngestCode   = "Emsf-Ingest-Code"
	HeaderIngestObject = "Emsf-Ingest-Object"
)

// Kinds of ingest error replies.
const (
	// IngestStale: the request's epoch is over on the worker.
	IngestStale = "stale"
	// IngestNotYet: the worker has not started the request's epoch.
	IngestNotYet = "notyet"
	// IngestCorrupt: an object the request read failed its check
	// (HeaderIngestObject names it).
	IngestCorrupt = "corrupt"
)

// CheckJob returns an error unless job is a valid subject token.
func CheckJob(job string) error {
	if !namePattern.MatchString(job) {
		return fmt.Errorf("wire: job name %q: want letters, digits, '-' and '_'", job)
	}
	return nil
}

// IngestError is an error reply of a worker's ingest endpoint.
type IngestError struct {
	Code, Msg string
	// Object is the object an IngestCorrupt error found corrupt.
	Object string
}

func (e *IngestError) Error() string { return e.Msg }

// IngestCode returns the kind of an ingest error reply in err's chain
// ("" when there is none).
func IngestCode(err error) string {
	var ie *IngestError
	if errors.As(err, &ie) {
		return ie.Code
	}
	return ""
}

// IngestCall sends request req of op to subject and returns the reply's
// body, or its error (*IngestError for an error reply).
func IngestCall(ctx context.Context, nc *nats.Conn, subject, op string, req any) (*nats.Msg, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("wire: ingest %s: %w", op, err)
	}
	m := nats.NewMsg(subject)
	m.Header.Set(ingestwire.HeaderOp, op)
	m.Data = body
	rep, err := nc.RequestMsgWithContext(ctx, m)
	if err != nil {
		return nil, err
	}
	if msg := rep.Header.Get(ingestwire.HeaderError); msg != "" {
		return nil, &IngestError{Code: rep.Header.Get(HeaderIngestCode), Msg: msg, Object: rep.Header.Get(HeaderIngestObject)}
	}
	return rep, nil
}

// IngestCallJSON is IngestCall with the reply decoded into out.
func IngestCallJSON(ctx context.Context, nc *nats.Conn, subject, op string, req, out any) error {
	rep, err := IngestCall(ctx, nc, subject, op, req)
	if err != nil {
		return err
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(rep.Data, out); err != nil {
		return fmt.Errorf("wire: ingest %s: bad reply: %w", op, err)
	}
	return nil
}

// IngestErrorReply returns the reply message of err: its text (one line)
// in the error header, its kind in the code header.
func IngestErrorReply(err error, code string) *nats.Msg {
	m := nats.NewMsg("")
	m.Header.Set(ingestwire.HeaderError, strings.ReplaceAll(err.Error(), "\n", " "))
	if code != "" {
		m.Header.Set(HeaderIngestCode, code)
	}
	return m
}
