package factor

import (
	"fmt"
	"math"
)

// OnlineEMOptions configures an OnlineEM fit.
type OnlineEMOptions struct {
	// GammaExp is a in the step sizes γ_t = t^−a, in (0.5, 1]
	// (online-em-nmf_003 §3.2; the paper's experiments use 0.8).
	GammaExp float64
	// BurnIn is t_b: the M-step runs after every unit transition t ≥ t_b
	// (the paper uses 100); before, the model is fixed. NoMStep never
	// runs it (call MStep). Must be >= 1.
	BurnIn int64
	// Floor is ε in [0, 1): every M-step mixes its rows with the uniform
	// distribution, D ← (1−ε)D + ε/m and K ← (1−ε)K + ε/n, so that a
	// transition to a state not yet seen keeps a positive probability.
	// With ε = 0 such a transition is a *TransitionError once the M-step
	// has zeroed its column of K (the paper's Poisson model never meets
	// a probability-0 observation; the floor is emsf's choice, see
	// OnlineEM).
	Floor float64
}

// maxOnlineEMCount is the largest count OnlineEM.Add takes in one call.
const maxOnlineEMCount = 1 << 30

// NoMStep as OnlineEMOptions.BurnIn turns the automatic M-step off.
const NoMStep = math.MaxInt64

// DefaultOnlineEMFloor is the default OnlineEMOptions.Floor of emsf fit.
const DefaultOnlineEMFloor = 1e-6

// OnlineEMStats describes an OnlineEM fit so far.
type OnlineEMStats struct {
	// Transitions counts Add calls, Units the unit transitions t.
	Transitions int
	Units       int64
	// MSteps counts the M-steps run (one per unit transition after the
	// burn-in, plus MStep calls).
	MSteps int64
	// LogLik is the prequential log-likelihood Σ_t log P(s'_t | s_t, a_t)
	// of every unit transition under the model before its own update.
	LogLik float64
}

// OnlineEM is online EM for EMSF (online-em-nmf_003 §3.2 transferred to
// stochastic factorizations, related-methods spec §2.7): a commit rule of
// the incremental fit that averages sufficient statistics instead of
// parameters. Per D block and K block it keeps running averages S_D
// (n×m) and S_K (m×n) of the posteriors of the hidden state; each unit
// transition t (s --a--> s'; a count c is c unit transitions in a row)
// does
//
//	γ   = t^−a                                   (γ_1 = 1)
//	w_l = D_sl K_ls' / Σ_l' D_sl' K_l's'          posterior, current model
//	S   ← (1−γ)·S  (every block);  S_D[s,:] += γ w;  S_K[:,s'] += γ w
//	t ≥ t_b: D_i = (1−ε)·S_D[i,:]/Σ S_D[i,:] + ε/m, K_l = (1−ε)·S_K[l,:]/Σ S_K[l,:] + ε/n
//
// for the rows whose statistics are not all 0 (the others keep their
// values). With γ_t = 1/t, no M-step until the end and ε = 0, one MStep
// after a pass is exactly one batch EMSF iteration. Rows of D move by
// β = γ/((1−γ)σ_s + γ) towards w (σ_s the row's statistics mass): a
// per-row, data-adaptive learning rate, where incremental EMSF uses one α.
//
// Cost O(m) per unit transition: the decay is kept as one scale 1/Γ_t
// (Γ_t = Π_{i≤t}(1−γ_i), statistics stored as S/Γ_t and rescaled when the
// scale passes 1e150), and rows are read from the statistics when used;
// Model writes them into the model (O(u·n·m)). Entries at 0 stay 0 until
// the first M-step with ε > 0, which lifts every entry to at least ε/m
// (D) or ε/n (K): masks do not survive a positive floor.
//
// An OnlineEM is not safe for concurrent use.
type OnlineEM struct {
	md     *Model
	opts   OnlineEMOptions
	sD, sK [][]float64 // S/Γ: D blocks n×m, K blocks n×m (transposed like KT)
	dSum   [][]float64 // per D block, n row masses
	kSum   [][]float64 // per K block, m row masses
	scale  float64     // 1/Γ_t
	// rescaleAt is the scale at which the statistics are rescaled.
	rescaleAt float64
	mstepped  bool
	stats     OnlineEMStats
	// sinceModel is the prequential log-likelihood since the last Model.
	sinceModel float64
	w, d, k    []float64
}

