package main

import (
	"context"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/throttle-rl/throttle/internal/testkit"
	"github.com/throttle-rl/throttle/internal/testkit/configmap"
	"github.com/throttle-rl/throttle/internal/testkit/redistest"
	"github.com/throttle-rl/throttle/internal/testkit/throttletest"
)

// TestIstioSample runs the built binary as Istio's rate-limit sample
// (samples/ratelimit/rate-limit-service.yaml in istio/istio) deploys the
// reference service: /bin/ratelimit with no arguments and the sample's
// environment word for word, only the ports moved to free ones and Redis's
// address to a real Redis of the test; the descriptors of the sample's
// ConfigMap, mounted where the sample mounts it (/data/ratelimit/config,
// here under a temp folder). Envoy's requests are decided in that Redis, and
// an edit of the ConfigMap (the kubelet's ..data swap) applies without a
// restart.
func TestIstioSample(t *testing.T) {
	redis := redistest.Start(t)
	data := filepath.Join(t.TempDir(), "data")
	configmap.Write(t, filepath.Join(data, "ratelimit", "config"), pathConfig(1))
	s := throttletest.StartReference(t,
		"LOG_LEVEL=debug",
		"REDIS_SOCKET_TYPE=tcp",
		"REDIS_URL="+redis.Addr(),
		"USE_STATSD=false",
		"RUNTIME_ROOT="+data,
		"RUNTIME_SUBDIRECTORY=ratelimit",
		"RUNTIME_WATCH_ROOT=false",
		"RUNTIME_IGNOREDOTFILES=true",
		"HOST=::",
		"GRPC_HOST=::",
		"PORT="+strconv.Itoa(testkit.FreePort(t)),
		"GRPC_PORT="+strconv.Itoa(testkit.FreePort(t)),
	)
	c := rlsDial(t, s.GRPCAddr)
	ok, over := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	if got, want := overallCodes(t, c, pathRequest("/"), 2), []rlsv3.RateLimitResponse_Code{ok, over}; !slices.Equal(got, want) {
		t.Fatalf("PATH / at 1 a minute: %v, want %v", got, want)
	}
	if got := overallCodes(t, c, pathRequest("/other"), 3); slices.Contains(got, over) {
		t.Fatalf("PATH /other at 100 a minute: %v, want all OK", got)
	}
	rdb := redistest.NewClient(t, redis.URL())
	keys, err := rdb.Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) < 2 || !strings.Contains(strings.Join(keys, " "), "echo-ratelimit") {
		t.Errorf("Redis keys = %q, want the counters of echo-ratelimit's two limits", keys)
	}

	// kubectl edit configmap ratelimit-config: 3 a minute for "/".
	configmap.Write(t, filepath.Join(data, "ratelimit", "config"), pathConfig(3))
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := c.ShouldRateLimit(context.Background(), pathRequest("/"))
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the ConfigMap edit was not applied within 15s: %v", resp)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code, body := get(t, s.URL+"/healthcheck"); code != 200 || body != "OK" {
		t.Errorf("/healthcheck = %d %q", code, body)
	}
}
