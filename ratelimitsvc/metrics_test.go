package ratelimitsvc_test

import (
	"math"
	"strconv"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/ratelimitsvc"
)

// TestMetricsSeriesOnlyWhenCounted: 50,000 distinct detailed_metric values
// with the cap at 1,000 value keys. Every value is within its limit, so
// each of the 1,000 value keys and the rolled-up key "user" has exactly a
// hits and a within_limit series: the families a key never counted in
// (over_limit, near_limit, shadow_mode, over_limit_with_local_cache) have
// no series, where they used to be made up front, 6 per key.
func TestMetricsSeriesOnlyWhenCounted(t *testing.T) {
	const (
		values   = 50_000
		capKeys  = 1_000
		perCall  = 50
		keyCount = capKeys + 1 // the value keys and "user", where the rest fold
	)
	reg := prometheus.NewRegistry()
	c, _ := serve(t, ratelimitsvc.Options{Limiter: algorithms.NewMemoryStore(algorithms.MemoryOptions{Now: func() time.Time { return t0 }}),
		Descriptors: loadConfig(t, "testdata/knobs.yaml"), MaxValueStatsKeys: capKeys, Registerer: reg})
	for first := 0; first < values; first += perCall {
		ds := make([]*rlcommon.RateLimitDescriptor, perCall)
		for i := range ds {
			ds[i] = desc("user", "u"+strconv.Itoa(first+i))
		}
		resp := ask(t, c, knobs(ds...))
		if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("call at %d: %v, want OK", first, resp.GetOverallCode())
		}
	}

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	total := 0
	for _, mf := range mfs {
		n := samples(mf)
		got[mf.GetName()] = n
		total += n
	}
	for name, want := range map[string]int{
		"throttle_ratelimit_hits_total":                        keyCount,
		"throttle_ratelimit_within_limit_total":                keyCount,
		"throttle_ratelimit_over_limit_total":                  0,
		"throttle_ratelimit_near_limit_total":                  0,
		"throttle_ratelimit_shadow_mode_total":                 0,
		"throttle_ratelimit_over_limit_with_local_cache_total": 0,
		"throttle_ratelimit_stats_keys_folded_total":           1,
		"throttle_ratelimit_domain_not_found_total":            1,
		"throttle_ratelimit_global_shadow_mode_total":          1,
		"throttle_ratelimit_oversized_requests_total":          5, // its five reasons, from the start
		"throttle_ratelimit_reservation_calls_total":           5, // its five calls, from the start
		// One method and code: 12 buckets, +Inf, _sum and _count.
		"throttle_grpc_request_duration_seconds": 15,
	} {
		if got[name] != want {
			t.Errorf("%s: %d series, want %d", name, got[name], want)
		}
	}
	// 2,030 in all; it was 6,026 with every family made per key.
	if want := 2*keyCount + 13 + 15; total != want {
		t.Errorf("the service's metrics have %d series, want %d", total, want)
	}
	if got := counter(t, reg, "throttle_ratelimit_hits_total", map[string]string{"domain": "knobs", "key": "user"}); got != values-capKeys {
		t.Errorf("hits of the rolled-up key = %v, want %d", got, values-capKeys)
	}
	if got := counter(t, reg, "throttle_ratelimit_stats_keys_folded_total", nil); got != values-capKeys {
		t.Errorf("folded = %v, want %d", got, values-capKeys)
	}

	// A family appears with its first count: one value over its limit.
	resp := ask(t, c, knobs(desc("banned", "x")))
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("banned: %v, want OVER_LIMIT", resp.GetOverallCode())
	}
	if got := counter(t, reg, "throttle_ratelimit_over_limit_total", map[string]string{"domain": "knobs", "key": "banned"}); got != 1 {
		t.Errorf("over_limit{key=banned} = %v, want 1", got)
	}
}

// samples is how many samples a metric family has on /metrics: one per
// counter or gauge; a histogram's buckets (with +Inf), _sum and _count.
func samples(mf *dto.MetricFamily) int {
	n := 0
	for _, m := range mf.GetMetric() {
		switch {
		case m.GetHistogram() != nil:
			b := m.GetHistogram().GetBucket()
			n += len(b) + 2
			if len(b) == 0 || !math.IsInf(b[len(b)-1].GetUpperBound(), 1) {
				n++ // +Inf is written even when not gathered
			}
		default:
			n++
		}
	}
	return n
}
