package service

import (
	"testing"
	"time"
)

func TestPolicyDue(t *testing.T) {
	for _, c := range []struct {
		p       Policy
		pending int64
		tick    bool
		want    string
	}{
		{Policy{}, 100, true, ""},
		{Policy{Every: 10}, 9, false, ""},
		{Policy{Every: 10}, 10, false, "every"},
		{Policy{Every: 10}, 11, true, "every"},
		{Policy{Every: 10}, 0, true, ""},
		{Policy{Interval: time.Second}, 1, false, ""},
		{Policy{Interval: time.Second}, 1, true, "interval"},
		{Policy{Interval: time.Second}, 0, true, ""},
		{Policy{Every: 10, Interval: time.Second}, 5, true, "interval"},
		{Policy{Every: 10, Interval: time.Second}, 10, true, "every"},
		{Policy{Every: 10}, 5, true, ""},
	} {
		if got := c.p.Due(c.pending, c.tick); got != c.want {
			t.Errorf("%+v.Due(%d, %v) = %q, want %q", c.p, c.pending, c.tick, got, c.want)
		}
	}
}
