package redisstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/algorithms/redisstore"
	"github.com/throttle-rl/throttle/internal/redistest"
)

// TestReadySingle: Ready asks Redis itself, through no breaker: it says
// "redis" is down at once while the guard over the same store still has its
// circuit closed and has decided nothing by policy, and it is back as soon
// as Redis is.
func TestReadySingle(t *testing.T) {
	srv := redistest.Start(t)
	st := redisstore.New(redistest.NewClient(t, srv.URL()), redisstore.Options{})
	t.Cleanup(st.Close)
	reg := prometheus.NewRegistry()
	g, err := redisstore.NewGuard(st, redisstore.GuardOptions{Mode: algorithms.FailClosed, BreakerMinCalls: 1, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	ready := func() ([]string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		return st.Ready(ctx)
	}

	if down, err := ready(); down != nil || err != nil {
		t.Fatalf("Ready with Redis up = %v, %v; want nil, nil", down, err)
	}
	srv.Stop()
	for range 5 {
		down, err := ready()
		if fmt.Sprint(down) != "[redis]" || err == nil || !strings.Contains(err.Error(), "redis: ") {
			t.Fatalf("Ready with Redis stopped = %v, %v; want [redis] and why", down, err)
		}
	}
	if g.Degraded() {
		t.Error("Ready opened the guard's circuit")
	}
	for _, m := range []string{"throttle_degraded_decisions_total", "throttle_backend_errors_total", "throttle_backend_circuit_open"} {
		if got := metricValue(t, reg, m); got != 0 {
			t.Errorf("%s = %v after 5 probes, want 0: probes are not decisions", m, got)
		}
	}
	srv.Restart()
	if down, err := ready(); down != nil || err != nil {
		t.Errorf("Ready with Redis back = %v, %v; want nil, nil", down, err)
	}
}

// TestReadyCluster: on a Cluster, Ready names the master that is down, and
// only it, within its deadline.
func TestReadyCluster(t *testing.T) {
	masters := redistest.StartClusterServers(t)
	var addrs []string
	for _, m := range masters {
		addrs = append(addrs, m.Addr())
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1,
		DialTimeout: 200 * time.Millisecond, MaxRedirects: 1})
	t.Cleanup(func() { cc.Close() })
	st := redisstore.New(cc, redisstore.Options{})
	t.Cleanup(st.Close)
	ready := func() ([]string, error, time.Duration) {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		t0 := time.Now()
		down, err := st.Ready(ctx)
		return down, err, time.Since(t0)
	}

	if down, err, _ := ready(); down != nil || err != nil {
		t.Fatalf("Ready with every master up = %v, %v; want nil, nil", down, err)
	}
	masters[1].Stop()
	down, err, took := ready()
	if fmt.Sprint(down) != fmt.Sprint([]string{addrs[1]}) || err == nil || !strings.Contains(err.Error(), "redis master "+addrs[1]+": ") {
		t.Errorf("Ready with master 1 stopped = %v, %v; want [%s] and why", down, err, addrs[1])
	}
	if took > 600*time.Millisecond {
		t.Errorf("Ready took %v, past its 500ms deadline", took)
	}
}
