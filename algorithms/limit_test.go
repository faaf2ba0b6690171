package algorithms

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestGCRAExactnessBound pins where GCRA stops being exact in a double: the
// capacity lcm(limit, window µs) must stay below 2^53.
func TestGCRAExactnessBound(t *testing.T) {
	cases := []struct {
		limit int64
		ok    bool
	}{
		{9_007_199, true},  // 9007199×10⁹ < 2^53 − 1
		{9_007_201, false}, // 9007201×10⁹ > 2^53
		{9_007_200, true},  // shares 100 with 10⁹: lcm 9007200×10⁷
	}
	for _, tc := range cases {
		err := Limit{Algorithm: GCRA, Limit: tc.limit, Window: 1000 * time.Second}.Validate()
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInvalid)) {
			t.Errorf("limit %d per 1000 s: Validate = %v, want ok %v", tc.limit, err, tc.ok)
		}
	}
}

func TestGlobalScope(t *testing.T) {
	for _, c := range []struct {
		in     string
		global bool
		ok     bool
	}{{"", false, true}, {"regional", false, true}, {"global", true, true}, {"Global", false, false}, {"world", false, false}} {
		g, err := ParseScope(c.in)
		if (err == nil) != c.ok || g != c.global {
			t.Errorf("ParseScope(%q) = %v, %v; want %v, ok %v", c.in, g, err, c.global, c.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseScope(%q): %v does not wrap ErrInvalid", c.in, err)
		}
	}
	base := Limit{Algorithm: FixedWindow, Limit: 10, Window: time.Minute, Global: true}
	if err := base.Validate(); err == nil || !strings.Contains(err.Error(), "scope global") {
		t.Errorf("a global exact limit: %v, want the scope global error", err)
	}
	base.Accuracy = Approximate
	if err := base.Validate(); err != nil {
		t.Errorf("a global approximate fixed window: %v", err)
	}
	if base.ScopeName() != "global" || (Limit{}).ScopeName() != "regional" {
		t.Errorf("ScopeName: %q, %q", base.ScopeName(), Limit{}.ScopeName())
	}
	base.Algorithm = TokenBucket
	if err := base.Validate(); err == nil {
		t.Error("a global token bucket validated")
	}
}
