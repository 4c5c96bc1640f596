package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// Detach returns a copy of a micro request that may be answered after its
// handler has returned, from any goroutine. micro's own request is read
// by the service once the handler returns (its error statistics), so
// answering it later from another goroutine would race with that read.
// The copy answers on the request's reply subject through nc; errors it
// answers are not counted in the endpoint's statistics.
func Detach(nc *nats.Conn, req micro.Request) micro.Request {
	h := micro.Headers{}
	for k, v := range req.Headers() {
		h[k] = slices.Clone(v)
	}
	return &detached{nc: nc, data: slices.Clone(req.Data()), headers: h, subject: req.Subject(), reply: req.Reply()}
}

type detached struct {
	nc             *nats.Conn
	data           []byte
	headers        micro.Headers
	subject, reply string
}

func (d *detached) Respond(data []byte, opts ...micro.RespondOpt) error {
	m := &nats.Msg{Subject: d.reply, Data: data}
	for _, opt := range opts {
		opt(m)
	}
	if d.reply == "" {
		return errors.New("wire: respond: the request has no reply subject")
	}
	if err := d.nc.PublishMsg(m); err != nil {
		return fmt.Errorf("%w: %w", micro.ErrRespond, err)
	}
	return nil
}

func (d *detached) RespondJSON(v any, opts ...micro.RespondOpt) error {
	data, err := json.Marshal(v)
	if err != nil {
		return micro.ErrMarshalResponse
	}
	return d.Respond(data, opts...)
}

// Error answers as micro's Request.Error does: the code and description
// in the service error headers, data as the body.
func (d *detached) Error(code, description string, data []byte, opts ...micro.RespondOpt) error {
	if code == "" {
		return fmt.Errorf("%w: error code", micro.ErrArgRequired)
	}
	if description == "" {
		return fmt.Errorf("%w: description", micro.ErrArgRequired)
	}
	opts = append([]micro.RespondOpt{func(m *nats.Msg) {
		if m.Header == nil {
			m.Header = nats.Header{}
		}
		m.Header.Set(micro.ErrorHeader, description)
		m.Header.Set(micro.ErrorCodeHeader, code)
	}}, opts...)
	return d.Respond(data, opts...)
}

func (d *detached) Data() []byte           { return d.data }
func (d *detached) Headers() micro.Headers { return d.headers }
func (d *detached) Subject() string        { return d.subject }
func (d *detached) Reply() string          { return d.reply }
