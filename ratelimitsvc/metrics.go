package ratelimitsvc

import (
	"context"
	"sync"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

type outcome int

const (
	within outcome = iota
	near
	over
)

// metrics follow the reference service's per-descriptor stats, as labels:
// throttle_ratelimit_{hits,over_limit,near_limit,within_limit,shadow_mode}_total
// {domain, key}, where key is the reference's stats key without the domain
// (ratelimit.service.rate_limit.DOMAIN.KEY.STAT there), plus the
// service-level global_shadow_mode and gRPC latency.
//
// A key is bounded by the configuration, except where the reference puts
// request values into it: detailed_metric, value_to_metric and limit
// overrides. Those per-value keys are capped at maxValueKeys distinct
// ones (per process, for its lifetime); once the cap is reached, a new
// value's decisions count under the descriptor's configured key (the key
// without detailed_metric and value_to_metric), and in
// throttle_ratelimit_stats_keys_folded_total, so a descriptor keyed by user
// id cannot grow Prometheus without bound.
type metrics struct {
	hits, overLimit, nearLimit, withinLimit, shadowMode *prometheus.CounterVec
	overLimitLocalCache                                 *prometheus.CounterVec
	domainNotFound, globalShadowMode, folded            prometheus.Counter
	latency                                             *prometheus.HistogramVec

	maxValueKeys int
	mu           sync.RWMutex
	valueKeys    map[valueKey]struct{}
	counters     sync.Map // valueKey → *keyCounters
}

type valueKey struct{ domain, key string }

func newMetrics(reg prometheus.Registerer, maxValueKeys int) (*metrics, error) {
	labels := []string{"domain", "key"}
	vec := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	m := &metrics{
		hits:        vec("throttle_ratelimit_hits_total", "Hits counted against a descriptor's limit."),
		overLimit:   vec("throttle_ratelimit_over_limit_total", "Hits over a descriptor's limit."),
		nearLimit:   vec("throttle_ratelimit_near_limit_total", "Hits within a descriptor's limit but above the near-limit ratio."),
		withinLimit: vec("throttle_ratelimit_within_limit_total", "Hits within a descriptor's limit."),
		shadowMode:  vec("throttle_ratelimit_shadow_mode_total", "Hits over a shadow-mode limit that were let through."),
		overLimitLocalCache: vec("throttle_ratelimit_over_limit_with_local_cache_total",
			"Hits over a descriptor's limit that the local over-limit cache rejected without Redis (LOCAL_CACHE_SIZE_IN_BYTES)."),
		domainNotFound: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "throttle_ratelimit_domain_not_found_total", Help: "Requests for a domain no configuration or client has.",
		}),
		globalShadowMode: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "throttle_ratelimit_global_shadow_mode_total", Help: "Requests over a limit that SHADOW_MODE answered OK.",
		}),
		folded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "throttle_ratelimit_stats_keys_folded_total",
			Help: "Descriptor decisions counted under their configured key because STATS_MAX_VALUE_KEYS per-value keys exist.",
		}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "throttle_grpc_request_duration_seconds",
			Help:    "gRPC request latency by method and status code.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .02, .05, .1, .5, 1},
		}, []string{"method", "code"}),
		maxValueKeys: maxValueKeys,
		valueKeys:    map[valueKey]struct{}{},
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.hits, m.overLimit, m.overLimitLocalCache, m.nearLimit, m.withinLimit, m.shadowMode, m.domainNotFound, m.globalShadowMode, m.folded, m.latency} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// observe counts one descriptor decision under domain and key, or under
// rollup, its key without request values, once the per-value keys are
// capped. cached says the local over-limit cache made it.
func (m *metrics) observe(domain, key, rollup string, hits int64, o outcome, shadow, cached bool) {
	c := m.countersOf(domain, m.label(domain, key, rollup))
	h := float64(hits)
	c.hits.Add(h)
	switch o {
	case over:
		c.overLimit.Add(h)
		if cached {
			c.overLimitLocalCache.Add(h)
		}
		if shadow {
			c.shadowMode.Add(h)
		}
	case near:
		c.nearLimit.Add(h)
		c.withinLimit.Add(h)
	default:
		c.withinLimit.Add(h)
	}
}

// keyCounters are one (domain, key)'s counters, looked up in the vectors
// once: a vector lookup hashes its labels on every call.
type keyCounters struct {
	hits, overLimit, overLimitLocalCache, nearLimit, withinLimit, shadowMode prometheus.Counter
}

// countersOf returns the counters of (domain, key). Keys are bounded by the
// configuration and maxValueKeys, and so is this cache.
func (m *metrics) countersOf(domain, key string) *keyCounters {
	vk := valueKey{domain, key}
	if c, ok := m.counters.Load(vk); ok {
		return c.(*keyCounters)
	}
	c := &keyCounters{
		hits:                m.hits.WithLabelValues(domain, key),
		overLimit:           m.overLimit.WithLabelValues(domain, key),
		overLimitLocalCache: m.overLimitLocalCache.WithLabelValues(domain, key),
		nearLimit:           m.nearLimit.WithLabelValues(domain, key),
		withinLimit:         m.withinLimit.WithLabelValues(domain, key),
		shadowMode:          m.shadowMode.WithLabelValues(domain, key),
	}
	actual, _ := m.counters.LoadOrStore(vk, c)
	return actual.(*keyCounters)
}

// unaryLatency records every unary call's latency by method and code.
func (m *metrics) unaryLatency(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := handler(ctx, req)
	m.latency.WithLabelValues(info.FullMethod, status.Code(err).String()).Observe(time.Since(start).Seconds())
	return resp, err
}

// label returns key when it is bounded by the configuration (equal to
// rollup), already counted, or still within the cap; else rollup.
func (m *metrics) label(domain, key, rollup string) string {
	if key == rollup {
		return key
	}
	vk := valueKey{domain, key}
	m.mu.RLock()
	_, seen := m.valueKeys[vk]
	m.mu.RUnlock()
	if seen {
		return key
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, seen := m.valueKeys[vk]; seen {
		return key
	}
	if len(m.valueKeys) < m.maxValueKeys {
		m.valueKeys[vk] = struct{}{}
		return key
	}
	m.folded.Inc()
	return rollup
}

// keysOnly is a descriptor's keys joined with '.': the configured key of a
// limit override, whose stats key (fullKey) carries the request's values.
func keysOnly(d *rlcommon.RateLimitDescriptor) string { return joinEntries(d, false) }