// NewOnlineEM returns an online EM fit that updates md (see Model).
func NewOnlineEM(md *Model, opts OnlineEMOptions) (*OnlineEM, error) {
	if md == nil {
		return nil, fmt.Errorf("factor: online EM: nil model")
	}
	if err := md.Validate(); err != nil {
		return nil, fmt.Errorf("factor: online EM: %w", err)
	}
	if md.Precision != Float64 {
		return nil, fmt.Errorf("factor: online EM: precision %s: online EM runs float64 models only", md.Precision)
	}
	if !(opts.GammaExp > 0.5 && opts.GammaExp <= 1) {
		return nil, fmt.Errorf("factor: online EM: step exponent a = %v must be in (0.5, 1]", opts.GammaExp)
	}
	if opts.BurnIn < 1 {
		return nil, fmt.Errorf("factor: online EM: burn-in %d must be >= 1", opts.BurnIn)
	}
	if !(opts.Floor >= 0 && opts.Floor < 1) {
		return nil, fmt.Errorf("factor: online EM: floor %v must be in [0, 1)", opts.Floor)
	}
	n, m := md.N, md.M
	o := &OnlineEM{md: md, opts: opts, scale: 1, rescaleAt: 1e150,
		w: make([]float64, m), d: make([]float64, m), k: make([]float64, m)}
	for range md.D {
		o.sD = append(o.sD, make([]float64, n*m))
		o.dSum = append(o.dSum, make([]float64, n))
	}
	for range md.KT {
		o.sK = append(o.sK, make([]float64, n*m))
		o.kSum = append(o.kSum, make([]float64, m))
	}
	return o, nil
}

// Stats returns the statistics of the fit so far.
func (o *OnlineEM) Stats() OnlineEMStats { return o.stats }

// Add counts c unit transitions i --a--> j, one after the other. c must
// be a positive integer (the paper has one observation per step).
func (o *OnlineEM) Add(i, a, j int, c float64) error {
	md := o.md
	if i < 0 || j < 0 || i >= md.N || j >= md.N || a < 0 || a >= md.U {
		return fmt.Errorf("factor: online EM: transition %d --%d--> %d out of range for n=%d states, u=%d actions", i, a, j, md.N, md.U)
	}
	if !(c >= 1) || c != math.Trunc(c) || c > maxOnlineEMCount {
		return fmt.Errorf("factor: online EM: transition %d --%d--> %d: count %v must be a positive integer up to %d (each unit is one step)", i, a, j, c, maxOnlineEMCount)
	}
	o.stats.Transitions++
	for range int64(c) {
		if err := o.unit(i, a, j); err != nil {
			return err
		}
	}
	return nil
}

// unit is one unit transition.
func (o *OnlineEM) unit(i, a, j int) error {
	md := o.md
	m := md.M
	db, kb := md.DBlock(a), md.KBlock(a)
	o.rowD(db, i, o.d)
	o.colK(kb, j, o.k)
	g := 0.0
	for l := range m {
		o.w[l] = o.d[l] * o.k[l]
		g += o.w[l]
	}
	if !(g > 0) {
		return &TransitionError{Action: a, From: i, To: j, Count: 1}
	}
	t := o.stats.Units + 1
	gamma := math.Pow(float64(t), -o.opts.GammaExp)
	if t > 1 {
		o.scale /= 1 - gamma
	}
	if o.scale > o.rescaleAt {
		o.rescale()
	}
	f := gamma * o.scale / g
	sd, sk := o.sD[db][i*m:(i+1)*m], o.sK[kb][j*m:(j+1)*m]
	ks := o.kSum[kb]
	for l, v := range o.w {
		v *= f
		sd[l] += v
		sk[l] += v
		ks[l] += v
	}
	o.dSum[db][i] += gamma * o.scale
	o.stats.Units = t
	o.stats.LogLik += math.Log(g)
	o.sinceModel += math.Log(g)
	if t >= o.opts.BurnIn {
		o.mstepped = true
		o.stats.MSteps++
	}
	return nil
}

// rescale multiplies the statistics by Γ_t and sets the scale to 1.
func (o *OnlineEM) rescale() {
	f := 1 / o.scale
	for _, ss := range [][][]float64{o.sD, o.sK, o.dSum, o.kSum} {
		for _, s := range ss {
			for k := range s {
				s[k] *= f
			}
		}
	}
	o.scale = 1
}

// rowD writes row i of D block b of the current model into dst.
func (o *OnlineEM) rowD(b, i int, dst []float64) {
	m := o.md.M
	if s := o.dSum[b][i]; o.mstepped && s > 0 {
		eps := o.opts.Floor
		for l, v := range o.sD[b][i*m : (i+1)*m] {
			dst[l] = (1-eps)*(v/s) + eps/float64(m)
		}
		return
	}
	copy(dst, o.md.D[b][i*m:(i+1)*m])
}

