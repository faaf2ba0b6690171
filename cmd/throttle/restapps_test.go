package main

import (
	"net/http"
	"testing"

	"github.com/throttle-rl/throttle/internal/redistest"
	"github.com/throttle-rl/throttle/internal/throttletest"
)

// The REST API for apps (issue 31) through the built binary.

// restSetups are the two deployments every test here runs on: the embedded
// default, and Redis + PostgreSQL.
func restSetups(t *testing.T) map[string][]string {
	t.Helper()
	return map[string][]string{
		"embedded":       nil,
		"redis+postgres": {"REDIS_URL=" + redistest.SharedURL(t), "DATABASE_URL=" + freshPostgres(t), "BACKEND_TIMEOUT=2s"},
	}
}

// TestReasonRedisStopped: with Redis stopped, /check says the failure
// policy decided — reason failure_policy and RateLimit-Degraded: true —
// under each FAILURE_MODE; before, the same check is within_limit.
func TestReasonRedisStopped(t *testing.T) {
	for _, tt := range []struct {
		mode    string
		allowed bool
	}{
		{"open", true},
		{"closed", false},
		{"local", true},
	} {
		t.Run(tt.mode, func(t *testing.T) {
			t.Parallel()
			rs := redistest.Start(t)
			s := throttletest.Start(t, "REDIS_URL="+rs.URL(), "FAILURE_MODE="+tt.mode)
			key := s.Register(t, "reason-"+tt.mode)
			body := `{"identifier":"u","limit":5,"window":60,"algorithm":"fixed_window"}`
			status, h, got := doJSON(t, "POST", s.URL+"/check", key, body)
			if status != http.StatusOK || got["reason"] != "within_limit" || h.Get("RateLimit-Degraded") != "" {
				t.Errorf("Redis up: %d reason %v RateLimit-Degraded %q; want 200 within_limit and none", status, got["reason"], h.Get("RateLimit-Degraded"))
			}
			rs.Stop()
			status, h, got = doJSON(t, "POST", s.URL+"/check", key, body)
			if status != http.StatusOK || got["reason"] != "failure_policy" || got["allowed"] != tt.allowed || h.Get("RateLimit-Degraded") != "true" {
				t.Errorf("Redis stopped: %d %v, RateLimit-Degraded %q; want 200 allowed %v reason failure_policy, header true",
					status, got, h.Get("RateLimit-Degraded"), tt.allowed)
			}
		})
	}
}
