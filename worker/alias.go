package worker

import "github.com/emsf/emsf/worker/wire"

// Task and Result are the protocol's task and answer (package wire) under
// the names coordinator/fit.go still uses; they go when it imports wire.
type (
	Task   = wire.Task
	Result = wire.Result
)
