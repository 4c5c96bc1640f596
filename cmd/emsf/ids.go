package main

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/hashicorp/go-hclog"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/shard"
	"github.com/emsf/emsf/worker/ingestwire"
)

// Values of --ids: how the state and action columns name states and
// actions.
const (
	idsAuto   = "auto"   // integers where every value is a number, else ids
	idsInt    = "int"    // integer indices only (emsf before ids)
	idsString = "string" // every value an id ("3" too)
)

const idsUsage = "how the state, next_state and action columns name states and actions: auto (integer indices when every value is a number, " +
	"else user ids such as user42 or /cart; an Arrow or Parquet string column holds ids), int (integer indices only), " +
	"string (every value an id, \"3\" too). Ids are numbered in sorted (bytewise UTF-8) order, one vocabulary for state and next_state, one for action, " +
	"and stored in the model"

// vocabs are the vocabularies of a dataset or a model: nil for a group
// (states, actions) named by integer indices.
type vocabs struct{ states, actions *shard.Vocab }

func (v vocabs) any() bool { return v.states != nil || v.actions != nil }

// vocabsOf returns a model file's vocabularies.
func vocabsOf(mf *arrowio.ModelFile) vocabs { return vocabs{mf.States, mf.Actions} }

// idPolicy says what a read does with the ids a model's vocabulary (the
// base) lacks.
type idPolicy int

const (
	// idsFresh: no model; --ids decides which columns are ids, and the
	// vocabulary is the sorted set of the data's ids.
	idsFresh idPolicy = iota
	// idsGrow (fit --init): the model's ids keep their indices and the
	// new ones are appended, sorted among themselves.
	idsGrow
	// idsKnown (eval): rows that name an id the model lacks are set aside
	// (unseen rows), not counted.
	idsKnown
)

// scanWithIDs runs scan with the read options of f whose vocabularies say
// which columns are read as ids, and returns them (the vocabularies the
// scan filled). Without a model (policy idsFresh) --ids decides: with
// auto, a column is read as integers until the scan meets an id
// (arrowio.StringIDsError: an Arrow string column at once, a CSV value
// that is not a number at its row) and then read again as ids. Against a
// model, its vocabularies decide (a clone of each, which the scan
// grows): a group the model names by integers must hold integers.
func (f *inputFlags) scanWithIDs(base vocabs, policy idPolicy, scan func(opts arrowio.ReadOptions) error) (vocabs, error) {
	opts := f.readOptions()
	if policy == idsFresh {
		if f.ids == idsString {
			opts.StateIDs, opts.ActionIDs = &shard.Vocab{}, &shard.Vocab{}
		}
		if f.ids != idsInt {
			opts, err := arrowio.ScanAutoIDs(opts, scan)
			return vocabs{opts.StateIDs, opts.ActionIDs}, err
		}
	} else {
		// Against a model, its vocabularies decide (clones, which the
		// scan grows).
		opts.StateIDs, opts.ActionIDs = base.states.Clone(), base.actions.Clone()
	}
	err := scan(opts)
	var se *arrowio.StringIDsError
	if errors.As(err, &se) {
		what := "states"
		if se.Actions {
			what = "actions"
		}
		if policy != idsFresh {
			return vocabs{}, fmt.Errorf("%w (the model names %s by integer indices: the data must too)", err, what)
		}
		return vocabs{}, fmt.Errorf("%w (--ids int reads integer indices only: drop it, or give --ids auto, to read %s named by ids)", err, what)
	}
	return vocabs{opts.StateIDs, opts.ActionIDs}, err
}

func validIDs(ids string) error {
	switch ids {
	case idsAuto, idsInt, idsString:
		return nil
	}
	return usagef("--ids %q: want auto, int or string", ids)
}

// growWarm grows a warm-start model to the ids the data added to its
// vocabularies (loadDataIDs with idsGrow): new states and actions start
// as factor.Model.Grow says (the service's rule). Groups named by
// integers keep the model's size (CheckCompatible then compares).
func growWarm(log hclog.Logger, warm *arrowio.ModelFile, ids vocabs) error {
	md := warm.Model
	n, u := md.N, md.U
	if ids.states != nil {
		n = ids.states.Len()
	}
	if ids.actions != nil {
		u = ids.actions.Len()
	}
	if n == md.N && u == md.U {
		return nil
	}
	grown, err := md.Grow(n, u)
	if err != nil {
		return err
	}
	log.Info("--init model grown for the data's new ids", "states", fmt.Sprintf("%d → %d", md.N, n), "actions", fmt.Sprintf("%d → %d", md.U, u))
	warm.Model, warm.States, warm.Actions = grown, ids.states, ids.actions
	return nil
}

// sameVocabs reports whether a and b name states and actions alike (the
// same ids in the same order, or integers both).
func sameVocabs(a, b vocabs) bool {
	same := func(x, y *shard.Vocab) bool { return (x == nil) == (y == nil) && (x == nil || x.Equal(y)) }
	return same(a.states, b.states) && same(a.actions, b.actions)
}

// stateName is how a command prints state (or action) i: its id, or
// without a vocabulary its index.
func stateName(v *shard.Vocab, i int) string {
	if v == nil {
		return strconv.Itoa(i)
	}
	return v.String(i)
}

// ingestIDs returns what --ids asks of a distributed ingest: the groups
// read as ids from the start, and whether a group of integer columns
// found to hold ids is read as ids (ingest.Options.IDs, AutoIDs).
func (f *inputFlags) ingestIDs() (groups ingestwire.IDGroups, auto bool) {
	if f.ids == idsString {
		groups = ingestwire.IDGroups{true, true}
	}
	return groups, f.ids == idsAuto
}
