package experiment

import (
	"fmt"

	"gonum.org/v1/gonum/stat"
)

// Record is one fit of one run: a row of the CSV of sample-size and
// sampling.
type Record struct {
	Setting     string
	Method      string
	M           int // 0 for CNT, which has no order
	Transitions int
	Seed        uint64
	Measure     string
	Error       float64
}

// Summary is the mean and standard error of one curve's point.
type Summary struct {
	Setting, Method string
	M, X            int
	Mean, SE        float64
	Runs            int
}

// Summarize groups records by (setting, method, m, transitions) in the
// order the groups first appear: mean and standard error of the mean (the
// sample standard deviation over √runs; 0 for one run).
func Summarize(recs []Record) []Summary {
	type key struct {
		setting, method string
		m, x            int
	}
	idx := map[key]int{}
	var keys []key
	vals := map[key][]float64{}
	for _, r := range recs {
		k := key{r.Setting, r.Method, r.M, r.Transitions}
		if _, ok := idx[k]; !ok {
			idx[k] = len(keys)
			keys = append(keys, k)
		}
		vals[k] = append(vals[k], r.Error)
	}
	out := make([]Summary, 0, len(keys))
	for _, k := range keys {
		v := vals[k]
		mean, se := stat.Mean(v, nil), 0.0
		if len(v) > 1 {
			se = stat.StdErr(stat.StdDev(v, nil), float64(len(v)))
		}
		out = append(out, Summary{k.setting, k.method, k.m, k.x, mean, se, len(v)})
	}
	return out
}

// CurveName labels a curve of the plot.
func (s Summary) CurveName() string {
	name := s.Method
	if s.M > 0 {
		name += fmt.Sprintf(" m=%d", s.M)
	}
	if s.Setting != "" {
		name += " (" + s.Setting + ")"
	}
	return name
}
