package xdsconfig

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/throttle-rl/throttle/descriptors"
	"github.com/throttle-rl/throttle/internal/testkit/logbuf"
	"github.com/throttle-rl/throttle/internal/testkit/xdstest"
)

// entries is the descriptor Envoy sends for rule i of xdstest.AIGatewayTokens.
func entries(rule int, tenant, requestID string) []descriptors.Entry {
	var out []descriptors.Entry
	for _, e := range xdstest.AIGatewayDescriptor(rule, tenant, requestID, 0).GetEntries() {
		out = append(out, descriptors.Entry{Key: e.GetKey(), Value: e.GetValue()})
	}
	return out
}

// TestReservationsOverlay: on the descriptors Envoy Gateway makes of Envoy
// AI Gateway's token policy with an x-request-id Distinct selector, the
// overlay takes the selector's descriptor out, so every request of a
// tenant counts on the tenant's counter and names its hold by its id; an
// entry that cannot apply is left out with a warning, and the rest loads.
func TestReservationsOverlay(t *testing.T) {
	res, err := ParseReservations("overlay.yaml", []byte(`
reservations:
  - domain: `+xdstest.AIGatewayDomain+`
    handle: rule-0-match-1
    hits: 1000
    ttl: 60s
  - domain: `+xdstest.AIGatewayDomain+`
    handle: rule-1-match-1
    hits: 500
    ttl: 30
  - domain: other
    handle: rule-0-match-1
    hits: 1
    ttl: 1m
`), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	logs := &logbuf.Buffer{}
	cfg, err := loadConfigs(descriptors.Options{}, []*rlsconf.RateLimitConfig{xdstest.AIGatewayTokens(10000, 100)}, res, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	m := cfg.Match(xdstest.AIGatewayDomain, entries(0, "acme", "req-1"))
	if m == nil || m.Handle != "req-1" || m.Limit.Reserve == nil || m.Limit.Reserve.Hits != 1000 || m.Limit.Reserve.TTL != time.Minute {
		t.Fatalf("rule 0 match = %+v, want handle req-1 and reserve 1000 for 1m", m)
	}
	if other := cfg.Match(xdstest.AIGatewayDomain, entries(0, "acme", "req-2")); other.Counter != m.Counter {
		t.Errorf("two requests of one tenant count on %q and %q, want one counter", m.Counter, other.Counter)
	}
	if strings.Contains(m.Counter, "req-1") || strings.Contains(m.StatsKey, "req-1") {
		t.Errorf("counter %q or stats key %q carries the request id", m.Counter, m.StatsKey)
	}
	// Rule 1's limit is 100, less than the 500 its entry would hold: left
	// out, rule 1 as Envoy Gateway sent it (a counter per request).
	r1 := cfg.Match(xdstest.AIGatewayDomain, entries(1, "acme", "req-1"))
	if r1 == nil || r1.Handle != "" || r1.Limit.Reserve != nil || !strings.Contains(r1.Counter, "req-1") {
		t.Errorf("rule 1 match = %+v, want Envoy Gateway's, counted per request", r1)
	}
	if got := logs.String(); !strings.Contains(got, `reservations[1] (domain \"`+xdstest.AIGatewayDomain+`\", handle \"rule-1-match-1\"): hits 500 are more than the limit under it, 100`) {
		t.Errorf("no warning for the entry left out:\n%s", got)
	}
	wantDump := xdstest.AIGatewayDomain + "." + xdstest.AIGatewayRoute + "_" + xdstest.AIGatewayRoute + ".rule-0-match-0: unit=HOUR requests_per_unit=10000, shadow_mode: false, reserve: hits=1000 ttl=1m0s handle=rule-0-match-1\n"
	if dump := cfg.Dump(); !strings.Contains(dump, wantDump) {
		t.Errorf("Dump:\n%s\nwant a line %s", dump, wantDump)
	}
}

func TestParseReservationsRefuses(t *testing.T) {
	for _, tt := range []struct{ yaml, want string }{
		{"reservations: [{domain: d, handle: h, hits: 1, ttl: 90s}]", "o.yaml: reservations[0]: ttl 1m30s is longer than MAX_RESERVATION_TTL, 1m0s"},
		{"reservations: [{domain: d, handle: h, hits: 0, ttl: 9}]", "o.yaml: reservations[0]: hits 0 must be at least 1"},
		{"reservations: [{domain: d, hits: 1, ttl: 9}]", "o.yaml: reservations[0]: handle is required: the descriptor key of the Distinct x-request-id selector (Envoy Gateway: rule-<rule>-match-<selector>)"},
		{"reservations: [{domain: d, handle: h, hits: 1, ttl: 9, amount: 2}]", `o.yaml: error unmarshaling JSON: while decoding JSON: json: unknown field "amount"`},
		{"reservations: [{domain: d, handle: h, hits: 1, ttl: soon}]", `o.yaml: error unmarshaling JSON: while decoding JSON: ttl "soon" must be a number of seconds or a duration such as 60s`},
	} {
		if _, err := ParseReservations("o.yaml", []byte(tt.yaml), time.Minute); err == nil || err.Error() != tt.want {
			t.Errorf("ParseReservations(%s) = %v, want %s", tt.yaml, err, tt.want)
		}
	}
}
