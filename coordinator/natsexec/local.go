package natsexec

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/emsf/emsf/worker"
)

// LocalClusterConfig configures StartLocalCluster.
type LocalClusterConfig struct {
	// StoreDir is the embedded server's store directory (required).
	StoreDir string
	// Workers is the number of in-process workers (at least 1).
	Workers int
	// InProcess connects workers and coordinator through in-process
	// connections instead of 127.0.0.1 TCP.
	InProcess bool
	// Exec configures the executor (prefix, buckets, logger).
	Exec Config
	// Logger receives the workers' logs (default: none).
	Logger hclog.Logger
	// Sync makes the server fsync every write (see EmbeddedConfig.NoSync);
	// worth it only when StoreDir outlives the process.
	Sync bool
}

// LocalCluster is a whole cluster in this process: an embedded NATS
// server, Workers workers each on its own connection, and an Executor.
// Close stops them in reverse order.
type LocalCluster struct {
	Server  *server.Server
	Workers []*worker.Worker
	Exec    *Executor

	conns []*nats.Conn
}

// StartLocalCluster starts an embedded server and the workers, and waits
// until the executor's census finds them all.
func StartLocalCluster(ctx context.Context, cfg LocalClusterConfig) (lc *LocalCluster, err error) {
	s, err := StartEmbedded(EmbeddedConfig{StoreDir: cfg.StoreDir, NoSync: !cfg.Sync})
	if err != nil {
		return nil, err
	}
	lc = &LocalCluster{Server: s}
	defer func() {
		if err != nil {
			lc.Close()
		}
	}()
	connect := func(name string) (*nats.Conn, error) {
		var nc *nats.Conn
		var err error
		if cfg.InProcess {
			nc, err = nats.Connect("", nats.InProcessServer(s), nats.Name(name))
		} else {
			nc, err = nats.Connect(s.ClientURL(), nats.Name(name))
		}
		if err != nil {
			return nil, fmt.Errorf("natsexec: connect %s: %w", name, err)
		}
		lc.conns = append(lc.conns, nc)
		return nc, nil
	}
	logger := cfg.Logger
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	for k := range max(cfg.Workers, 1) {
		nc, err := connect(fmt.Sprintf("emsf-worker-%d", k))
		if err != nil {
			return lc, err
		}
		w, err := worker.Start(ctx, nc, worker.Config{Prefix: cfg.Exec.Prefix, Logger: logger})
		if err != nil {
			return lc, err
		}
		lc.Workers = append(lc.Workers, w)
	}
	nc, err := connect("emsf-coordinator")
	if err != nil {
		return lc, err
	}
	if lc.Exec, err = New(ctx, nc, cfg.Exec); err != nil {
		return lc, err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		ids, err := lc.Exec.Census(ctx)
		if err != nil {
			return lc, err
		}
		if len(ids) == len(lc.Workers) {
			return lc, nil
		}
		if time.Now().After(deadline) {
			return lc, fmt.Errorf("natsexec: %d of %d local workers answer", len(ids), len(lc.Workers))
		}
	}
}

// URL returns the server's client URL (empty when it does not listen).
func (lc *LocalCluster) URL() string { return lc.Server.ClientURL() }

// Close stops the executor and the workers, drains their connections and
// shuts the server down.
func (lc *LocalCluster) Close() error {
	var errs []error
	if lc.Exec != nil {
		lc.Exec.Close()
	}
	for _, w := range lc.Workers {
		errs = append(errs, w.Stop())
	}
	for _, nc := range lc.conns {
		closed := make(chan struct{})
		nc.SetClosedHandler(func(*nats.Conn) { close(closed) })
		if err := nc.Drain(); err != nil {
			nc.Close()
			continue
		}
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			nc.Close()
		}
	}
	lc.Server.Shutdown()
	lc.Server.WaitForShutdown()
	return errors.Join(errs...)
}
