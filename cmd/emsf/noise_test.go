package main

import (
	"bytes"
	"encoding/json"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/emsf/emsf/coordinator/coordtest"
	"github.com/emsf/emsf/coordinator/service"
)

// A cluster fit logs like a local one: with --log-every 1h the first
// iteration's lines only, with --log-every 0 one "cluster iteration" line
// per iteration (issue 27: 623 lines for a small fit whatever --log-every
// said).
func TestClusterFitLogEvery(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "t.csv")
	writeTransitions(t, data, 60, 2, 1500)
	for _, tc := range []struct {
		every string
		want  int
	}{{"1h", 1}, {"0", 12}} {
		for _, exchange := range []string{"coordinator", "owners"} {
			code, _, stderr := emsf(t, "fit", "--input", data, "--order", "3", "--iters", "12", "--tol", "0", "--embedded", "--workers", "2",
				"--exchange", exchange, "--log-every", tc.every, "--out", filepath.Join(dir, "m.arrow"))
			if code != 0 {
				t.Fatalf("fit --embedded --exchange %s: exit %d\n%s", exchange, code, stderr)
			}
			cluster, iters := strings.Count(stderr, "cluster iteration:"), strings.Count(stderr, "iteration: iter=")
			if cluster != tc.want || iters != tc.want {
				t.Errorf("--exchange %s --log-every %s: %d cluster iteration lines and %d iteration lines, want %d of each:\n%s",
					exchange, tc.every, cluster, iters, tc.want, stderr)
			}
		}
	}
}

// Under the live status line no detail line is logged at info level (it
// would break the line); at debug level every one is.
func TestProgressDetailLive(t *testing.T) {
	for _, level := range []hclog.Level{hclog.Info, hclog.Debug} {
		var buf bytes.Buffer
		log := hclog.New(&hclog.LoggerOptions{Output: &buf, Level: level})
		p := &progress{log: log, w: &buf, live: true, every: 0, start: time.Now()}
		for range 5 {
			p.detail(log, "cluster iteration", []any{"iter", 1})
		}
		want := 0
		if level == hclog.Debug {
			want = 5
		}
		if got := strings.Count(buf.String(), "cluster iteration"); got != want {
			t.Errorf("level %v: %d lines, want %d:\n%s", level, got, want, buf.String())
		}
	}
}

// Every flag of every command (experiments and model subcommands
// included) is in a group of its help: none under "Other flags" (issue
// 27: gen --transitions, trick --policy, eval --cnt, ... were), and no
// flag name is in two groups.
func TestHelpGroupsEveryFlag(t *testing.T) {
	var helps [][]string
	for _, c := range commands() {
		switch c.name {
		case "experiment":
			for _, x := range experiments() {
				helps = append(helps, []string{"experiment", x.name, "-h"})
			}
		case "model":
			for _, sub := range []string{"get", "list", "status"} {
				helps = append(helps, []string{"model", sub, "-h"})
			}
		default:
			helps = append(helps, []string{c.name, "-h"})
		}
	}
	for _, args := range helps {
		code, out, _ := emsf(t, args...)
		if code != 0 || !strings.Contains(out, "Usage: emsf ") {
			t.Errorf("emsf %s: exit %d\n%s", strings.Join(args, " "), code, out)
		}
		if _, other, ok := strings.Cut(out, "Other flags:"); ok {
			t.Errorf("emsf %s lists flags under \"Other flags\":%s", strings.Join(args, " "), other)
		}
	}
	seen := map[string]string{}
	for _, g := range flagGroups() {
		for _, n := range g.names {
			if prev, ok := seen[n]; ok {
				t.Errorf("flag --%s is in groups %q and %q", n, prev, g.title)
			}
			seen[n] = g.title
		}
	}
}

// A client command that cannot reach NATS says so in its own words: the
// URL and a hint, not the "worker:" prefix of the package that connects
// (issue 27).
func TestConnectErrorWords(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "nats://" + ln.Addr().String()
	ln.Close() // nothing listens there now
	dir := t.TempDir()
	data := filepath.Join(dir, "t.csv")
	writeTransitions(t, data, 20, 1, 100)
	for _, args := range [][]string{
		{"fit", "--nats", url, "--input", data, "--order", "2", "--out", filepath.Join(dir, "m.arrow")},
		{"publish", "--nats", url, "--name", "x", "--input", data},
		{"retrain", "--nats", url, "--name", "x"},
		{"model", "get", "x", "--nats", url, "--out", filepath.Join(dir, "m.arrow")},
	} {
		code, _, stderr := emsf(t, args...)
		if code == 0 || strings.Contains(stderr, "worker:") || !strings.Contains(stderr, "connect to "+url) ||
			!strings.Contains(stderr, "is a NATS server running there?") {
			t.Errorf("emsf %s: exit %d, stderr %q", strings.Join(args, " "), code, stderr)
		}
	}
}

