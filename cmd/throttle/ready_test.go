package main

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/throttle-rl/throttle/internal/testkit/redistest"
	"github.com/throttle-rl/throttle/internal/testkit/throttletest"
)

// getReady is GET /ready: its status and body.
func getReady(t *testing.T, s *throttletest.Server) (int, string) {
	t.Helper()
	resp, err := s.HTTP.Get(s.URL + "/ready")
	if err != nil {
		t.Fatalf("GET /ready: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET /ready: %v", err)
	}
	return resp.StatusCode, strings.TrimSpace(string(body))
}

// wantReady asks GET /ready n times and fails unless every reply is status
// and body.
func wantReady(t *testing.T, what string, s *throttletest.Server, n, status int, body string) {
	t.Helper()
	for range n {
		if gotStatus, got := getReady(t, s); gotStatus != status || got != body {
			t.Errorf("%s: GET /ready = %d %s, want %d %s", what, gotStatus, got, status, body)
			return
		}
	}
}

const readyOK = `{"status":"ready","checks":{"database":"ok","limiter":"ok"}}`

// TestReadyWithRedisDown: with Redis stopped, /ready says so under every
// FAILURE_MODE — 200 "degraded" under open and local, whose replicas keep
// answering by policy and so stay in service; 503 under closed — and its
// probes are no decisions: throttle_degraded_decisions_total does not move.
// Once Redis is back, every replica is ready again, by itself.
func TestReadyWithRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	modes := []struct {
		mode   string
		status int
		body   string
	}{
		{"open", http.StatusOK, `{"status":"degraded","checks":{"database":"ok","limiter":"degraded: redis down"}}`},
		{"local", http.StatusOK, `{"status":"degraded","checks":{"database":"ok","limiter":"degraded: redis down"}}`},
		{"closed", http.StatusServiceUnavailable, `{"status":"unavailable","checks":{"database":"ok","limiter":"unavailable: redis down"}}`},
	}
	servers := make([]*throttletest.Server, len(modes))
	for i, m := range modes {
		servers[i] = throttletest.Start(t, "REDIS_URL="+srv.URL(), "FAILURE_MODE="+m.mode)
		wantReady(t, m.mode+", Redis up", servers[i], 1, http.StatusOK, readyOK)
	}

	srv.Stop()
	for i, m := range modes {
		wantReady(t, m.mode+", Redis stopped", servers[i], 5, m.status, m.body)
		if got := servers[i].Metric(t, "throttle_degraded_decisions_total"); got != 0 {
			t.Errorf("%s: throttle_degraded_decisions_total = %v after 5 probes, want 0", m.mode, got)
		}
		if got := servers[i].Metric(t, "throttle_backend_circuit_open"); got != 0 {
			t.Errorf("%s: throttle_backend_circuit_open = %v after 5 probes and no decision, want 0", m.mode, got)
		}
	}

	srv.Restart()
	for i, m := range modes {
		waitReady(t, m.mode+", Redis back", servers[i])
	}
}

// waitReady waits up to 5 s for GET /ready to answer 200 readyOK.
func waitReady(t *testing.T, what string, s *throttletest.Server) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		status, body := getReady(t, s)
		if status == http.StatusOK && body == readyOK {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: GET /ready = %d %s 5s on, want 200 %s", what, status, body, readyOK)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestReadyClusterMasterDown: on a Redis Cluster with one master stopped,
// /ready names that master, and only it, and stays 200 "degraded" under
// every FAILURE_MODE (closed too: the other masters' keys are still decided
// by Redis, and a replica out of service would decide none); with every
// master stopped, closed makes it 503.
func TestReadyClusterMasterDown(t *testing.T) {
	masters := redistest.StartClusterServers(t)
	open := throttletest.Start(t, "REDIS_URL="+clusterURL(masters), "FAILURE_MODE=open")
	closed := throttletest.Start(t, "REDIS_URL="+clusterURL(masters), "FAILURE_MODE=closed")
	wantReady(t, "open, every master up", open, 1, http.StatusOK, readyOK)
	wantReady(t, "closed, every master up", closed, 1, http.StatusOK, readyOK)

	masters[1].Stop()
	oneDown := fmt.Sprintf(`{"status":"degraded","checks":{"database":"ok","limiter":"degraded: %s down"}}`, masters[1].Addr())
	wantReady(t, "open, one master stopped", open, 3, http.StatusOK, oneDown)
	wantReady(t, "closed, one master stopped", closed, 3, http.StatusOK, oneDown)

	masters[0].Stop()
	masters[2].Stop()
	addrs := []string{masters[0].Addr(), masters[1].Addr(), masters[2].Addr()}
	slices.Sort(addrs)
	all := strings.Join(addrs, ", ")
	wantReady(t, "open, every master stopped", open, 3, http.StatusOK,
		fmt.Sprintf(`{"status":"degraded","checks":{"database":"ok","limiter":"degraded: %s down"}}`, all))
	wantReady(t, "closed, every master stopped", closed, 3, http.StatusServiceUnavailable,
		fmt.Sprintf(`{"status":"unavailable","checks":{"database":"ok","limiter":"unavailable: %s down"}}`, all))
	for _, s := range []*throttletest.Server{open, closed} {
		if got := s.Metric(t, "throttle_degraded_decisions_total"); got != 0 {
			t.Errorf("throttle_degraded_decisions_total = %v after the probes, want 0", got)
		}
	}
}
