package service

import "time"

// Policy says when the service retrains by itself, besides retrain
// requests: the one place that decides (Due).
type Policy struct {
	// Every retrains once this many transitions (rows) arrived since the
	// latest version; 0: off.
	Every int64
	// Interval retrains this often when any transition arrived since the
	// latest version; 0: off.
	Interval time.Duration
}

// Due returns why the policy wants a retrain now ("every" or
// "interval"), or "" when it does not: pending is the number of rows
// since the latest version, and tick says an Interval has elapsed since
// the policy was last asked about one. Every wins when both hold; nothing
// is due without pending rows.
func (p Policy) Due(pending int64, tick bool) string {
	switch {
	case pending <= 0:
		return ""
	case p.Every > 0 && pending >= p.Every:
		return "every"
	case tick && p.Interval > 0:
		return "interval"
	}
	return ""
}
