package owners

import (
	"cmp"
	"slices"
	"time"
)

// Slow links: in the owners exchange every worker moves about the same
// bytes per iteration through its own link (the rows of D and K its tasks
// gather, the slices its owners pull, ∝ n·m/P each way), and every pass
// waits for the last of them. A worker behind a link several times slower
// than its peers' therefore sets the pace of the whole fit, and backups do
// not help: its peers' tasks wait on it as much as its own do, so it is
// not slower than the median by the tasks' clock (Rebalance). With one
// node of three behind 8 Mbit/s every iteration took 30× the fault-free
// one (docs/scaling.md §9.11), while leaving the node out costs at most a
// factor P/(P−1) of compute.
//
// So before it places a job, the coordinator times an echo of
// LinkProbeBytes with every worker (the bytes cross the worker's link
// twice) and leaves out of the job, while it stays slow, a worker whose
// echo took LeaveOut's verdict: more than factor times the median
// worker's time, and longer than that by more than LinkFloor (a pause of
// the worker's machine or of the Go runtime is not a slow link). The
// median is the upper one, so that at least half the workers, and always
// the fastest, stay.
const (
	// LinkProbeBytes is the size of one link probe's payload: large
	// enough that 8 Mbit/s shows as half a second, small enough that a
	// gigabit link answers in milliseconds.
	LinkProbeBytes = 256 << 10
	// LinkFloor is the least excess over the median that counts as a
	// slow link.
	LinkFloor = 50 * time.Millisecond
	// DefaultSlowLink is the default factor.
	DefaultSlowLink = 8
)

// LeaveOut returns the workers of took (each worker's time for one link
// probe) whose link is slow by the rule above, sorted; none when factor
// ≤ 0 or fewer than two workers were timed.
func LeaveOut(took map[string]time.Duration, factor float64) []string {
	if factor <= 0 || len(took) < 2 {
		return nil
	}
	ts := make([]time.Duration, 0, len(took))
	for _, t := range took {
		ts = append(ts, t)
	}
	slices.Sort(ts)
	// The upper median of the rates is the lower median of the times.
	med := ts[(len(ts)-1)/2]
	var out []string
	for id, t := range took {
		if float64(t) > factor*float64(med) && t-med > LinkFloor {
			out = append(out, id)
		}
	}
	slices.SortFunc(out, cmp.Compare)
	return out
}
