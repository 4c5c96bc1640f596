package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/coordinator/query"
	"github.com/emsf/emsf/worker/wire"
)

// Asking the served model (DESIGN §6; spec ask-the-model §3): every
// question of package query is an endpoint of the micro service,
//
//	P.NAME.q.topk  .next  .prob  .member  .reduced  .stationary  .plan  .vocab
//
// JSON in, JSON out, answered from the latest version (a request's
// "version" may pin it, or the one before it; any other is a 409). A
// query.Engine is built for each new version off the request path (on a
// goroutine of queries, when the version is made or restored at start)
// and swapped in atomically: a request loads the engine once and is
// answered from it alone, and queries keep using the previous version
// while the next one's index builds. Handlers only hand requests to a
// pool of workers (queryWorkers) through a bounded queue, so one slow
// answer does not hold the others up; when the queue is full the request
// gets a 503 at once. Errors carry query.Error's code (micro's
// Nats-Service-Error-Code header) and message.

// QuerySubject is the subject of a query endpoint of model name.
func QuerySubject(prefix, name, endpoint string) string {
	return prefix + "." + name + ".q." + endpoint
}

// queryQueue is how many requests per worker may wait for one.
const queryQueue = 8

// queryWorkers is the size of the pool answering queries on procs
// (GOMAXPROCS) threads: four per thread. A worker does not only compute:
// it writes its reply on the service's NATS connection, whose lock the
// connection's flusher holds through each write to the socket, so with
// one worker per thread the threads sat idle while their workers
// waited for the connection. Measured with emsf query --load --embedded
// (16 clients, n = 10^6, 2 cores; docs/benchmarks.md): p99 5.1 ms with 2
// workers, 3.5 ms with 8, and more answers per second.
func queryWorkers(procs int) int {
	return 4 * max(1, procs)
}

// queries serves the query endpoints of one model name.
type queries struct {
	name string
	nc   *nats.Conn // the replies go out on it
	log  hclog.Logger
	cur  atomic.Pointer[query.Engine] // the latest version's, nil before the first
	prev atomic.Pointer[query.Engine] // the one before it
	jobs chan queryJob

	mu      sync.Mutex
	pending *arrowio.ModelFile // the newest version waiting for its engine
	pendV   int
	kick    chan struct{}
	wg      sync.WaitGroup
}

type queryJob struct {
	endpoint string
	req      micro.Request
}

// startQueries adds the query endpoints of model name to svc (on nc) and
// starts the workers and the engine builder; they stop with ctx, and wg
// waits for them.
func startQueries(ctx context.Context, nc *nats.Conn, log hclog.Logger, prefix, name string, svc micro.Service, wg *sync.WaitGroup) (*queries, error) {
	workers := queryWorkers(runtime.GOMAXPROCS(0))
	q := &queries{name: name, nc: nc, log: log, jobs: make(chan queryJob, queryQueue*workers), kick: make(chan struct{}, 1)}
	g := svc.AddGroup(prefix + "." + name + ".q")
	for _, ep := range query.Endpoints {
		handler := micro.HandlerFunc(func(req micro.Request) {
			// Answered by a worker: a detached copy (micro reads its own
			// request once this handler returns).
			select {
			case q.jobs <- queryJob{ep, wire.Detach(nc, req)}:
			case <-ctx.Done():
				_ = req.Error("503", "service stopping", nil)
			default:
				_ = req.Error("503", fmt.Sprintf("busy: %d questions are waiting; ask again", cap(q.jobs)), nil)
			}
		})
		if err := g.AddEndpoint(ep, handler, micro.WithEndpointMetadata(map[string]string{"answers": "JSON, see go doc ./coordinator/query"})); err != nil {
			return nil, fmt.Errorf("service: query endpoint %s: %w", ep, err)
		}
	}
	for range workers {
		wg.Go(func() { q.work(ctx) })
	}
	wg.Go(func() { q.builder(ctx) })
	return q, nil
}

// work answers queued requests until ctx is done, then refuses the rest.
func (q *queries) work(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			for {
				select {
				case j := <-q.jobs:
					_ = j.req.Error("503", "service stopping", nil)
				default:
					return
				}
			}
		case j := <-q.jobs:
			q.answer(j)
		}
	}
}

