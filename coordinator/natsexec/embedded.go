package natsexec

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// EmbeddedConfig configures an embedded NATS server.
type EmbeddedConfig struct {
	// StoreDir is JetStream's store directory; required (no default in
	// the working directory).
	StoreDir string
	// Host is the listen address (default 127.0.0.1: never all
	// interfaces); Port the port (default -1: a random free port).
	// DontListen serves in-process connections only.
	Host       string
	Port       int
	DontListen bool
	// MaxMemory and MaxStore limit JetStream (defaults 256 MiB and 16
	// GiB); MaxPayload the message size (default 1 MiB).
	MaxMemory, MaxStore int64
	MaxPayload          int32
	// NoSync turns off fsync on every write (the default syncs always:
	// committed state must survive an OS crash).
	NoSync bool
}

// StartEmbedded starts a NATS server with JetStream in this process and
// waits until it accepts connections. Shut it down with Shutdown.
func StartEmbedded(cfg EmbeddedConfig) (*server.Server, error) {
	if cfg.StoreDir == "" {
		return nil, fmt.Errorf("natsexec: embedded server needs a store directory")
	}
	if err := os.MkdirAll(cfg.StoreDir, 0o755); err != nil {
		return nil, fmt.Errorf("natsexec: store directory: %w", err)
	}
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if cfg.Port == 0 {
		cfg.Port = -1
	}
	if cfg.MaxMemory == 0 {
		cfg.MaxMemory = 256 << 20
	}
	if cfg.MaxStore == 0 {
		cfg.MaxStore = 16 << 30
	}
	if cfg.MaxPayload == 0 {
		cfg.MaxPayload = 1 << 20
	}
	opts := &server.Options{
		ServerName:         "emsf-embedded",
		Host:               cfg.Host,
		Port:               cfg.Port,
		DontListen:         cfg.DontListen,
		JetStream:          true,
		StoreDir:           cfg.StoreDir,
		JetStreamMaxMemory: cfg.MaxMemory,
		JetStreamMaxStore:  cfg.MaxStore,
		MaxPayload:         cfg.MaxPayload,
		SyncAlways:         !cfg.NoSync,
		NoSigs:             true,
		NoLog:              true,
		MaxConn:            1024,
	}
	if !cfg.DontListen && cfg.Port > 0 {
		// The server would only log a busy port and never become ready:
		// say so at once.
		ln, err := net.Listen("tcp", net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port)))
		if err != nil {
			return nil, fmt.Errorf("natsexec: embedded server: %w", err)
		}
		_ = ln.Close()
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("natsexec: embedded server: %w", err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("natsexec: embedded server did not start within 10s")
	}
	return s, nil
}
