package redisstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/algorithms/redisstore"
	"github.com/throttle-rl/throttle/internal/testkit/redistest"
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
	ready := func() map[string]error {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		return st.Ready(ctx)
	}

	if got := ready(); len(got) != 1 || got["redis"] != nil {
		t.Fatalf("Ready with Redis up = %v, want redis: nil", got)
	}
	srv.Stop()
	for range 5 {
		got := ready()
		if err := got["redis"]; len(got) != 1 || err == nil || !strings.HasPrefix(err.Error(), "redis: ") {
			t.Fatalf("Ready with Redis stopped = %v, want redis and why it does not answer", got)
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
	if got := ready(); len(got) != 1 || got["redis"] != nil {
		t.Errorf("Ready with Redis back = %v, want redis: nil", got)
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
	ready := func() (map[string]error, time.Duration) {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		t0 := time.Now()
		got := st.Ready(ctx)
		return got, time.Since(t0)
	}

	got, _ := ready()
	for _, a := range addrs {
		if err, asked := got[a]; !asked || err != nil || len(got) != 3 {
			t.Fatalf("Ready with every master up = %v, want each of %v: nil", got, addrs)
		}
	}
	masters[1].Stop()
	got, took := ready()
	for i, a := range addrs {
		err, asked := got[a]
		if !asked || (err != nil) != (i == 1) || (err != nil && !strings.HasPrefix(err.Error(), "redis master "+a+": ")) {
			t.Errorf("Ready with master 1 stopped: %s: %v (asked: %v); want an error only for master 1, naming it", a, err, asked)
		}
	}
	if len(got) != 3 {
		t.Errorf("Ready asked %v, want the 3 masters", got)
	}
	if took > time.Second {
		t.Errorf("Ready took %v, past its 500ms deadline", took)
	}
}
