package coordinator

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/emsf/emsf/shard"
)

// CheckResume returns an error naming each parameter in which a run that
// asks to resume a job differs from the job's checkpoint old, and the data
// when the run's shards (man) are not the checkpoint's; nil when they
// agree. Parameters are compared where both name them (a checkpoint of an
// older release records fewer), and those of how the fit estimates
// (qualityParams) also where one side names them: a plain fit records
// none. A resumed run must be the run that was interrupted: anything
// else would continue one fit with another's settings, or silently start
// afresh.
func CheckResume(old *JobState, params map[string]string, man *shard.Manifest) error {
	var diffs []string
	keys := slices.Sorted(maps.Keys(params))
	quality := qualityParams()
	for _, k := range quality {
		if _, ok := params[k]; !ok {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		was, wasOK := old.Params[k]
		now, nowOK := params[k]
		switch {
		case wasOK && nowOK && was != now:
			diffs = append(diffs, fmt.Sprintf("%s (%q in the checkpoint, %q now)", k, was, now))
		case wasOK != nowOK && slices.Contains(quality, k):
			if !wasOK {
				was = "not set"
			} else {
				was = strconv.Quote(was)
			}
			if !nowOK {
				now = "not set"
			} else {
				now = strconv.Quote(now)
			}
			diffs = append(diffs, fmt.Sprintf("%s (%s in the checkpoint, %s now)", k, was, now))
		}
	}
	if d := manifestDiff(old.Manifest, man); d != "" {
		diffs = append(diffs, "data ("+d+")")
	}
	if len(diffs) == 0 {
		return nil
	}
	return fmt.Errorf("coordinator: resume job %s: this run differs from its checkpoint (iteration %d) in %s; "+
		"run without --resume to start afresh", old.Job, old.Iteration, strings.Join(diffs, ", "))
}

// qualityParams returns the job parameters of how a fit estimates (emsf
// fit's --accel, --start, the priors, --smooth, --stop and the held-out
// rule's): a plain EM fit records none of them.
func qualityParams() []string {
	return []string{"accel", "start", "prior_d", "prior_k", "smooth", "stop", "validation", "patience", "min_gain"}
}

// manifestDiff says how two manifests' shards differ, or "" when they do
// not (or either is unknown).
func manifestDiff(was, now *shard.Manifest) string {
	switch {
	case was == nil || now == nil:
		return ""
	case was.N != now.N || was.U != now.U:
		return fmt.Sprintf("%d states and %d actions in the checkpoint, %d and %d now", was.N, was.U, now.N, now.U)
	case len(was.Shards) != len(now.Shards):
		return fmt.Sprintf("%d shards in the checkpoint, %d now", len(was.Shards), len(now.Shards))
	}
	for k, in := range now.Shards {
		if c := was.Shards[k].Checksum; c != in.Checksum {
			return fmt.Sprintf("shard %d has checksum %s in the checkpoint, %s now", k, c, in.Checksum)
		}
	}
	return ""
}
