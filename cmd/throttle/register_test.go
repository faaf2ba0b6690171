package main

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/throttle-rl/throttle/internal/testkit/redistest"
	"github.com/throttle-rl/throttle/internal/testkit/throttletest"
)

// TestRegisterWithRedisDown: POST /register with Redis stopped, through the
// built binary. Under FAILURE_MODE=closed the failure policy refuses the
// registration limit's count, which is the backend's fault: 503
// BACKEND_UNAVAILABLE with Retry-After, from the first attempt on, never a
// 429 that blames the caller; registering works again once Redis is back.
// Under open and local the policy admits (201).
func TestRegisterWithRedisDown(t *testing.T) {
	for _, tc := range []struct {
		mode   string
		status int
		code   string
	}{
		{"closed", http.StatusServiceUnavailable, "BACKEND_UNAVAILABLE"},
		{"open", http.StatusCreated, ""},
		{"local", http.StatusCreated, ""},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			redis := redistest.Start(t)
			s := throttletest.Start(t, "REDIS_URL="+redis.URL(), "FAILURE_MODE="+tc.mode)
			redis.Stop()
			register := func(n int) (int, http.Header, map[string]any) {
				body := fmt.Sprintf(`{"name": "down %d", "email": "down-%s-%d@example.com"}`, n, tc.mode, n)
				return doJSON(t, "POST", s.URL+"/register", "", body)
			}
			for n := range 3 {
				status, h, body := register(n)
				if status != tc.status || (tc.code != "" && body["code"] != tc.code) {
					t.Fatalf("attempt %d with Redis stopped: %d %v, want %d %s", n+1, status, body, tc.status, tc.code)
				}
				if status == http.StatusServiceUnavailable && h.Get("Retry-After") != "1" {
					t.Errorf("attempt %d: 503 with Retry-After %q, want 1", n+1, h.Get("Retry-After"))
				}
			}
			if tc.mode != "closed" {
				return
			}
			redis.Restart()
			for n, deadline := 3, time.Now().Add(10*time.Second); ; n++ {
				status, _, body := register(n)
				if status == http.StatusCreated {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("register 10s after Redis came back: %d %v", status, body)
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
}
