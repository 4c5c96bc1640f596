package natsexec

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
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
	// Exec configures the executor (prefix, buckets, logger); the
	// workers' StartWorker takes the same prefix.
	Exec Config
	// Sync makes the server fsync every write (see EmbeddedConfig.NoSync);
	// worth it only when StoreDir outlives the process.
	Sync bool
	// MaxStore limits the server's JetStream file storage
	// (EmbeddedConfig.MaxStore: max_file_store; default 16 GiB).
	MaxStore int64
}

// LocalWorker is what a local cluster needs of its workers.
type LocalWorker interface {
	Stop() error
}

// StartWorker starts one worker of a local cluster on connection nc (the
// worker's own: the cluster drains it after Stop). Package worker's
// Starter makes one: the coordinator's code speaks to workers through the
// protocol only and does not import them (DESIGN §3), so whoever builds a
// whole cluster in one process (cmd/emsf, tests) brings them.
type StartWorker[W LocalWorker] func(ctx context.Context, nc *nats.Conn) (W, error)

// LocalCluster is a whole cluster in this process: an embedded NATS
// server, Workers workers each on its own connection, and an Executor.
// Close stops them in reverse order.
type LocalCluster[W LocalWorker] struct {
	Server  *server.Server
	Workers []W
	Exec    *Executor

	conns []*nats.Conn
}

// StartLocalCluster starts an embedded server and cfg.Workers workers
// (start), and waits until the executor's census finds them all.
func StartLocalCluster[W LocalWorker](ctx context.Context, cfg LocalClusterConfig, start StartWorker[W]) (lc *LocalCluster[W], err error) {
	s, err := StartEmbedded(EmbeddedConfig{StoreDir: cfg.StoreDir, NoSync: !cfg.Sync, MaxStore: cfg.MaxStore})
	if err != nil {
		return nil, err
	}
	lc = &LocalCluster[W]{Server: s}
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
	for k := range max(cfg.Workers, 1) {
		nc, err := connect(fmt.Sprintf("emsf-worker-%d", k))
		if err != nil {
			return lc, err
		}
		w, err := start(ctx, nc)
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
func (lc *LocalCluster[W]) URL() string { return lc.Server.ClientURL() }

// Close stops the executor and the workers, drains their connections and
// shuts the server down.
func (lc *LocalCluster[W]) Close() error {
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
