package descriptors

import (
	"testing"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
)

// TestEngineLimitGCRA: algorithm gcra in the YAML gives the engine a gcra
// limit of requests_per_unit per unit, at any depth.
func TestEngineLimitGCRA(t *testing.T) {
	c := mustLoad(t, Options{}, ours+"gcra.yaml")
	tests := []struct {
		kv   []string
		want algorithms.Limit
	}{
		{kv("api", "x"), algorithms.Limit{Algorithm: algorithms.GCRA, Limit: 7, Window: time.Minute}},
		{kv("user", "u1", "plan", "free"), algorithms.Limit{Algorithm: algorithms.GCRA, Limit: 100, Window: time.Hour}},
	}
	for _, tt := range tests {
		m := c.Match("cells", entries(tt.kv...))
		if m == nil {
			t.Fatalf("no match for %q", tt.kv)
		}
		got, err := m.Limit.EngineLimit()
		if err != nil || got != tt.want {
			t.Errorf("%q: EngineLimit = %+v, %v; want %+v", tt.kv, got, err, tt.want)
		}
	}
}

func TestEngineLimit(t *testing.T) {
	c := mustLoad(t, Options{}, ours+"token_bucket.yaml", upstream+"basic_config.yaml")
	tests := []struct {
		kv   []string
		want algorithms.Limit
	}{
		{kv("bucket", "x"), algorithms.Limit{Algorithm: algorithms.TokenBucket, Limit: 60, Window: time.Minute, RefillRate: 0.5}},
		{kv("sliding", "x"), algorithms.Limit{Algorithm: algorithms.SlidingWindow, Limit: 100, Window: time.Hour}},
		{kv("fixed", "500"), algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 7, Window: 7 * 24 * time.Hour}},
		{kv("onoff", "on"), algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 365, Window: 365 * 24 * time.Hour}},
	}
	for _, tt := range tests {
		m := c.Match("tb", entries(tt.kv...))
		if m == nil {
			t.Fatalf("no match for %q", tt.kv)
		}
		got, err := m.Limit.EngineLimit()
		if err != nil {
			t.Errorf("%q: EngineLimit: %v", tt.kv, err)
		}
		if got != tt.want {
			t.Errorf("%q: EngineLimit = %+v, want %+v", tt.kv, got, tt.want)
		}
	}
	if _, err := c.Match("test-domain", entries("key6", "x")).Limit.EngineLimit(); err == nil {
		t.Error("unlimited: EngineLimit gave no error")
	}
}
