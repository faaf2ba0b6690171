package ratelimitsvc_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/algorithms/redisstore"
	"github.com/throttle-rl/throttle/descriptors"
	"github.com/throttle-rl/throttle/internal/envoycounters"
	"github.com/throttle-rl/throttle/internal/testkit/redistest"
	"github.com/throttle-rl/throttle/ratelimitsvc"
)

const holdsYAML = `domain: llm
descriptors:
  - key: tenant
    rate_limit:
      unit: hour
      requests_per_unit: 10
      always_count: true
      reserve: {hits: 4, ttl: 60s, handle: rid}
  - key: ban
    rate_limit: {unit: hour, requests_per_unit: 0}
`

// TestReservationCalls: every shape of Envoy's two calls on a limit that
// reserves, with the exact remaining each leaves, on the memory store and
// on Redis.
func TestReservationCalls(t *testing.T) {
	cfg, err := descriptors.Load(descriptors.Options{}, descriptors.Source{Name: "llm.yaml", Data: []byte(holdsYAML)})
	if err != nil {
		t.Fatal(err)
	}
	stores := map[string]algorithms.Store{"memory": algorithms.NewMemoryStore(algorithms.MemoryOptions{})}
	rs := redisstore.New(redistest.NewClient(t, redistest.SharedURL(t)), redisstore.Options{KeyPrefix: fmt.Sprintf("holds%d_", time.Now().UnixNano())})
	t.Cleanup(func() { rs.Close() })
	stores["redis"] = rs
	for name, store := range stores {
		t.Run(name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			srv, rls, _ := serveServer(t, ratelimitsvc.Options{Limiter: store, Descriptors: func() *descriptors.Config { return cfg },
				Now: time.Now, Registerer: reg})
			call := func(hits uint64, ds ...*rlcommon.RateLimitDescriptor) *rlsv3.RateLimitResponse {
				t.Helper()
				for _, d := range ds {
					if d.HitsAddend == nil {
						withHits(d, hits)
					}
				}
				resp, err := rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "llm", Descriptors: ds})
				if err != nil {
					t.Fatal(err)
				}
				return resp
			}
			tenant := func(rid string) *rlcommon.RateLimitDescriptor {
				if rid == "" {
					return desc("tenant", "acme")
				}
				return desc("tenant", "acme", "rid", rid)
			}
			steps := []struct {
				what      string
				hits      uint64
				ds        []*rlcommon.RateLimitDescriptor
				over      bool
				remaining uint32
			}{
				{"reserve r1", 0, []*rlcommon.RateLimitDescriptor{tenant("r1")}, false, 6},
				{"reserve r2", 0, []*rlcommon.RateLimitDescriptor{tenant("r2")}, false, 2},
				{"reserve r3: 4 do not fit in 2", 0, []*rlcommon.RateLimitDescriptor{tenant("r3")}, true, 2},
				{"commit 1 of r1: 3 back", 1, []*rlcommon.RateLimitDescriptor{tenant("r1")}, false, 5},
				{"commit 1 of r1 again: counted always", 1, []*rlcommon.RateLimitDescriptor{tenant("r1")}, false, 4},
				{"a second 0 on r2: commit 0, all back", 0, []*rlcommon.RateLimitDescriptor{tenant("r2")}, false, 8},
				{"a third 0 on r2: a reused handle, read", 0, []*rlcommon.RateLimitDescriptor{tenant("r2")}, false, 8},
				{"commit 3 of unknown r9: counted always", 3, []*rlcommon.RateLimitDescriptor{tenant("r9")}, false, 5},
				{"no handle: counts its hits", 2, []*rlcommon.RateLimitDescriptor{tenant("")}, false, 3},
				{"reserve r4 beside a ban: refused, nothing held", 0, []*rlcommon.RateLimitDescriptor{tenant("r4"), desc("ban", "x")}, true, 3},
				{"a read without the handle: r4 held nothing", 0, []*rlcommon.RateLimitDescriptor{tenant("")}, false, 3},
			}
			for _, s := range steps {
				resp := call(s.hits, s.ds...)
				st := resp.GetStatuses()[0]
				if over := resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT; over != s.over || st.GetLimitRemaining() != s.remaining {
					t.Errorf("%s: over %t, remaining %d; want over %t, remaining %d", s.what, over, st.GetLimitRemaining(), s.over, s.remaining)
				}
			}
			// A reset of the counters (REST's POST /descriptors/{domain}/counters/reset)
			// takes the holds: a commit after counts nothing into the fresh counter.
			reset := func() {
				t.Helper()
				if _, _, err := srv.ResetCounters(context.Background(), "llm", []envoycounters.Descriptor{counterDesc("tenant", "acme")}); err != nil {
					t.Fatal(err)
				}
			}
			reset()
			if st := call(0, tenant("r5")).GetStatuses()[0]; st.GetLimitRemaining() != 6 {
				t.Fatalf("reserve r5 after a reset: remaining %d, want 6", st.GetLimitRemaining())
			}
			reset()
			if st := call(3, tenant("r5")).GetStatuses()[0]; st.GetLimitRemaining() != 10 {
				t.Errorf("commit 3 of r5 after the reset: remaining %d, want 10 (nothing counted)", st.GetLimitRemaining())
			}
			for call, want := range map[string]float64{"reserve": 5, "commit": 2, "recheck": 1, "uncommitted": 2, "cleared": 1} {
				if got := counter(t, reg, "throttle_ratelimit_reservation_calls_total", map[string]string{"call": call}); got != want {
					t.Errorf("throttle_ratelimit_reservation_calls_total{call=%q} = %v, want %v", call, got, want)
				}
			}
		})
	}
}

// BenchmarkReservation: Envoy's two calls for one request, one after the
// other on Redis through a real gRPC listener: check-then-charge (hits 0,
// then 1, no handle) against reserve-then-commit (the same with a handle:
// a settle and a check with a hold, then a settle).
func BenchmarkReservation(b *testing.B) {
	rs := redisstore.New(redistest.NewClient(b, redistest.SharedURL(b)), redisstore.Options{KeyPrefix: fmt.Sprintf("bench%d_", time.Now().UnixNano())})
	b.Cleanup(rs.Close)
	cfg, err := descriptors.Load(descriptors.Options{}, descriptors.Source{Name: "b.yaml", Data: []byte(`domain: llm
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 4000000000, always_count: true, reserve: {hits: 1, ttl: 60, handle: rid}}
`)})
	if err != nil {
		b.Fatal(err)
	}
	c := serveBench(b, ratelimitsvc.Options{Limiter: rs, Descriptors: func() *descriptors.Config { return cfg }})
	call := func(hits uint64, kv ...string) {
		req := &rlsv3.RateLimitRequest{Domain: "llm", Descriptors: []*rlcommon.RateLimitDescriptor{withHits(desc(kv...), hits)}}
		if _, err := c.ShouldRateLimit(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("check_then_charge", func(b *testing.B) {
		for range b.N {
			call(0, "tenant", "acme")
			call(1, "tenant", "acme")
		}
	})
	b.Run("reserve_then_commit", func(b *testing.B) {
		for i := range b.N {
			rid := strconv.Itoa(i)
			call(0, "tenant", "acme", "rid", rid)
			call(1, "tenant", "acme", "rid", rid)
		}
	})
}
