package descriptors

import (
	"testing"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
)

func TestNewDomain(t *testing.T) {
	minute := RateLimit{RequestsPerUnit: 10, Unit: Minute}
	d, err := NewDomain("client-a", []Rule{
		{Entries: entries("path", "/api/*"), Limit: RateLimit{RequestsPerUnit: 5, Window: 90 * time.Second, Algorithm: algorithms.SlidingWindow}},
		{Entries: entries("path", "/api/login"), Limit: minute, ShadowMode: true},
		{Entries: entries("user", "", "path", "/api/*"), Limit: RateLimit{RequestsPerUnit: 3, Unit: Second, Algorithm: algorithms.TokenBucket, RefillRate: 1}},
	})
	must(t, err)
	c := &Config{domains: map[string]*Domain{"client-a": d}}
	runLookups(t, c, []lookup{
		{"client-a", kv("path", "/api/users"), &result{RPU: 5, Stats: "client-a.path_/api/*"}},
		{"client-a", kv("path", "/api/login"), &result{RPU: 10, Unit: Minute, Stats: "client-a.path_/api/login", Shadow: true}},
		{"client-a", kv("user", "u1", "path", "/api/x"), &result{RPU: 3, Unit: Second, Stats: "client-a.user.path_/api/*"}},
		{"client-a", kv("user", "u1"), nil},
		{"client-a", kv("path", "/web"), nil},
	})
	m := d.Match(entries("path", "/api/users"))
	el, err := m.Limit.EngineLimit()
	must(t, err)
	if want := (algorithms.Limit{Algorithm: algorithms.SlidingWindow, Limit: 5, Window: 90 * time.Second}); el != want {
		t.Errorf("EngineLimit = %+v, want %+v", el, want)
	}

	bad := []struct {
		rules []Rule
		want  string
	}{
		{[]Rule{{Entries: entries("a", "1"), Limit: minute}, {Entries: entries("a", "1"), Limit: minute}},
			`rule 1: domain "client-a": duplicate descriptor composite key 'client-a.a_1'`},
		{[]Rule{{Limit: minute}}, `rule 0: domain "client-a": rule has no descriptor entries`},
		{[]Rule{{Entries: entries("", "x"), Limit: minute}}, `rule 0: domain "client-a": descriptor has empty key`},
		{[]Rule{{Entries: entries("a", ""), Limit: RateLimit{RequestsPerUnit: 1}}}, `rule 0: domain "client-a": invalid rate limit unit 'unknown'`},
		{[]Rule{{Entries: entries("a", ""), Limit: RateLimit{Unlimited: true, Unit: Day}}}, `rule 0: domain "client-a": should not specify rate limit unit when unlimited`},
		{[]Rule{{Entries: entries("a", ""), Limit: RateLimit{RequestsPerUnit: 1, Unit: Day, Algorithm: "nope"}}},
			`rule 0: domain "client-a": unknown algorithm 'nope' (want fixed_window, sliding_window, token_bucket or gcra)`},
		{[]Rule{{Entries: entries("a", ""), Limit: RateLimit{RequestsPerUnit: 1, Window: time.Microsecond}}},
			`rule 0: domain "client-a": window 1µs must be between 1ms and 366 days`},
	}
	for _, tt := range bad {
		_, err := NewDomain("client-a", tt.rules)
		if err == nil || err.Error() != tt.want {
			t.Errorf("NewDomain: got %v, want %s", err, tt.want)
		}
	}
}
