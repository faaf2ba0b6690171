package quotasvc_test

import (
	"testing"
	"time"

	"github.com/throttle-rl/throttle/quotasvc"
)

// TestShadowMode: with SHADOW_MODE every bucket is assigned allow-all, on
// its first report and at every reassignment, whatever its limit (a shared
// limit's share, requests_per_unit 0's deny-all), while the rest goes on:
// buckets map to their limits, usage is counted, the split is computed.
func TestShadowMode(t *testing.T) {
	s := startServer(t, quotasvc.Options{ShadowMode: true}) // reassigned every 200ms
	r := dialStream(t, s.addr)
	buckets := []map[string]string{
		{"name": "api"},   // 100/s, shared
		{"user": "alice"}, // 10/s, shared
		{"name": "banned"},
		{"name": "free"},
	}
	var first []usage
	for _, b := range buckets {
		first = append(first, usage{bucket: b, allowed: 1})
	}
	r.send("quota", first...)
	for _, b := range buckets {
		if got := describe(r.actionFor(b, 2*time.Second)); got != "ALLOW_ALL ttl 1s" {
			t.Errorf("first action of %v = %s, want ALLOW_ALL ttl 1s", b, got)
		}
	}

	// Demand at three times the limits, reported every 100ms for a second:
	// five reassignments, each would cut the shared buckets down.
	var report []usage
	for _, b := range buckets[:2] {
		report = append(report, usage{bucket: b, allowed: 30, denied: 0})
	}
	report[1].allowed = 3
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		r.send("quota", report...)
	}
	for drained := false; !drained; {
		select {
		case resp := <-r.resps:
			for _, a := range resp.GetBucketAction() {
				if got := describe(a); got != "ALLOW_ALL ttl 1s" {
					t.Errorf("reassignment of %v = %s, want ALLOW_ALL ttl 1s", a.GetBucketId().GetBucket(), got)
				}
			}
		case <-time.After(300 * time.Millisecond):
			drained = true
		}
	}

	for _, m := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"throttle_rlqs_subscriptions_total", []string{"limit", "shared"}, 2},
		{"throttle_rlqs_subscriptions_total", []string{"limit", "deny"}, 1},
		{"throttle_rlqs_subscriptions_total", []string{"limit", "unlimited"}, 1},
		{"throttle_rlqs_actions_total", []string{"action", "token_bucket"}, 0},
		{"throttle_rlqs_actions_total", []string{"action", "deny_all"}, 0},
	} {
		if got := s.metric(t, m.name, m.labels...); got != m.want {
			t.Errorf("%s%v = %v, want %v", m.name, m.labels, got, m.want)
		}
	}
	if got := s.metric(t, "throttle_rlqs_reported_requests_total", "decision", "allowed"); got < 4+2*33 {
		t.Errorf("reported allowed requests = %v, want every report counted (at least %d)", got, 4+2*33)
	}
	// The split still runs: the shares it decided (the limits' 110/s at
	// most), though allow-all was sent in their place.
	if got := s.metric(t, "throttle_rlqs_assigned_rate", "domain", "quota"); got <= 0 || got > 110 {
		t.Errorf("throttle_rlqs_assigned_rate = %v, want the shares decided (0-110/s]", got)
	}
	// Three buckets would have had a token bucket or deny-all at first, and
	// the shared ones at each change of their share since.
	if got := s.metric(t, "throttle_rlqs_shadow_mode_total"); got < 3 {
		t.Errorf("throttle_rlqs_shadow_mode_total = %v, want at least 3", got)
	}
}
