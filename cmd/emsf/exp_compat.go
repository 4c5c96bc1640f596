package main

import "github.com/emsf/emsf/factor/experiment"

// The related-methods experiments (exp_related.go, exp_onlineem.go,
// exp_epca.go) share the rows, sampling and settings of package
// experiment.
type (
	record        = experiment.Record
	onlineSetting = experiment.OnlineSetting
)

var sampleBlocks = experiment.SampleBlocks
