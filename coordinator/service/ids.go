package service

import (
	"errors"
	"fmt"

	"github.com/emsf/emsf/arrowio"
	"github.com/emsf/emsf/factor"
	"github.com/emsf/emsf/shard"
)

// User ids (string ids: `emsf publish` of a file of ids, spec
// ask-the-model §2.3). A service counts states, and separately actions,
// either by integer indices or by ids; which, each kind decides with the
// first message that names it: a service with no counts yet takes up ids
// for the kind its first message of ids names, and from then on every
// message must name that kind by ids (a CSV number is then the id "3"),
// while a service that has counted integer indices refuses a message of
// ids for that kind (rejected whole, with the reason).
//
// The vocabulary grows append-only in stream order: a row's new ids are
// numbered after every id before them, state then next_state then action,
// and only once the row is counted (a rejected row adds no id). So the
// indices are a function of the stream: a restart that replays messages
// after its checkpoint numbers their ids as the first run did, and the
// vocabulary is stored in the checkpoint beside the counts and the
// sequence they include (arrowio.CountsMeta.States/Actions), exactly once
// as the counts are. A version's model file carries the first n state ids
// and u action ids (its shape), so queries and `emsf model get` answer in
// ids. A fixed size (--states, --actions) counts integer indices: a
// service of ids grows its vocabulary within --max-states and
// --max-actions.

// msgIDs are the vocabularies of one parsed message: its rows' indices of
// a kind read as ids are into these (nil: integer indices).
type msgIDs struct {
	states, actions *shard.Vocab
}

// indicesOnly says why the service cannot take up ids for states (or,
// with actions, for actions): it counts them by indices already, or has
// a fixed size of them; "" when it can (or does).
func (s *Service) indicesOnly(actions bool) string {
	kind, fixed, taken := "state", s.cfg.States, s.stateIDs != nil
	if actions {
		kind, fixed, taken = "action", s.cfg.Actions, s.actionIDs != nil
	}
	switch {
	case taken:
		return ""
	case fixed > 0:
		return fmt.Sprintf("this service counts integer %s indices (a fixed size of %d): publish indices, or serve ids under a new name without --%ss", kind, fixed, kind)
	case s.table.Sum() != 0 || s.table.NNZ() != 0 || s.model != nil:
		return fmt.Sprintf("this service counts integer %s indices (it has counted some): publish indices, or serve ids under a new name", kind)
	}
	return ""
}

// takeIDs takes up ids for the kinds a message of ids names first (parse
// read them as ids only where indicesOnly allowed it); the error rejects
// the whole message.
func (s *Service) takeIDs(ids msgIDs) error {
	switch {
	case ids.states != nil && s.indicesOnly(false) != "":
		return errors.New(s.indicesOnly(false))
	case ids.actions != nil && s.indicesOnly(true) != "":
		return errors.New(s.indicesOnly(true))
	case ids.states == nil && s.stateIDs != nil:
		return fmt.Errorf("its states are integer indices, and this service counts state ids: publish ids")
	case ids.actions == nil && s.actionIDs != nil:
		return fmt.Errorf("its actions are integer indices, and this service counts action ids: publish ids")
	}
	if ids.states != nil && s.stateIDs == nil {
		s.stateIDs = &shard.Vocab{}
		s.log.Info("the service counts states by ids from this message on")
	}
	if ids.actions != nil && s.actionIDs == nil {
		s.actionIDs = &shard.Vocab{}
		s.log.Info("the service counts actions by ids from this message on")
	}
	return nil
}

// rowIDs maps row k of a message's rows from its vocabularies to the
// service's: the indices the row would have, and the ids it would add
// (fresh, in numbering order) once counted (intern).
type rowIDs struct {
	i, a, j int
	fresh   [3][]byte // state ids then the action id; nil: none
	nstates int       // how many of fresh are state ids
}

func (s *Service) mapRow(ids msgIDs, i, a, j int) rowIDs {
	r := rowIDs{i: i, a: a, j: j}
	if ids.states != nil {
		state := func(local int) int {
			id := ids.states.ID(local)
			if g, ok := s.stateIDs.Index(id); ok {
				return g
			}
			for q := range r.nstates {
				if string(r.fresh[q]) == string(id) {
					return s.stateIDs.Len() + q
				}
			}
			r.fresh[r.nstates] = id
			r.nstates++
			return s.stateIDs.Len() + r.nstates - 1
		}
		r.i, r.j = state(i), state(j)
	}
	if ids.actions != nil {
		id := ids.actions.ID(a)
		if g, ok := s.actionIDs.Index(id); ok {
			r.a = g
		} else {
			r.fresh[2], r.a = id, s.actionIDs.Len()
		}
	}
	return r
}

// intern adds a counted row's new ids, which take the indices mapRow gave
// them.
func (s *Service) intern(r rowIDs) error {
	for q := range r.nstates {
		if _, err := s.stateIDs.Intern(r.fresh[q]); err != nil {
			return err
		}
	}
	if r.fresh[2] != nil {
		if _, err := s.actionIDs.Intern(r.fresh[2]); err != nil {
			return err
		}
	}
	return nil
}

// modelFile is version md's model file: the model with the first n state
// ids and u action ids when the service counts ids.
func (s *Service) modelFile(md *factor.Model) (*arrowio.ModelFile, error) {
	mf := &arrowio.ModelFile{Model: md}
	var err error
	if mf.States, err = prefix(s.stateIDs, md.N, "state"); err != nil {
		return nil, err
	}
	if mf.Actions, err = prefix(s.actionIDs, md.U, "action"); err != nil {
		return nil, err
	}
	return mf, nil
}

// prefix is the vocabulary of the first n ids of v (nil for nil).
func prefix(v *shard.Vocab, n int, what string) (*shard.Vocab, error) {
	if v == nil {
		return nil, nil
	}
	if n > v.Len() {
		return nil, fmt.Errorf("service: the model has %d %ss, the vocabulary %d ids", n, what, v.Len())
	}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = v.String(i)
	}
	return shard.NewVocab(ids)
}
