package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/emsf/emsf/coordinator/service"
)

// operatorServer starts a NATS server in operator (JWT) mode with one
// account (JetStream enabled) and returns its URL and a function that
// writes a credentials file (nsc's format) of a new user of that account,
// or of an account the server does not trust when rogue.
func operatorServer(t *testing.T) (string, func(name string, rogue bool) string) {
	t.Helper()
	okp, _ := nkeys.CreateOperator()
	opub, _ := okp.PublicKey()
	oc := jwt.NewOperatorClaims(opub)
	oc.Name = "emsf-test"
	ojwt, err := oc.Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	claims, err := jwt.DecodeOperatorClaims(ojwt)
	if err != nil {
		t.Fatal(err)
	}
	account := func(signer nkeys.KeyPair) (nkeys.KeyPair, string) {
		akp, _ := nkeys.CreateAccount()
		apub, _ := akp.PublicKey()
		ac := jwt.NewAccountClaims(apub)
		ac.Name = "emsf"
		ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
		ajwt, err := ac.Encode(signer)
		if err != nil {
			t.Fatal(err)
		}
		return akp, ajwt
	}
	akp, ajwt := account(okp)
	apub, _ := akp.PublicKey()
	resolver := &natsserver.MemAccResolver{}
	if err := resolver.Store(apub, ajwt); err != nil {
		t.Fatal(err)
	}
	// The system account (the server's own), without JetStream.
	skp, _ := nkeys.CreateAccount()
	spub, _ := skp.PublicKey()
	sjwt, err := jwt.NewAccountClaims(spub).Encode(okp)
	if err != nil {
		t.Fatal(err)
	}
	if err := resolver.Store(spub, sjwt); err != nil {
		t.Fatal(err)
	}
	srv, err := natsserver.NewServer(&natsserver.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true,
		TrustedOperators: []*jwt.OperatorClaims{claims}, AccountResolver: resolver, SystemAccount: spub,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	dir := t.TempDir()
	creds := func(name string, rogue bool) string {
		signer := akp
		if rogue {
			rokp, _ := nkeys.CreateOperator()
			signer, _ = account(rokp)
		}
		ukp, _ := nkeys.CreateUser()
		upub, _ := ukp.PublicKey()
		uc := jwt.NewUserClaims(upub)
		uc.Name = name
		ujwt, err := uc.Encode(signer)
		if err != nil {
			t.Fatal(err)
		}
		seed, _ := ukp.Seed()
		b, err := jwt.FormatUserConfig(ujwt, seed)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, name+".creds")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	return srv.ClientURL(), creds
}

// --creds with a real credentials file (a user JWT signed by an account of
// a trusted operator, and its seed): publish, retrain and model get work
// against a service connected the same way; a user of an account the
// server does not trust is refused with the word authorization.
func TestServeCredsJWT(t *testing.T) {
	url, creds := operatorServer(t)
	svcCreds := creds("service", false)
	nc, err := nats.Connect(url, nats.UserCredentials(svcCreds))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	startService(t, nc, service.Config{Name: "jwt", Order: 2, MaxIter: 2, UseWorkers: service.WorkersNever})
	dir := t.TempDir()
	data := filepath.Join(dir, "t.csv")
	if err := os.WriteFile(data, []byte("state,action,next_state\n0,0,1\n1,0,0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	user := creds("client", false)
	for _, args := range [][]string{
		{"publish", "--name", "jwt", "--input", data},
		{"retrain", "--name", "jwt"},
		{"model", "get", "jwt", "--out", filepath.Join(dir, "m.arrow")},
	} {
		var stdout, stderr bytes.Buffer
		full := append(args, "--nats", url, "--creds", user)
		if rc := run(full, &stdout, &stderr); rc != 0 {
			t.Fatalf("emsf %s: exit %d: %s", strings.Join(full, " "), rc, stderr.String())
		}
	}
	var stdout, stderr bytes.Buffer
	rc := run([]string{"model", "status", "jwt", "--nats", url, "--creds", creds("rogue", true)}, &stdout, &stderr)
	if rc != 1 || !strings.Contains(stderr.String(), "authorization") {
		t.Fatalf("a user of an untrusted account: exit %d, %q", rc, stderr.String())
	}
}
