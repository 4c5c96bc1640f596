package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/emsf/emsf/coordinator/service"
)

// missingModel returns, for a model name that `emsf model get` or `list`
// found no version of, the error that it does not exist when nothing of
// that name does: no emsf serve answers for it, it has no transitions
// stream and nothing is stored under its name (a misspelled name); the
// error names the models stored there. It returns nil when the model
// exists (then "no version yet" is the right answer) or when it cannot
// tell.
func missingModel(ctx context.Context, nc *nats.Conn, st *service.Stores, prefix, name, bucket string) error {
	_, err := nc.Request(service.StatusSubject(prefix, name), nil, 2*time.Second)
	if !errors.Is(err, nats.ErrNoResponders) {
		return nil // a service answered (or the server could not say)
	}
	if _, err := st.JS.Stream(ctx, service.StreamName(prefix, name)); !errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	objs, err := st.Models.List(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil
	}
	var known []string
	for _, o := range objs {
		m, _, _ := strings.Cut(o.Name, "/")
		if m == name {
			return nil
		}
		if !slices.Contains(known, m) {
			known = append(known, m)
		}
	}
	there := "no model is stored there"
	if len(known) > 0 {
		slices.Sort(known)
		there = "models stored there: " + strings.Join(known, ", ")
	}
	return fmt.Errorf("model %s does not exist: no emsf serve answers for it, it has no transitions stream, and nothing is stored under that name in bucket %s (%s)",
		name, bucket, there)
}
