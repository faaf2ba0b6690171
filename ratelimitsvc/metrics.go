package ratelimitsvc

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/throttle-rl/throttle/internal/inputsize"
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
// id cannot grow Prometheus without bound. A key is at most
// inputsize.MaxName bytes (inputsize.ShortName), so no label is longer.
type metrics struct {
	perKey                                   [families]*prometheus.CounterVec
	domainNotFound, globalShadowMode, folded prometheus.Counter
	oversized                                *prometheus.CounterVec
	holds                                    *prometheus.CounterVec
	latency                                  *prometheus.HistogramVec

	ref ReferenceStats // nil: none

	maxValueKeys int
	mu           sync.RWMutex
	valueKeys    map[valueKey]struct{}
	counters     sync.Map // valueKey → *keyCounters
}

type valueKey struct{ domain, key string }

func newMetrics(reg prometheus.Registerer, maxValueKeys int, ref ReferenceStats) (*metrics, error) {
	labels := []string{"domain", "key"}
	vec := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	m := &metrics{
		perKey: [families]*prometheus.CounterVec{
			hitsFamily:        vec("throttle_ratelimit_hits_total", "Hits counted against a descriptor's limit."),
			overLimitFamily:   vec("throttle_ratelimit_over_limit_total", "Hits over a descriptor's limit."),
			nearLimitFamily:   vec("throttle_ratelimit_near_limit_total", "Hits within a descriptor's limit but above the near-limit ratio."),
			withinLimitFamily: vec("throttle_ratelimit_within_limit_total", "Hits within a descriptor's limit."),
			shadowModeFamily:  vec("throttle_ratelimit_shadow_mode_total", "Hits over a shadow-mode limit that were let through."),
			overLimitLocalCacheFamily: vec("throttle_ratelimit_over_limit_with_local_cache_total",
				"Hits over a descriptor's limit that the local over-limit cache rejected without Redis (LOCAL_CACHE_SIZE_IN_BYTES)."),
		},
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
		oversized: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "throttle_ratelimit_oversized_requests_total",
			Help: "Requests refused, nothing counted, for more descriptors than MAX_DESCRIPTORS_PER_REQUEST (reason descriptors), a descriptor with more entries than MAX_DESCRIPTOR_ENTRIES (entries), a domain, key or value over 1024 bytes (string), a descriptor's keys and values over 4096 bytes (descriptor_bytes) or a limit override's window over MAX_OVERRIDE_WINDOW (override_window).",
		}, []string{"reason"}),
		holds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "throttle_ratelimit_reservation_calls_total",
			Help: "Envoy calls on limits that reserve, by what their handle made of them: reserve (hits_addend 0, a hold asked for), commit (hits_addend N, or 0 on a held handle, settled), recheck (hits_addend 0 on a handle settled or expired before), uncommitted (hits_addend N with no hold: counted as always_count), cleared (hits_addend N on a hold its counters' reset took: nothing counted).",
		}, []string{"call"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "throttle_grpc_request_duration_seconds",
			Help:    "gRPC request latency by method and status code.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .02, .05, .1, .5, 1},
		}, []string{"method", "code"}),
		ref:          ref,
		maxValueKeys: maxValueKeys,
		valueKeys:    map[valueKey]struct{}{},
	}
	for _, reason := range inputsize.Reasons {
		m.oversized.WithLabelValues(reason) // every series from the start: a fixed set
	}
	for h := holdReserve; h <= holdCleared; h++ {
		m.holds.WithLabelValues(h.call()) // every series from the start: five, fixed
	}
	if reg != nil {
		cs := []prometheus.Collector{m.domainNotFound, m.globalShadowMode, m.folded, m.oversized, m.holds, m.latency}
		for _, v := range m.perKey {
			cs = append(cs, v)
		}
		for _, c := range cs {
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
	c := m.countersOf(domain, inputsize.ShortName(m.label(domain, key, rollup)))
	c.add(m, hitsFamily, hits)
	switch o {
	case over:
		c.add(m, overLimitFamily, hits)
		if cached {
			c.add(m, overLimitLocalCacheFamily, hits)
		}
		if shadow {
			c.add(m, shadowModeFamily, hits)
		}
	case near:
		c.add(m, nearLimitFamily, hits)
		c.add(m, withinLimitFamily, hits)
	default:
		c.add(m, withinLimitFamily, hits)
	}
}

// family is one of the per-descriptor counter families, an index of
// metrics.perKey.
type family int

const (
	hitsFamily family = iota
	overLimitFamily
	overLimitLocalCacheFamily
	nearLimitFamily
	withinLimitFamily
	shadowModeFamily
	families
)

// keyCounters are one (domain, key)'s counters, looked up in the vectors
// once: a vector lookup hashes its labels on every call. Each is made when
// first counted, so /metrics shows no series that never moved (a key only
// ever within its limit has no over_limit, near_limit or shadow_mode
// series); so is its counter of the reference's stats, when they are on.
type keyCounters struct {
	domain, key string
	once        [families]sync.Once
	counters    [families]prometheus.Counter
	refs        [families]interface{ Add(uint64) } // nil: no reference stats
}

// add adds hits to the counters of family f, making them first if need be.
func (c *keyCounters) add(m *metrics, f family, hits int64) {
	c.once[f].Do(func() {
		c.counters[f] = m.perKey[f].WithLabelValues(c.domain, c.key)
		if m.ref != nil {
			c.refs[f] = m.ref.DescriptorCounter(c.domain, c.key, referenceStat[f])
		}
	})
	c.counters[f].Add(float64(hits))
	if r := c.refs[f]; r != nil {
		r.Add(uint64(hits))
	}
}

// countersOf returns the counters of (domain, key). Keys are bounded by the
// configuration and maxValueKeys, and so is this cache.
func (m *metrics) countersOf(domain, key string) *keyCounters {
	vk := valueKey{domain, key}
	if c, ok := m.counters.Load(vk); ok {
		return c.(*keyCounters)
	}
	actual, _ := m.counters.LoadOrStore(vk, &keyCounters{domain: domain, key: key})
	return actual.(*keyCounters)
}

// unaryLatency records every unary call's latency by method and code.
func (m *metrics) unaryLatency(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := handler(ctx, req)
	took := time.Since(start)
	m.latency.WithLabelValues(info.FullMethod, status.Code(err).String()).Observe(took.Seconds())
	if m.ref != nil {
		m.ref.UnaryCall(info.FullMethod, took)
	}
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

// call names h as throttle_ratelimit_reservation_calls_total does.
func (h holdMode) call() string {
	switch h {
	case holdReserve:
		return "reserve"
	case holdRecheck:
		return "recheck"
	case holdSettled:
		return "commit"
	case holdAlways:
		return "uncommitted"
	case holdCleared:
		return "cleared"
	}
	return ""
}

// reservation counts one call on a limit that reserves.
func (m *metrics) reservation(h holdMode) {
	if h != noHold {
		m.holds.WithLabelValues(h.call()).Inc()
	}
}
