package algorithms

import (
	"errors"
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