// model get and list of a name nothing is stored under say that the model
// does not exist and name the models there; a model that exists but has
// no version yet still says so (issue 27: a misspelled name said "no
// version yet").
func TestModelGetMisspelled(t *testing.T) {
	url, nc := embeddedNATS(t, true)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := service.OpenStores(t.Context(), js, service.StoreConfig{Prefix: "emsf", Name: "demo",
		StateBucket: service.DefaultStateBucket, ModelBucket: service.DefaultModelBucket})
	if err != nil {
		t.Fatal(err)
	}
	// A served model with counts and no version yet.
	if _, err := st.Models.PutBytes(t.Context(), service.StateObject("demo"), []byte("counts")); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "m.arrow")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"model", "get", "demoo", "--nats", url, "--out", out}, "model demoo does not exist: no emsf serve answers for it, it has no transitions stream, and nothing is stored under that name in bucket emsf-models (models stored there: demo)"},
		{[]string{"model", "get", "demoo", "--version", "3", "--nats", url, "--out", out}, "model demoo does not exist"},
		{[]string{"model", "list", "demoo", "--nats", url}, "model demoo does not exist"},
		{[]string{"model", "get", "demo", "--nats", url, "--out", out}, "model demo has no version yet"},
		{[]string{"model", "list", "demo", "--nats", url}, "model demo has no versions"},
	} {
		code, _, stderr := emsf(t, c.args...)
		if code != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("emsf %s: exit %d, stderr %q; want exit 1 and %q", strings.Join(c.args, " "), code, stderr, c.want)
		}
	}
}

// A warm-started fit says, in what it prints and what it logs, both the
// model's iterations (its --init model's included) and this fit's (issue
// 27: it logged iterations=20 and printed 643).
func TestFitWarmStartIterations(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "t.csv")
	writeTransitions(t, data, 30, 1, 600)
	first := filepath.Join(dir, "first.arrow")
	mustEmsf(t, "fit", "--input", data, "--order", "3", "--iters", "7", "--tol", "0", "--quiet", "--out", first)
	code, out, logs := emsf(t, "fit", "--input", data, "--order", "3", "--iters", "5", "--tol", "0", "--init", first, "--out", filepath.Join(dir, "warm.arrow"))
	if code != 0 {
		t.Fatalf("warm fit: exit %d\n%s", code, logs)
	}
	if want := "12 iterations (iteration limit; 5 in this fit, after the 7 of --init " + first + ")"; !strings.Contains(out, want) {
		t.Errorf("warm fit printed %q, want %q", out, want)
	}
	if want := "iterations=5 model_iterations=12 init_iterations=7"; !strings.Contains(logs, "fit done: order=3 seed=1 status=\"iteration limit\" "+want) {
		t.Errorf("warm fit logged\n%s\nwant a fit done line with %q", logs, want)
	}
	inc := filepath.Join(dir, "inc.arrow")
	out = mustEmsf(t, "fit", "--incremental", "--input", data, "--order", "3", "--init", first, "--out", inc, "--quiet")
	if want := "1 passes, 1 commits, 8 iterations (after the 7 of --init " + first + ")"; !strings.Contains(out, want) {
		t.Errorf("warm incremental fit printed %q, want %q", out, want)
	}
}

// emsf serve's NATS micro service announces the version emsf --version
// prints (issue 27: 1.0.0 beside "(devel)"), and that version is semantic
// versioning, as micro requires.
func TestServeVersionIsBinarys(t *testing.T) {
	bin := buildBinary(t)
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(out))
	if len(fields) < 2 || !semverPattern.MatchString(fields[1]) {
		t.Fatalf("emsf --version printed %q: want emsf SEMVER ...", out)
	}
	url, nc := embeddedNATS(t, true)
	p := startServe(t, bin, url, "versioned")
	var info micro.Info
	coordtest.CheckFor(t, coordtest.Patience, func() error {
		if p.cmd.ProcessState != nil {
			t.Fatalf("emsf serve exited:\n%s", p.err.String())
		}
		m, err := nc.Request("$SRV.INFO.emsf-serve", nil, time.Second)
		if err != nil {
			return err
		}
		return json.Unmarshal(m.Data, &info)
	})
	if info.Version != fields[1] {
		t.Errorf("the micro service says version %q, emsf --version %q", info.Version, fields[1])
	}
	p.stop(t)
}

// emsf demo writes nothing where it runs (a clone of the repository: git
// showed emsf-demo/ as untracked, issue 27) but into a new temporary
// folder, which it names; the paths it prints work.
func TestDemoWritesOutsideTheWorkingFolder(t *testing.T) {
	work, tmp := t.TempDir(), t.TempDir()
	t.Chdir(work)
	t.Setenv("TMPDIR", tmp)
	out := mustEmsf(t, "demo", "--quiet", "--transitions", "500", "--iters", "20")
	assertOnlyFiles(t, work)
	dirs, err := filepath.Glob(filepath.Join(tmp, "emsf-demo-*"))
	if err != nil || len(dirs) != 1 {
		t.Fatalf("demo folders in TMPDIR: %v (%v)", dirs, err)
	}
	model := filepath.Join(dirs[0], "model.arrow")
	if !strings.Contains(out, "Writing the demo's files to "+dirs[0]) || !strings.Contains(out, "emsf inspect --model "+model) {
		t.Errorf("demo output does not name %s:\n%s", dirs[0], out)
	}
	mustEmsf(t, "inspect", "--model", model)
}
