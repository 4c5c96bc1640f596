package owners

import (
	"slices"
	"testing"
	"time"
)

// TestLeaveOut pins the slow-link rule: more than factor × the (upper
// rate, lower time) median and more than LinkFloor above it.
func TestLeaveOut(t *testing.T) {
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	for _, c := range []struct {
		name   string
		took   map[string]time.Duration
		factor float64
		want   []string
	}{
		{"one of three behind 8 Mbit/s", map[string]time.Duration{"a": ms(3), "b": ms(4), "c": ms(520)}, 8, []string{"c"}},
		{"all alike", map[string]time.Duration{"a": ms(3), "b": ms(4), "c": ms(5)}, 8, nil},
		{"slow but under the floor", map[string]time.Duration{"a": ms(1), "b": ms(1), "c": ms(40)}, 8, nil},
		{"over the floor but not factor times", map[string]time.Duration{"a": ms(100), "b": ms(110), "c": ms(700)}, 8, nil},
		{"exactly factor times is not slow", map[string]time.Duration{"a": ms(100), "b": ms(100), "c": ms(800)}, 8, nil},
		{"two of two: the faster stays", map[string]time.Duration{"a": ms(2), "b": ms(600)}, 8, []string{"b"}},
		{"two of four", map[string]time.Duration{"a": ms(2), "b": ms(3), "c": ms(600), "d": ms(900)}, 8, []string{"c", "d"}},
		{"three of four: the median is the second fastest", map[string]time.Duration{"a": ms(2), "b": ms(600), "c": ms(650), "d": ms(900)}, 8, nil},
		{"off", map[string]time.Duration{"a": ms(2), "b": ms(600)}, 0, nil},
		{"one worker", map[string]time.Duration{"a": ms(900)}, 8, nil},
		{"a lower factor", map[string]time.Duration{"a": ms(100), "b": ms(110), "c": ms(700)}, 4, []string{"c"}},
	} {
		if got := LeaveOut(c.took, c.factor); !slices.Equal(got, c.want) {
			t.Errorf("%s: LeaveOut = %v, want %v", c.name, got, c.want)
		}
	}
}