// colK writes column j of K block b of the current model into dst.
func (o *OnlineEM) colK(b, j int, dst []float64) {
	m, n := o.md.M, o.md.N
	copy(dst, o.md.KT[b][j*m:(j+1)*m])
	if !o.mstepped {
		return
	}
	eps := o.opts.Floor
	for l, s := range o.kSum[b] {
		if s > 0 {
			dst[l] = (1-eps)*(o.sK[b][j*m+l]/s) + eps/float64(n)
		}
	}
}

// MStep runs an M-step now (whatever the burn-in): the model becomes the
// normalized statistics (with the floor) from here on.
func (o *OnlineEM) MStep() {
	o.mstepped = true
	o.stats.MSteps++
}

// Model writes the current model into the model given to NewOnlineEM
// and returns it. Its Iteration counts the M-steps run, its LogLik is the
// prequential log-likelihood of the unit transitions since the previous
// Model call (each under the model before its own update), its WKL NaN.
func (o *OnlineEM) Model() *Model {
	md := o.md
	n, m := md.N, md.M
	if o.mstepped {
		for b, d := range md.D {
			for i := range n {
				o.rowD(b, i, d[i*m:(i+1)*m])
			}
		}
		for b, kt := range md.KT {
			for j := range n {
				o.colK(b, j, o.k)
				copy(kt[j*m:(j+1)*m], o.k)
			}
		}
	}
	md.Iteration = int(o.stats.MSteps)
	md.LogLik, md.WKL = o.sinceModel, math.NaN()
	o.sinceModel = 0
	return md
}

// ResumeOnlineEM returns an online EM fit of md that goes on from unit
// transition t (the next one is t+1, with γ = (t+1)^−a), as a service
// retrain does from its latest version. The statistics are re-derived
// from md and the counts seen so far (prior): with σ_sa the share of
// row s of action a in prior's total count,
//
//	S_D[s,:] = Σ_a σ_sa·D_s   (the D block of a)
//	S_K[l,:] = κ_l·K_l,  κ_l = Σ_{s,a} σ_sa·D_sl   (the K block of a)
//
// so that the statistics normalize back to md (the spec's parameter
// averaging equivalence: only the row masses σ and κ are not in the
// model, and these are the ones the recursion has with γ_t = 1/t).
// The M-step runs from the first transition when t ≥ BurnIn. With t = 0
// it is NewOnlineEM. The next M-step applies the floor to the
// re-derived rows: an entry moves by at most Floor.
func ResumeOnlineEM(md *Model, opts OnlineEMOptions, t int64, prior []*Block) (*OnlineEM, error) {
	o, err := NewOnlineEM(md, opts)
	if err != nil || t == 0 {
		return o, err
	}
	if t < 0 {
		return nil, fmt.Errorf("factor: online EM: resume at unit transition %d: must be >= 0", t)
	}
	total := 0.0
	for _, b := range prior {
		if b.Action < 0 || b.Action >= md.U {
			return nil, fmt.Errorf("factor: online EM: resume: counts of action %d out of range for u=%d actions", b.Action, md.U)
		}
		for r, i := range b.Rows {
			if int(i) >= md.N {
				return nil, fmt.Errorf("factor: online EM: resume: counts of state %d out of range for n=%d states", i, md.N)
			}
			for _, v := range b.Vals[b.Ptr[r]:b.Ptr[r+1]] {
				total += v
			}
		}
	}
	o.stats.Units = t
	o.mstepped = t >= opts.BurnIn
	if !(total > 0) {
		return o, nil // no counts: the rows are read from md
	}
	m := md.M
	for _, b := range prior {
		db, kb := md.DBlock(b.Action), md.KBlock(b.Action)
		for r, i := range b.Rows {
			sigma := 0.0
			for _, v := range b.Vals[b.Ptr[r]:b.Ptr[r+1]] {
				sigma += v
			}
			sigma /= total
			sd := o.sD[db][int(i)*m : (int(i)+1)*m]
			for l, v := range md.D[db][int(i)*m : (int(i)+1)*m] {
				sd[l] += sigma * v
				o.kSum[kb][l] += sigma * v
			}
			o.dSum[db][i] += sigma
		}
	}
	for b, kt := range md.KT {
		for p, v := range kt {
			o.sK[b][p] = o.kSum[b][p%m] * v
		}
	}
	return o, nil
}