// answer answers one request from the engine of the version it asks for.
func (q *queries) answer(j queryJob) {
	var pin struct {
		Version int `json:"version"`
	}
	_ = json.Unmarshal(j.req.Data(), &pin) // a malformed body is the engine's 400
	e := q.cur.Load()
	if e == nil {
		_ = j.req.Error("503", fmt.Sprintf("model %s has no version yet: publish transitions and retrain", q.name), nil)
		return
	}
	if pin.Version != 0 && pin.Version != e.Version() {
		if p := q.prev.Load(); p != nil && p.Version() == pin.Version {
			e = p
		} else {
			_ = j.req.Error("409", fmt.Sprintf("version %d is not served: ask for the latest, %d, or the one before it", pin.Version, e.Version()), nil)
			return
		}
	}
	out, err := e.Do(j.endpoint, j.req.Data())
	var qe *query.Error
	switch {
	case errors.As(err, &qe):
		_ = j.req.Error(qe.Code, qe.Msg, nil)
	case err != nil:
		_ = j.req.Error("500", err.Error(), nil)
	default:
		if err := j.req.Respond(out); err != nil {
			q.log.Debug("query reply", "endpoint", j.endpoint, "error", err)
		}
	}
}

// version hands a new model version to the builder (nil-safe: a service
// not running its endpoints ignores it). Called from Run's goroutine.
func (q *queries) version(v int, mf *arrowio.ModelFile) {
	if q == nil {
		return
	}
	q.mu.Lock()
	q.pending, q.pendV = mf, v
	q.mu.Unlock()
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// builder builds the engine of the newest version handed over and swaps
// it in; a version that another overtakes while it waits is skipped.
func (q *queries) builder(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-q.kick:
		}
		q.mu.Lock()
		mf, v := q.pending, q.pendV
		q.pending = nil
		q.mu.Unlock()
		if mf == nil {
			continue
		}
		if err := q.build(mf, v); err != nil {
			q.log.Error("query index", "version", v, "error", err)
		}
	}
}

// build builds the engine of version v and swaps it in.
func (q *queries) build(mf *arrowio.ModelFile, v int) error {
	e, err := query.New(mf, v, query.Options{MaxAnswerBytes: int(q.nc.MaxPayload()) - 1024, Workers: runtime.GOMAXPROCS(0)})
	if err != nil {
		return err
	}
	if old := q.cur.Swap(e); old != nil {
		q.prev.Store(old)
	}
	q.log.Info("query index ready", "version", v, "index_bytes", e.IndexBytes())
	return nil
}

// ServeQueries answers the query endpoints of model name (subjects
// QuerySubject(prefix, name, ·)) from one model file, as version 1, on
// a micro service "emsf-query" of nc until ctx is done: the handlers,
// queue and workers of emsf serve's query endpoints, without its counts,
// retraining or stored versions. emsf query --load --embedded measures
// the endpoints with it on a model file. The engine is built before it
// returns, and the server has its subscriptions; wait returns once ctx
// is done and the workers have stopped. A nil log logs nothing.
func ServeQueries(ctx context.Context, nc *nats.Conn, prefix, name, version string, mf *arrowio.ModelFile, log hclog.Logger) (wait func(), err error) {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	svc, err := micro.AddService(nc, micro.Config{
		Name: "emsf-query", Version: version,
		Description: "emsf query endpoints of a model file",
		Metadata:    map[string]string{"model": name},
	})
	if err != nil {
		return nil, fmt.Errorf("service: micro service: %w", err)
	}
	var wg sync.WaitGroup
	qctx, cancel := context.WithCancel(ctx)
	stop := func() {
		cancel()
		wg.Wait()
		_ = svc.Stop()
		// The server has dropped the endpoints' subscriptions when stop
		// returns: a question asked after it gets no responders, not a
		// subscription the client already left (a timeout).
		_ = nc.FlushTimeout(30 * time.Second)
	}
	q, err := startQueries(qctx, nc, log, prefix, name, svc, &wg)
	if err == nil {
		err = q.build(mf, 1)
	}
	if err == nil { // the server has the endpoints' subscriptions when this returns
		err = nc.FlushTimeout(30 * time.Second)
	}
	if err != nil {
		stop()
		return nil, fmt.Errorf("service: %w", err)
	}
	return func() {
		<-ctx.Done()
		stop()
	}, nil
}
