package query

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
)

// testEngine is an engine over a random shared-K model of n states named
// st0..., and u actions named by words, or of integers.
func testEngine(t testing.TB, n, m, u int, ids bool, opts Options) (*Engine, *arrowio.ModelFile) {
	t.Helper()
	md := factor.NewRandom(n, m, u, factor.TieSharedK, 3)
	// Zeros in K, as EM leaves them: ties and pruning both happen.
	rng := rand.New(rand.NewPCG(1, 2))
	for x := range md.KT[0] {
		if rng.IntN(3) == 0 {
			md.KT[0][x] = 0
		}
	}
	for l := range m { // renormalise the rows of K (columns of KT)
		s := 0.0
		for j := range n {
			s += md.KT[0][j*m+l]
		}
		if s == 0 {
			md.KT[0][l] = 1
			s = 1
		}
		for j := range n {
			md.KT[0][j*m+l] /= s
		}
	}
	mf := &arrowio.ModelFile{Model: md}
	if ids {
		var ss, as []string
		for i := range n {
			ss = append(ss, fmt.Sprintf("st%d", i))
		}
		for a := range u {
			as = append(as, []string{"left", "right", "up", "down"}[a])
		}
		mf.States, _ = shard.NewVocab(ss)
		mf.Actions, _ = shard.NewVocab(as)
	}
	e, err := New(mf, 7, opts)
	if err != nil {
		t.Fatal(err)
	}
	return e, mf
}

func ask(t *testing.T, e *Engine, endpoint, body string, ans any) {
	t.Helper()
	out, err := e.Do(endpoint, []byte(body))
	if err != nil {
		t.Fatalf("%s %s: %v", endpoint, body, err)
	}
	if err := json.Unmarshal(out, ans); err != nil {
		t.Fatalf("%s: answer %s: %v", endpoint, out, err)
	}
}

