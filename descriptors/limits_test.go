package descriptors

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/throttle-rl/throttle/algorithms"
)

// TestParseRateLimits: rate_limits, unit_multiplier and always_count as
// Parse reads them.
func TestParseRateLimits(t *testing.T) {
	f := mustParse(t, ours+"rate_limits.yaml")
	want := []Descriptor{
		{Key: "user_id", Line: 7, RateLimits: []Limit{
			{Name: "burst", Unit: "second", RequestsPerUnit: 10, Line: 9},
			{Name: "sustained", Unit: "day", RequestsPerUnit: 1000, Line: 12},
		}},
		{Key: "report", Line: 16, RateLimit: &Limit{Unit: "minute", UnitMultiplier: 5, RequestsPerUnit: 100, Line: 17}},
		{Key: "tenant", Line: 22, Descriptors: []Descriptor{
			{Key: "tokens", Line: 24, RateLimits: []Limit{
				{Unit: "minute", RequestsPerUnit: 1000, AlwaysCount: true, Line: 26},
				{Unit: "hour", UnitMultiplier: 24, RequestsPerUnit: 100000, Algorithm: algorithms.TokenBucket, AlwaysCount: true, Line: 29},
			}},
		}},
	}
	if diff := cmp.Diff(want, f.Descriptors); diff != "" {
		t.Errorf("Parse (-want +got):\n%s", diff)
	}
}

// TestMatchRateLimits: a match carries every limit of the descriptor, in
// configuration order, each converting to its own engine limit; the window
// is unit × unit_multiplier.
func TestMatchRateLimits(t *testing.T) {
	c := mustLoad(t, Options{}, ours+"rate_limits.yaml")
	tests := []struct {
		kv   []string
		want []algorithms.Limit
	}{
		{kv("user_id", "alice"), []algorithms.Limit{
			{Algorithm: algorithms.FixedWindow, Limit: 10, Window: time.Second},
			{Algorithm: algorithms.FixedWindow, Limit: 1000, Window: 24 * time.Hour},
		}},
		{kv("report", "weekly"), []algorithms.Limit{{Algorithm: algorithms.FixedWindow, Limit: 100, Window: 5 * time.Minute}}},
		{kv("tenant", "acme", "tokens", "gpt"), []algorithms.Limit{
			{Algorithm: algorithms.FixedWindow, Limit: 1000, Window: time.Minute},
			{Algorithm: algorithms.TokenBucket, Limit: 100000, Window: 24 * time.Hour},
		}},
	}
	for _, tt := range tests {
		m := c.Match("multi", entries(tt.kv...))
		if m == nil {
			t.Fatalf("%q: no match", tt.kv)
		}
		var got []algorithms.Limit
		for _, l := range m.Limits {
			el, err := l.EngineLimit()
			if err != nil {
				t.Fatalf("%q: EngineLimit: %v", tt.kv, err)
			}
			got = append(got, el)
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%q: engine limits (-want +got):\n%s", tt.kv, diff)
		}
		if diff := cmp.Diff(m.Limits[0], m.Limit); diff != "" {
			t.Errorf("%q: Limit is not Limits[0] (-want +got):\n%s", tt.kv, diff)
		}
	}
	if m := c.Match("multi", entries("tenant", "acme", "tokens", "gpt")); !m.Limits[0].AlwaysCount || !m.Limits[1].AlwaysCount {
		t.Errorf("always_count lost: %+v", m.Limits)
	}
}

func TestWindowLength(t *testing.T) {
	tests := []struct {
		l    RateLimit
		want time.Duration
	}{
		{RateLimit{Unit: Minute}, time.Minute},
		{RateLimit{Unit: Minute, UnitMultiplier: 1}, time.Minute},
		{RateLimit{Unit: Minute, UnitMultiplier: 5}, 5 * time.Minute},
		{RateLimit{Unit: Hour, UnitMultiplier: 24}, 24 * time.Hour},
		{RateLimit{Unit: Second, UnitMultiplier: 90, Window: 90 * time.Second}, 90 * time.Second},
		{RateLimit{Window: 7 * time.Second}, 7 * time.Second},
		// No overflow, however large: refused by validation instead.
		{RateLimit{Unit: Year, UnitMultiplier: 4294967295}, 1<<63 - 1},
	}
	for _, tt := range tests {
		if got := tt.l.WindowLength(); got != tt.want {
			t.Errorf("%+v: WindowLength = %v, want %v", tt.l, got, tt.want)
		}
	}
}

