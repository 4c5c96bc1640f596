package worker

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// ConnConfig is how to reach and authenticate to a NATS server; the fields
// mirror the flags and the nats CLI's (--creds, --nkey, --user, ...).
type ConnConfig struct {
	// URL is a comma-separated list of server URLs.
	URL string
	// Name is the client name the server shows.
	Name string
	// Creds is a JWT credentials file; NKey a file holding an NKey seed.
	Creds, NKey string
	// User and Password, or Token.
	User, Password, Token string
	// TLSCA is a CA bundle to verify the server with; TLSCert and TLSKey a
	// client certificate.
	TLSCA, TLSCert, TLSKey string
}

// Options returns the nats.Options of c (without the URL).
func (c *ConnConfig) Options() ([]nats.Option, error) {
	opts := []nats.Option{
		nats.Name(c.Name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectBufSize(64 << 20),
	}
	if c.Creds != "" {
		opts = append(opts, nats.UserCredentials(c.Creds))
	}
	if c.NKey != "" {
		o, err := nats.NkeyOptionFromSeed(c.NKey)
		if err != nil {
			return nil, fmt.Errorf("--nkey %s: %w", c.NKey, err)
		}
		opts = append(opts, o)
	}
	if c.User != "" || c.Password != "" {
		opts = append(opts, nats.UserInfo(c.User, c.Password))
	}
	if c.Token != "" {
		opts = append(opts, nats.Token(c.Token))
	}
	if c.TLSCA != "" {
		opts = append(opts, nats.RootCAs(c.TLSCA))
	}
	if c.TLSCert != "" || c.TLSKey != "" {
		if c.TLSCert == "" || c.TLSKey == "" {
			return nil, fmt.Errorf("a TLS client certificate needs both --tls-cert and --tls-key")
		}
		opts = append(opts, nats.ClientCert(c.TLSCert, c.TLSKey))
	}
	return opts, nil
}

// Connect connects to c.URL with c's options plus extra. Every command
// that talks to NATS connects here, so its error names what failed
// without this package's prefix ("connect to URL: ..."): a client
// command's user is not running a worker.
func (c *ConnConfig) Connect(extra ...nats.Option) (*nats.Conn, error) {
	opts, err := c.Options()
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(c.URL, append(opts, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", c.URL, connectHint(AuthHint(err)))
	}
	return nc, nil
}

// connectHint adds to a failure to reach any server where the URL comes
// from.
func connectHint(err error) error {
	if errors.Is(err, nats.ErrNoServers) {
		return fmt.Errorf("%w (is a NATS server running there? --nats URL or NATS_URL says where; emsf serve --embedded or emsf fit --embedded start one)", err)
	}
	return err
}

// AuthHint adds to an authentication or authorization failure of the
// server (a connection refused for its credentials, or a subject the user
// may not use) which flags give the credentials; other errors are
// returned as they are.
func AuthHint(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) ||
		errors.Is(err, nats.ErrPermissionViolation) || strings.Contains(strings.ToLower(err.Error()), "authorization") {
		return fmt.Errorf("%w (authorization: the NATS server refused these credentials or this subject; check --creds, --nkey, --user with --password-file or NATS_PASSWORD, --token-file or NATS_TOKEN, and the user's permissions)", err)
	}
	return err
}