// TestAnswersAreTheModels: every answer is what the model says, in its
// ids: top k by brute force, probabilities bitwise Model.Prob (so top-k
// and prob agree), memberships, reduced chains, stationary distributions
// and PISF plans.
func TestAnswersAreTheModels(t *testing.T) {
	const n, m, u = 300, 5, 2
	e, mf := testEngine(t, n, m, u, true, Options{})
	md := mf.Model
	for _, i := range []int{0, 17, 299} {
		for a := range u {
			var tk struct {
				Header
				Next []struct {
					State string
					P     float64
				}
			}
			ask(t, e, "topk", fmt.Sprintf(`{"state":"st%d","action":%q,"k":12}`, i, mf.Actions.String(a)), &tk)
			if tk.Version != 7 || tk.N != n || tk.M != m || tk.U != u {
				t.Fatalf("header %+v", tk.Header)
			}
			all := make([]int, n)
			for j := range all {
				all[j] = j
			}
			slices.SortStableFunc(all, func(x, y int) int {
				px, py := md.Prob(a, i, x), md.Prob(a, i, y)
				if px > py {
					return -1
				}
				if px < py {
					return 1
				}
				return 0
			})
			var pairs []string
			for k, nx := range tk.Next {
				if want := fmt.Sprintf("st%d", all[k]); nx.State != want || nx.P != md.Prob(a, i, all[k]) {
					t.Fatalf("topk (%d, %d) #%d = %s %v, want %s %v", i, a, k, nx.State, nx.P, want, md.Prob(a, i, all[k]))
				}
				pairs = append(pairs, fmt.Sprintf(`{"state":"st%d","action":%q,"next":%q}`, i, mf.Actions.String(a), nx.State))
			}
			var pr ProbAnswer
			ask(t, e, "prob", `{"pairs":[`+strings.Join(pairs, ",")+`]}`, &pr)
			for k, p := range pr.P {
				if p != tk.Next[k].P {
					t.Fatalf("prob %d = %v, topk said %v", k, p, tk.Next[k].P)
				}
			}
			var mb MemberAnswer
			ask(t, e, "member", fmt.Sprintf(`{"state":"st%d","action":%q}`, i, mf.Actions.String(a)), &mb)
			if !slices.Equal(mb.D, md.DRow(a, i)) {
				t.Fatalf("member %v, want %v", mb.D, md.DRow(a, i))
			}
		}
	}
	var rd ReducedAnswer
	ask(t, e, "reduced", `{"action":"right"}`, &rd)
	want := factor.Reduced(md)[1]
	for l := range m {
		for k := range m {
			if rd.Matrix[l][k] != want.At(l, k) {
				t.Fatalf("reduced[%d][%d] = %v, want %v", l, k, rd.Matrix[l][k], want.At(l, k))
			}
		}
	}
	var sa StationaryAnswer
	ask(t, e, "stationary", `{"policy":{"action":"left"},"top":3}`, &sa)
	pi, _ := factor.DeterministicPolicy(make([]int, n), u)
	mu, nu, err := factor.Stationary(md, pi)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(sa.Nu, nu) || len(sa.Top) != 3 {
		t.Fatalf("stationary ν %v, want %v", sa.Nu, nu)
	}
	best := slices.Max(mu)
	if sa.Top[0].Mu != best {
		t.Fatalf("stationary top %v, max μ %v", sa.Top, best)
	}
	var pl struct {
		PlanAnswer
		Policy []string `json:"policy"`
	}
	ask(t, e, "plan", `{"reward":{"sparse":{"st3":1,"st9":0.5},"default":-0.01},"gamma":0.9,"top":2,"full":true}`, &pl)
	rhat := make([]float64, n)
	for i := range rhat {
		rhat[i] = -0.01
	}
	rhat[3], rhat[9] = 1, 0.5
	rbar, _ := factor.ReducedRewards(md, rhat)
	res, err := factor.PISF(md, rbar, 0.9, factor.PlanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range res.Policy {
		if pl.Policy[i] != mf.Actions.String(a) || pl.Values[i] != res.Values[i] {
			t.Fatalf("plan state %d: %s %v, want %s %v", i, pl.Policy[i], pl.Values[i], mf.Actions.String(a), res.Values[i])
		}
	}
	if len(pl.Top) != 2 || pl.Top[0].Value != slices.Max(res.Values) {
		t.Fatalf("plan top %v", pl.Top)
	}
	var vo VocabAnswer
	ask(t, e, "vocab", `{"from":298,"limit":5}`, &vo)
	if vo.Total != n || !slices.Equal(vo.IDs, []string{"st298", "st299"}) {
		t.Fatalf("vocab %+v", vo)
	}
}

// TestNextThresholds: next gives the head of the distribution by min_p,
// max_states and mass, says whether it cut, and the rest.
func TestNextThresholds(t *testing.T) {
	e, mf := testEngine(t, 200, 4, 1, false, Options{})
	md := mf.Model
	row := make([]float64, md.N)
	for j := range row {
		row[j] = md.Prob(0, 5, j)
	}
	sorted := slices.Clone(row)
	slices.Sort(sorted)
	slices.Reverse(sorted)
	for _, c := range []struct {
		body  string
		count func() int
	}{
		{`{"state":5,"max_states":7}`, func() int { return 7 }},
		{`{"state":"5","min_p":0.01,"max_states":1000}`, func() int {
			k := 0
			for k < len(sorted) && sorted[k] >= 0.01 {
				k++
			}
			return k
		}},
		{`{"state":5,"mass":0.5,"max_states":1000}`, func() int {
			k, s := 0, 0.0
			for s < 0.5 {
				s += sorted[k]
				k++
			}
			return k
		}},
	} {
		var na NextAnswer
		ask(t, e, "next", c.body, &na)
		if len(na.Next) != c.count() || !na.Truncated {
			t.Fatalf("%s: %d states (truncated %v), want %d", c.body, len(na.Next), na.Truncated, c.count())
		}
		sum := 0.0
		for k, nx := range na.Next {
			if nx.P != sorted[k] {
				t.Fatalf("%s: #%d p %v, want %v", c.body, k, nx.P, sorted[k])
			}
			sum += nx.P
		}
		if na.Rest != max(0, 1-sum) {
			t.Fatalf("rest %v, want %v", na.Rest, 1-sum)
		}
	}
}

// TestHostileRequests: every bad request gets one error with its code and
// a message that says what is wrong; none panics or disturbs the engine.
func TestHostileRequests(t *testing.T) {
	e, _ := testEngine(t, 50, 3, 2, true, Options{MaxK: 20, MaxAnswerBytes: 2000})
	notShared, _ := New(&arrowio.ModelFile{Model: factor.NewRandom(10, 2, 2, factor.TieNone, 1)}, 1, Options{})
	big := `{"state":"` + strings.Repeat("x", MaxRequestBytes) + `"}`
	for _, c := range []struct {
		e        *Engine
		endpoint string
		body     string
		code     string
		msg      string
	}{
		{e, "topk", `{"state":"st1","action":"left"`, "400", "malformed request"},
		{e, "topk", `not json`, "400", "malformed request"},
		{e, "topk", `{"state":"st1","action":"left","kk":3}`, "400", `unknown field "kk"`},
		{e, "topk", `{"state":"st1","action":"left"} {}`, "400", "data after"},
		{e, "topk", `{"state":"st1","action":"left","k":"ten"}`, "400", "malformed request"},
		{e, "topk", `{"state":"nobody","action":"left"}`, "404", `state "nobody": no such id`},
		{e, "topk", `{"state":"st1","action":"fly"}`, "404", `action "fly": no such id`},
		{e, "topk", `{"state":3,"action":"left"}`, "400", "names them by ids"},
		{e, "topk", `{"action":"left"}`, "400", "state is missing"},
		{e, "topk", `{"state":"st1","action":"left","k":0}`, "400", "k 0: want 1 to 20"},
		{e, "topk", `{"state":"st1","action":"left","k":1000000000}`, "400", "k 1000000000: want 1 to 20"},
		{e, "next", `{"state":"st1","action":"left","min_p":-1}`, "400", "min_p -1"},
		{e, "next", `{"state":"st1","action":"left","max_states":21}`, "400", "max_states 21"},
		{e, "prob", `{"pairs":[]}`, "400", "0 pairs"},
		{e, "prob", `{"pairs":[{"state":"st1","action":"left","next":"zz"}]}`, "404", `pair 0: next "zz"`},
		{e, "plan", `{"reward":{"values":[1,2,3]}}`, "422", "reward of 3 values: the model has n = 50 states"},
		{e, "plan", `{"reward":{"sparse":{"st1":1}},"gamma":1}`, "400", "gamma 1"},
		{e, "plan", `{"reward":{"file":"r.npy"}}`, "400", "rewards in the request only"},
		{e, "plan", `{"reward":{}}`, "400", "exactly one of"},
		{e, "plan", `{"reward":{"sparse":{"nobody":1}}}`, "404", `reward state "nobody"`},
		{notShared, "plan", `{"reward":{"values":[1,1,1,1,1,1,1,1,1,1]}}`, "409", "shared by all actions"},
		{e, "stationary", `{"policy":"greedy"}`, "400", `policy "greedy"`},
		{e, "vocab", `{"from":-1}`, "400", "from -1"},
		{notShared, "vocab", `{}`, "409", "no ids"},
		{e, "plan", `{"reward":{"sparse":{"st1":1}},"full":true}`, "413", "above the limit of 2000"},
		{e, "teleport", `{}`, "404", `no endpoint "teleport"`},
		{e, "topk", big, "400", "request of"},
	} {
		out, err := c.e.Do(c.endpoint, []byte(c.body))
		var qe *Error
		if !errors.As(err, &qe) || qe.Code != c.code || !strings.Contains(qe.Msg, c.msg) {
			body := c.body
			if len(body) > 100 {
				body = body[:100]
			}
			t.Errorf("%s %s: answer %s, error %v; want code %s saying %q", c.endpoint, body, out, err, c.code, c.msg)
		}
	}
	// The engine still answers.
	var tk TopKAnswer
	ask(t, e, "topk", `{"state":"st1","action":"left","k":3}`, &tk)
	if len(tk.Next) != 3 {
		t.Fatalf("after the hostile requests: %+v", tk)
	}
}

// FuzzDo: any request body to any endpoint gets an answer or an *Error.
func FuzzDo(f *testing.F) {
	for _, s := range []string{`{"state":"st1","action":"left","k":3}`, `{"pairs":[{"state":"st1","next":"st2"}]}`,
		`{"reward":{"sparse":{"st1":1}},"top":2}`, `{"policy":{"action":"left"}}`, `{"from":1,"limit":2}`, `{}`, `[`, `null`} {
		f.Add(uint8(0), []byte(s))
	}
	e, _ := testEngine(f, 30, 3, 2, true, Options{MaxK: 50})
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		endpoint := Endpoints[int(which)%len(Endpoints)]
		out, err := e.Do(endpoint, body)
		var qe *Error
		if err != nil && !errors.As(err, &qe) {
			t.Fatalf("%s %q: error %v is not a query.Error", endpoint, body, err)
		}
		if err == nil && !json.Valid(out) {
			t.Fatalf("%s %q: answer %q is not JSON", endpoint, body, out)
		}
	})
}

func TestNoNaNInAnswers(t *testing.T) {
	e, _ := testEngine(t, 20, 2, 1, false, Options{})
	out, err := e.Do("next", []byte(`{"state":0,"max_states":20}`))
	if err != nil || strings.Contains(string(out), "NaN") || math.IsNaN(0) {
		t.Fatalf("%s %v", out, err)
	}
}