// TestApplyReplacesLimits: replaces drops the named limits of another
// descriptor, keeping its others, and the match only once none is left.
func TestApplyReplacesLimits(t *testing.T) {
	d, err := NewDomain("d", []Rule{
		{Entries: entries("user", ""), Limit: RateLimit{Name: "burst", RequestsPerUnit: 10, Unit: Second},
			More: []RateLimit{{Name: "daily", RequestsPerUnit: 1000, Unit: Day}}},
		{Entries: entries("vip", ""), Limit: RateLimit{RequestsPerUnit: 100, Unit: Second, Replaces: []string{"burst"}}},
		{Entries: entries("banned", ""), Limit: RateLimit{RequestsPerUnit: 0, Unit: Second, Replaces: []string{"burst", "daily"}}},
	})
	must(t, err)
	names := func(m *Match) []string {
		if m == nil {
			return nil
		}
		var out []string
		for _, l := range m.Limits {
			out = append(out, l.Name)
		}
		return out
	}
	user := d.Match(entries("user", "u"))
	ms := ApplyReplaces([]*Match{user, d.Match(entries("vip", "v"))})
	if got := names(ms[0]); !cmp.Equal(got, []string{"daily"}) || ms[0].Limit.Name != "daily" {
		t.Errorf("user after vip replaces burst: limits %v, Limit %q; want [daily]", got, ms[0].Limit.Name)
	}
	if got := names(user); !cmp.Equal(got, []string{"burst", "daily"}) {
		t.Errorf("the original match changed: %v", got)
	}
	if got := names(d.Match(entries("user", "u"))); !cmp.Equal(got, []string{"burst", "daily"}) {
		t.Errorf("the configuration changed: %v", got)
	}
	ms = ApplyReplaces([]*Match{d.Match(entries("user", "u")), d.Match(entries("banned", "b"))})
	if ms[0] != nil || ms[1] == nil {
		t.Errorf("user after banned replaces both its limits: %v, want dropped", names(ms[0]))
	}
}

// TestNewDomainLimits: a rule with further limits, and what is refused.
func TestNewDomainLimits(t *testing.T) {
	burst := RateLimit{Name: "login[0]", RequestsPerUnit: 5, Unit: Minute}
	d, err := NewDomain("app", []Rule{{Entries: entries("path", "/login"), Limit: burst,
		More: []RateLimit{{Name: "login[1]", RequestsPerUnit: 20, Unit: Hour, Window: time.Hour, AlwaysCount: true}}}})
	must(t, err)
	m := d.Match(entries("path", "/login"))
	if len(m.Limits) != 2 || m.Limits[1].Name != "login[1]" || !m.Limits[1].AlwaysCount {
		t.Fatalf("match limits = %+v", m.Limits)
	}
	bad := []struct {
		rule Rule
		want string
	}{
		{Rule{Entries: entries("a", ""), Limit: burst, More: []RateLimit{burst}},
			`rule 0: domain "app": rate_limits[1]: name 'login[0]' is already the name of rate_limits[0]`},
		{Rule{Entries: entries("a", ""), Limit: burst, More: []RateLimit{{RequestsPerUnit: 5, Window: time.Minute}}},
			`rule 0: domain "app": rate_limits[1]: same algorithm, requests_per_unit, window and refill_rate as rate_limits[0]: the two would count against one counter`},
		{Rule{Entries: entries("a", ""), Limit: burst, More: []RateLimit{{RequestsPerUnit: 5}}},
			`rule 0: domain "app": rate_limits[1]: invalid rate limit unit 'unknown'`},
		{Rule{Entries: entries("a", ""), Limit: RateLimit{Unlimited: true, AlwaysCount: true}},
			`rule 0: domain "app": always_count has no meaning for an unlimited limit, which counts nothing`},
	}
	for _, tt := range bad {
		if _, err := NewDomain("app", []Rule{tt.rule}); err == nil || err.Error() != tt.want {
			t.Errorf("NewDomain: got %v\nwant %s", err, tt.want)
		}
	}
}

func TestDumpRateLimits(t *testing.T) {
	got := mustLoad(t, Options{}, ours+"rate_limits.yaml").Dump()
	want := "" +
		"multi.report: unit=MINUTE requests_per_unit=100, shadow_mode: false, unit_multiplier: 5\n" +
		"multi.tenant.tokens: unit=MINUTE requests_per_unit=1000, shadow_mode: false, always_count: true\n" +
		"multi.tenant.tokens: unit=HOUR requests_per_unit=100000, shadow_mode: false, unit_multiplier: 24, algorithm: token_bucket, always_count: true\n" +
		"multi.user_id: unit=SECOND requests_per_unit=10, shadow_mode: false, name: burst\n" +
		"multi.user_id: unit=DAY requests_per_unit=1000, shadow_mode: false, name: sustained\n"
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Dump (-want +got):\n%s", diff)
	}
}

// TestCheckRateLimitsLines: `throttle config check` names the line of the
// element of rate_limits that has the problem.
func TestCheckRateLimitsLines(t *testing.T) {
	yaml := "domain: d\ndescriptors:\n  - key: a\n    rate_limits:\n      - {unit: second, requests_per_unit: 1}\n      - unit: minute\n        unit_multiplier: -5\n        requests_per_unit: 1\n"
	c, err := Load(Options{}, Source{Name: "c.yaml", Data: []byte(yaml)})
	want := `c.yaml:6: domain "d" › descriptors[0] › rate_limits[1]: unit_multiplier must be a whole number between 1 and 4294967295, not -5`
	if err == nil || err.Error() != want {
		t.Errorf("Load = %v, %v\nwant %s", c, err, want)
	}
}

func mustParse(t *testing.T, path string) *File {
	t.Helper()
	data, err := os.ReadFile(path)
	must(t, err)
	f, err := Parse(filepath.Base(path), data)
	must(t, err)
	return f
}
