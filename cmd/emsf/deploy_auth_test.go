package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/coordinator/service"
	"github.com/emsf/emsf/worker"
)

// authServer starts a NATS server with JetStream on loopback whose users
// and permissions are deploy/nats/auth.conf's, every role's password
// "pw-ROLE".
func authServer(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	auth, err := os.ReadFile(filepath.Join("..", "..", "deploy", "nats", "auth.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "auth.conf"), auth, 0o644); err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf("listen: 127.0.0.1:-1\njetstream { store_dir: %q }\ninclude ./auth.conf\n", filepath.Join(dir, "js"))
	if err := os.WriteFile(filepath.Join(dir, "server.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, role := range []string{"WORKER", "COORDINATOR", "SERVICE", "PUBLISHER", "READER"} {
		t.Setenv("EMSF_"+role+"_PASSWORD", "pw-"+strings.ToLower(role))
	}
	opts, err := natsserver.ProcessConfigFile(filepath.Join(dir, "server.conf"))
	if err != nil {
		t.Fatal(err)
	}
	opts.NoSigs, opts.NoLog = true, true
	srv, err := natsserver.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	return srv.ClientURL()
}

// The deploy/ users and permissions: without credentials nothing works;
// the service role serves, the publisher publishes and asks for a
// retrain, the reader fetches the model; the publisher can neither
// subscribe to task subjects nor write the model bucket. Every refusal
// says "authorization".
func TestDeployAuthorization(t *testing.T) {
	url := authServer(t)
	t.Setenv("NATS_URL", url)
	if _, err := nats.Connect(url); err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Fatalf("anonymous connection: %v", err)
	}
	svcConn, err := nats.Connect(url, nats.UserInfo("service", "pw-service"))
	if err != nil {
		t.Fatal(err)
	}
	defer svcConn.Close()
	startService(t, svcConn, service.Config{Name: "auth", Order: 2, MaxIter: 2, UseWorkers: service.WorkersNever})

	dir := t.TempDir()
	data := filepath.Join(dir, "t.csv")
	if err := os.WriteFile(data, []byte("state,action,next_state\n0,0,1\n1,1,2\n2,0,0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pwFile := filepath.Join(dir, "publisher.pw")
	if err := os.WriteFile(pwFile, []byte("pw-publisher\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	emsf := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		rc := run(args, &stdout, &stderr)
		return rc, stdout.String(), stderr.String()
	}
	if rc, _, errOut := emsf("publish", "--name", "auth", "--input", data, "--user", "publisher", "--password-file", pwFile); rc != 0 {
		t.Fatalf("publish as publisher: exit %d: %s", rc, errOut)
	}
	if rc, _, errOut := emsf("retrain", "--name", "auth", "--user", "publisher", "--password-file", pwFile); rc != 0 {
		t.Fatalf("retrain as publisher: exit %d: %s", rc, errOut)
	}
	t.Setenv("NATS_USER", "reader")
	t.Setenv("NATS_PASSWORD", "pw-reader")
	for _, args := range [][]string{{"model", "get", "auth", "--out", filepath.Join(dir, "m.arrow")}, {"model", "list", "auth"}, {"model", "status", "auth"}} {
		if rc, _, errOut := emsf(args...); rc != 0 {
			t.Fatalf("emsf %s as reader: exit %d: %s", strings.Join(args, " "), rc, errOut)
		}
	}
	// Wrong credentials: every command says authorization.
	t.Setenv("NATS_PASSWORD", "wrong")
	for _, args := range [][]string{
		{"publish", "--name", "auth", "--input", data},
		{"retrain", "--name", "auth"},
		{"model", "status", "auth"},
		{"serve", "--name", "auth2"},
		{"worker"},
		{"fit", "--input", data, "--order", "2", "--out", filepath.Join(dir, "f.arrow"), "--nats", url},
	} {
		done := make(chan struct{})
		var rc int
		var out, errOut string
		go func() {
			defer close(done)
			rc, out, errOut = emsf(args...)
		}()
		select {
		case <-done:
		case <-time.After(2 * time.Minute):
			t.Fatalf("emsf %s with a wrong password did not exit", strings.Join(args, " "))
		}
		if rc == 0 || !strings.Contains(errOut, "authorization") || strings.Contains(out, "ready") {
			t.Errorf("emsf %s with a wrong password: exit %d, stdout %q, stderr %q; want the word authorization (and no ready)", strings.Join(args, " "), rc, out, errOut)
		}
	}

	// What a publisher may not do.
	perr := make(chan error, 16)
	pub, err := nats.Connect(url, nats.UserInfo("publisher", "pw-publisher"), nats.PermissionErrOnSubscribe(true),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case perr <- err:
			default:
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	for _, subj := range []string{"emsf.task", "emsf.task.w1", "emsf.blob.x", "emsf.auth.transitions"} {
		sub, err := pub.SubscribeSync(subj)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sub.NextMsg(10 * time.Second); !errors.Is(err, nats.ErrPermissionViolation) {
			t.Errorf("publisher subscribing to %s: %v, want a permissions violation", subj, err)
		}
	}
	js, _ := jetstream.New(pub)
	ctx := func() context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		t.Cleanup(cancel)
		return ctx
	}
	// Stream info is allowed (publish checks the stream); a write is not.
	if obs, err := js.ObjectStore(ctx(), service.DefaultModelBucket); err == nil {
		if _, err := obs.PutBytes(ctx(), "auth/models/1", []byte("forged")); err == nil {
			t.Error("the publisher wrote into the model bucket")
		}
	}
	if _, err := js.Publish(ctx(), "$O."+service.DefaultModelBucket+".C.forged", []byte("x")); err == nil {
		t.Error("the publisher wrote a chunk into the model bucket")
	}
	if kv, err := js.KeyValue(ctx(), service.DefaultStateBucket); err == nil {
		if _, err := kv.Put(ctx(), service.LatestKey("auth"), []byte("{}")); err == nil {
			t.Error("the publisher wrote the latest version")
		}
	}
	if _, err := js.CreateStream(ctx(), jetstream.StreamConfig{Name: "STEAL", Subjects: []string{"emsf.task"}}); err == nil {
		t.Error("the publisher created a stream on the task subject")
	}
	// The model bucket holds exactly what the service wrote.
	sjs, _ := jetstream.New(svcConn)
	obs, err := sjs.ObjectStore(ctx(), service.DefaultModelBucket)
	if err != nil {
		t.Fatal(err)
	}
	infos, err := obs.List(ctx())
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range infos {
		if in.Name != service.ModelObject("auth", 1) && in.Name != service.StateObject("auth") {
			t.Errorf("unexpected object %q in the model bucket", in.Name)
		}
	}
	if f, err := service.OpenStoresReadOnly(ctx(), sjs, service.DefaultStateBucket, service.DefaultModelBucket); err != nil {
		t.Fatal(err)
	} else if _, err := f.Get(ctx(), "auth", 1); err != nil {
		t.Errorf("version 1 after the publisher's attempts: %v", err)
	}
}

// The shipped cluster configs need credentials (the five role users) and
// keep monitoring on loopback.
func TestDeployConfigsNeedCredentials(t *testing.T) {
	for _, role := range []string{"WORKER", "COORDINATOR", "SERVICE", "PUBLISHER", "READER"} {
		t.Setenv("EMSF_"+role+"_PASSWORD", "pw")
	}
	for i := 1; i <= 3; i++ {
		path := filepath.Join("..", "..", "deploy", "nats", fmt.Sprintf("nats-%d.conf", i))
		opts, err := natsserver.ProcessConfigFile(path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(opts.Users) != 5 || opts.NoAuthUser != "" || opts.Authorization != "" {
			t.Errorf("%s: %d users, no-auth user %q", path, len(opts.Users), opts.NoAuthUser)
		}
		for _, u := range opts.Users {
			if u.Permissions == nil || u.Password != "pw" {
				t.Errorf("%s: user %s has no permissions or no password from the environment", path, u.Username)
			}
		}
		if opts.HTTPHost != "127.0.0.1" {
			t.Errorf("%s: monitoring on %q, want 127.0.0.1", path, opts.HTTPHost)
		}
	}
}

// TestDeployAuthorizationClusterFit: under the deploy/ permissions, a
// worker logged in as "worker" and a coordinator as "coordinator" run a
// fit with each exchange, bitwise the local fit: the worker role has
// every subject and bucket the owners exchange needs (own, gather,
// checkpoints), and no more than the coordinator exchange's plus those.
func TestDeployAuthorizationClusterFit(t *testing.T) {
	url := authServer(t)
	var errs []error
	var emu sync.Mutex
	nc, err := nats.Connect(url, nats.UserInfo("worker", "pw-worker"), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		emu.Lock()
		errs = append(errs, err)
		emu.Unlock()
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	w, err := worker.Start(context.Background(), nc, worker.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	dir := t.TempDir()
	data := filepath.Join(dir, "t.csv")
	writeTransitions(t, data, 60, 2, 2000)
	// --plain: the owners exchange runs plain EM (the coordinator exchange
	// would equal a default local fit too).
	fit := []string{"fit", "--input", data, "--order", "3", "--iters", "5", "--tol", "0", "--shard-nnz", "200", "--quiet", "--plain"}
	local := filepath.Join(dir, "local.arrow")
	var stdout, stderr bytes.Buffer
	if rc := run(append(fit, "--out", local), &stdout, &stderr); rc != 0 {
		t.Fatalf("local fit: exit %d: %s", rc, stderr.String())
	}
	want, err := arrowio.ReadModel(local)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("NATS_PASSWORD", "pw-coordinator")
	for _, ex := range []string{"coordinator", "owners"} {
		out := filepath.Join(dir, ex+".arrow")
		stderr.Reset()
		if rc := run(append(fit, "--out", out, "--nats", url, "--user", "coordinator", "--exchange", ex, "--col-blocks", "2"), &stdout, &stderr); rc != 0 {
			t.Fatalf("fit --exchange %s as coordinator: exit %d: %s", ex, rc, stderr.String())
		}
		got, err := arrowio.ReadModel(out)
		if err != nil {
			t.Fatal(err)
		}
		if !got.Model.Equal(want.Model) {
			t.Fatalf("fit --exchange %s under the deploy/ permissions differs from the local fit", ex)
		}
	}
	emu.Lock()
	defer emu.Unlock()
	if len(errs) > 0 {
		t.Fatalf("the worker's connection saw errors: %v", errs)
	}
}
