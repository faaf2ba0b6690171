package xdsconfig

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// The results of throttle_xds_responses_total.
const (
	loaded  = "loaded"
	refused = "refused"
)

// metrics are the client's: throttle_xds_responses_total{result} counts
// the responses loaded (ACK) and refused (NACK; one sent again after its
// NACK is not counted again), throttle_xds_connected is 1 while a stream
// that has brought a response is open.
type metrics struct {
	responses *prometheus.CounterVec
	connected prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		responses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "throttle_xds_responses_total",
			Help: "xDS RateLimitConfig responses, by result: loaded (ACK) or refused (NACK; the last good configuration stayed in use).",
		}, []string{"result"}),
		connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "throttle_xds_connected",
			Help: "1 while the stream to the xDS control plane is open and has brought a response, else 0.",
		}),
	}
	m.responses.WithLabelValues(loaded)
	m.responses.WithLabelValues(refused)
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.responses, m.connected} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register xDS metrics: %w", err)
		}
	}
	return m, nil
}
