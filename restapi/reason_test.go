package restapi

import (
	"net/http"
	"testing"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/algorithms/redisstore"
	"github.com/throttle-rl/throttle/internal/testkit/redistest"
)

// TestReasonFailurePolicy: with Redis stopped, every FAILURE_MODE answers
// with reason failure_policy and RateLimit-Degraded: true, so an app tells a
// fallback from a real decision; with Redis up the same check is
// within_limit and carries no such header.
func TestReasonFailurePolicy(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		mode    algorithms.FailureMode
		allowed bool
	}{
		{algorithms.FailOpen, true},
		{algorithms.FailClosed, false},
		{algorithms.FailLocal, true},
	} {
		t.Run(string(tt.mode), func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			g, err := redisstore.NewGuard(redisstore.New(redistest.NewClient(t, srv.URL()), redisstore.Options{}),
				redisstore.GuardOptions{Mode: tt.mode, DefaultTimeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			e := newEnv(t, backends()[0], func(d *Deps) { d.Limiter = g })
			c := e.register(t, "degraded")
			body := `{"identifier":"u","limit":5,"window":60,"algorithm":"fixed_window"}`
			got, r := e.check(t, c, body)
			if got.Reason != "within_limit" || r.header.Get("RateLimit-Degraded") != "" {
				t.Errorf("with Redis: reason %q, RateLimit-Degraded %q; want within_limit and none", got.Reason, r.header.Get("RateLimit-Degraded"))
			}
			srv.Stop()
			got, r = e.check(t, c, body)
			if got.Reason != "failure_policy" || got.Allowed != tt.allowed || r.header.Get("RateLimit-Degraded") != "true" {
				t.Errorf("Redis stopped: allowed %v, reason %q, RateLimit-Degraded %q; want %v, failure_policy, true",
					got.Allowed, got.Reason, r.header.Get("RateLimit-Degraded"), tt.allowed)
			}
			if !tt.allowed && r.header.Get("Retry-After") == "" {
				t.Errorf("a refusal by the failure policy has no Retry-After")
			}
			if r := e.call(t, "GET", "/me", c.Key, ""); r.status != http.StatusOK {
				t.Errorf("GET /me = %d", r.status)
			}
		})
	}
}
