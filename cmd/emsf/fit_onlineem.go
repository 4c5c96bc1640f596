package main

import (
	"flag"
	"strconv"

	"github.com/emsf/emsf/coordinator/service"
	"github.com/emsf/emsf/factor"
)

// onlineEMFlags are the flags of `emsf fit --incremental --online-em`
// (online-em-nmf_003 as a commit rule; factor.OnlineEM).
type onlineEMFlags struct {
	enabled bool
	onlineEMParams
}

// onlineEMParams are the settings of the online EM rule, shared by
// `emsf fit --online-em` and `emsf serve --mode online-em`.
type onlineEMParams struct {
	gammaExp float64
	burnIn   int64
	floor    float64
}

func (f *onlineEMFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&f.enabled, "online-em", false, "with --incremental: commit by online EM (online-em-nmf_003): running averages of the sufficient statistics with steps γ_t = t^-gamma-exp, an M-step after every transition from --burn-in on; --alpha, --commit-every and --eta-max do not apply; counts must be integers (a count c is c steps)")
	f.onlineEMParams.register(fs, "with --online-em", service.DefaultConfig().OnlineEM)
}

// register adds --gamma-exp, --burn-in and --online-em-floor with the
// defaults of def, their help starting with when (the condition under
// which they apply).
func (p *onlineEMParams) register(fs *flag.FlagSet, when string, def factor.OnlineEMOptions) {
	fs.Float64Var(&p.gammaExp, "gamma-exp", def.GammaExp, when+": exponent a of the steps γ_t = t^-a, in (0.5, 1]")
	fs.Int64Var(&p.burnIn, "burn-in", def.BurnIn, when+": unit transitions before the first M-step (>= 1)")
	fs.Float64Var(&p.floor, "online-em-floor", def.Floor, when+": after each M-step mix the rows with the uniform distribution, D ← (1-ε)D + ε/m, K ← (1-ε)K + ε/n, so that transitions to states not seen before the burn-in stay possible; 0 turns it off (such a transition is then an error; emsf serve refuses 0), in [0, 1)")
}

// validate checks the settings, naming the bad flag.
func (p *onlineEMParams) validate() error {
	switch {
	case !(p.gammaExp > 0.5 && p.gammaExp <= 1):
		return usagef("--gamma-exp %v: must be in (0.5, 1]", p.gammaExp)
	case p.burnIn < 1:
		return usagef("--burn-in %d: must be >= 1", p.burnIn)
	case !(p.floor >= 0 && p.floor < 1):
		return usagef("--online-em-floor %v: must be in [0, 1)", p.floor)
	}
	return nil
}

// options are the settings as factor.OnlineEMOptions.
func (p *onlineEMParams) options() factor.OnlineEMOptions {
	return factor.OnlineEMOptions{GammaExp: p.gammaExp, BurnIn: p.burnIn, Floor: p.floor}
}

// validate checks the online EM flags against the incremental ones.
func (f *onlineEMFlags) validate(inc *incrementalFlags, ff *fitFlags) error {
	if !f.enabled {
		return nil
	}
	switch {
	case !inc.enabled:
		return usagef("--online-em is a commit rule of --incremental: add --incremental")
	case ff.alpha != 1 || inc.commitEvery != 0:
		return usagef("--online-em commits after every transition with its own steps: drop --alpha and --commit-every")
	}
	return f.onlineEMParams.validate()
}

// streamFit is what fitIncremental drives: factor.Incremental or the
// online EM commit rule.
type streamFit interface {
	Add(i, a, j int, c float64) error
	EndPass() error
	Stats() factor.IncrementalStats
	// Model returns the model of the last commit (M-step).
	Model() *factor.Model
}

// onlineEMFit adapts factor.OnlineEM to streamFit: a pass ends by
// writing the current model; commits are M-steps.
type onlineEMFit struct{ o *factor.OnlineEM }

func (f onlineEMFit) Add(i, a, j int, c float64) error { return f.o.Add(i, a, j, c) }

func (f onlineEMFit) EndPass() error { f.o.Model(); return nil }

func (f onlineEMFit) Model() *factor.Model { return f.o.Model() }

func (f onlineEMFit) Stats() factor.IncrementalStats {
	s := f.o.Stats()
	return factor.IncrementalStats{Commits: int(s.MSteps), Transitions: s.Transitions, Count: float64(s.Units)}
}

// newStreamFit returns the incremental fit of md that the flags ask for.
func (f *fitFlags) newStreamFit(md *factor.Model) (streamFit, error) {
	if f.onlineEM.enabled {
		o, err := factor.NewOnlineEM(md, f.onlineEM.options())
		if err != nil {
			return nil, err
		}
		return onlineEMFit{o}, nil
	}
	return factor.NewIncremental(md, factor.IncrementalOptions{
		EtaMax: f.inc.etaMax, CommitEvery: f.inc.commitEvery, Alpha: f.alpha})
}

// onlineEMParams adds the online EM settings to a model file's parameters.
func (f *fitFlags) onlineEMParams(params map[string]string) {
	if !f.onlineEM.enabled {
		return
	}
	params["online_em"] = "true"
	params["gamma_exp"] = strconv.FormatFloat(f.onlineEM.gammaExp, 'g', -1, 64)
	params["burn_in"] = strconv.FormatInt(f.onlineEM.burnIn, 10)
	params["online_em_floor"] = strconv.FormatFloat(f.onlineEM.floor, 'g', -1, 64)
}
