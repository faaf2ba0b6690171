package ratelimitsvc

import (
	"context"
	"time"

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
// {domain, key}, plus gRPC latency.
type metrics struct {
	hits, overLimit, nearLimit, withinLimit, shadowMode *prometheus.CounterVec
	domainNotFound                                      prometheus.Counter
	latency                                             *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
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
		domainNotFound: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "throttle_ratelimit_domain_not_found_total", Help: "Requests for a domain no configuration or client has.",
		}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "throttle_grpc_request_duration_seconds",
			Help:    "gRPC request latency by method and status code.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .02, .05, .1, .5, 1},
		}, []string{"method", "code"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.hits, m.overLimit, m.nearLimit, m.withinLimit, m.shadowMode, m.domainNotFound, m.latency} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

func (m *metrics) observe(domain, key string, hits int64, o outcome, shadow bool) {
	h := float64(hits)
	m.hits.WithLabelValues(domain, key).Add(h)
	switch o {
	case over:
		m.overLimit.WithLabelValues(domain, key).Add(h)
		if shadow {
			m.shadowMode.WithLabelValues(domain, key).Add(h)
		}
	case near:
		m.nearLimit.WithLabelValues(domain, key).Add(h)
		m.withinLimit.WithLabelValues(domain, key).Add(h)
	default:
		m.withinLimit.WithLabelValues(domain, key).Add(h)
	}
}

// unaryLatency records every unary call's latency by method and code.
func (m *metrics) unaryLatency(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := handler(ctx, req)
	m.latency.WithLabelValues(info.FullMethod, status.Code(err).String()).Observe(time.Since(start).Seconds())
	return resp, err
}
