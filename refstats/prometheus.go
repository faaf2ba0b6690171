package refstats

import (
	_ "embed"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"text/template"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/statsd_exporter/pkg/event"
	"github.com/prometheus/statsd_exporter/pkg/exporter"
	"github.com/prometheus/statsd_exporter/pkg/mapper"
)

//go:embed mapping.yaml.tmpl
var mappingTemplate string

// DefaultMapping is the mapping of the reference stats to Prometheus
// metrics the Prometheus sink uses without PROMETHEUS_MAPPER_YAML: that of
// the reference, in statsd_exporter's format, such as
// ratelimit.service.rate_limit.DOMAIN.KEY.total_hits →
// ratelimit_service_rate_limit_total_hits{domain="DOMAIN",key1="KEY"}.
// The response time is in seconds, or in milliseconds when
// responseTimeMilliseconds (PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS).
// Stats it does not map keep their names, '.' as '_'.
func DefaultMapping(responseTimeMilliseconds bool) string {
	var b strings.Builder
	// The template is this package's own and its data fixed: it executes.
	_ = template.Must(template.New("mapping").Parse(mappingTemplate)).Execute(&b, struct {
		Stats   []string
		Seconds bool
	}{[]string{NearLimit, OverLimit, TotalHits, WithinLimit, ShadowMode}, !responseTimeMilliseconds})
	return b.String()
}

// CheckMapping reports whether mapping, in statsd_exporter's YAML format,
// loads.
func CheckMapping(mapping string) error {
	var m mapper.MetricMapper
	if err := m.InitFromYAMLString(mapping); err != nil {
		return fmt.Errorf("statsd_exporter mapping: %w", err)
	}
	return nil
}

// PrometheusSink turns the stats into Prometheus metrics, as statsd_exporter
// would, received from the reference over statsd: each is mapped by a
// mapping (DefaultMapping, or PROMETHEUS_MAPPER_YAML's) and counted in a
// registry of its own, which Handler serves (setting USE_PROMETHEUS), with
// Go's and the process's metrics and statsd_exporter's own
// (statsd_exporter_*) as the reference's endpoint has them.
type PrometheusSink struct {
	reg *prometheus.Registry

	mu      sync.Mutex
	pending event.Events // the counters and gauges of the flush in progress
	timers  event.Events // response times not sent yet

	sending sync.RWMutex // held to send to events, and to close it
	closed  bool
	events  chan event.Events
	done    chan struct{}
}

// timerBatch is how many response times are handed to the exporter at
// once: one hand-over per call cost as much as the call's own mapping.
const timerBatch = 64

// NewPrometheusSink returns a sink that maps stats by mapping, a mapping in
// statsd_exporter's YAML format (DefaultMapping, or the contents of
// PROMETHEUS_MAPPER_YAML). Its goroutine, which updates the metrics, runs
// until the sink is closed (Stats.Close).
func NewPrometheusSink(mapping string) (*PrometheusSink, error) {
	reg := prometheus.NewRegistry()
	m := &mapper.MetricMapper{Registerer: reg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if err := m.InitFromYAMLString(mapping); err != nil {
		return nil, fmt.Errorf("statsd_exporter mapping: %w", err)
	}
	own := exporterMetrics()
	exp := exporter.NewExporter(reg, m, m.Logger, own.actions, own.unmapped, own.errors, own.events, own.conflicts, own.metrics)
	for _, c := range []prometheus.Collector{
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		own.actions, own.unmapped, own.errors, own.events, own.conflicts, own.metrics,
	} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	p := &PrometheusSink{reg: reg, events: make(chan event.Events, 1024), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		exp.Listen(p.events) // until close closes events
	}()
	return p, nil
}

// Handler serves the metrics in Prometheus's text format (PROMETHEUS_PATH).
func (p *PrometheusSink) Handler() http.Handler {
	return promhttp.InstrumentMetricHandler(p.reg, promhttp.HandlerFor(p.reg, promhttp.HandlerOpts{}))
}

// Counters and gauges are sent together at the end of a flush; timers
// (the response times) in batches of timerBatch, and at every flush.

func (p *PrometheusSink) FlushCounter(name string, value uint64) {
	p.add(&event.CounterEvent{CMetricName: name, CValue: float64(value), CLabels: map[string]string{}})
}

func (p *PrometheusSink) FlushGauge(name string, value uint64) {
	p.add(&event.GaugeEvent{GMetricName: name, GValue: float64(value), GLabels: map[string]string{}})
}

func (p *PrometheusSink) FlushTimer(name string, value float64) {
	e := &event.ObserverEvent{OMetricName: name, OValue: value, OLabels: map[string]string{}}
	var batch event.Events
	p.mu.Lock()
	p.timers = append(p.timers, e)
	if len(p.timers) >= timerBatch {
		batch, p.timers = p.timers, make(event.Events, 0, timerBatch)
	}
	p.mu.Unlock()
	if batch != nil {
		p.send(batch)
	}
}

func (p *PrometheusSink) add(e event.Event) {
	p.mu.Lock()
	p.pending = append(p.pending, e)
	p.mu.Unlock()
}

// Flush sends the counters and gauges of the flush, and the response
// times not sent yet.
func (p *PrometheusSink) Flush() {
	p.mu.Lock()
	es := append(p.pending, p.timers...)
	p.pending, p.timers = nil, nil
	p.mu.Unlock()
	if len(es) > 0 {
		p.send(es)
	}
}

// send hands es to the exporter's goroutine; after close, it drops them.
func (p *PrometheusSink) send(es event.Events) {
	p.sending.RLock()
	defer p.sending.RUnlock()
	if !p.closed {
		p.events <- es
	}
}

// close stops the exporter's goroutine once it has handled what was sent.
func (p *PrometheusSink) close() error {
	p.sending.Lock()
	if !p.closed {
		p.closed = true
		close(p.events)
	}
	p.sending.Unlock()
	<-p.done
	return nil
}

// ownMetrics are statsd_exporter's metrics about its events.
type ownMetrics struct {
	actions, errors, events, conflicts *prometheus.CounterVec
	unmapped                           prometheus.Counter
	metrics                            *prometheus.GaugeVec
}

// exporterMetrics makes statsd_exporter's metrics, with its names.
func exporterMetrics() ownMetrics {
	vec := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	return ownMetrics{
		actions:   vec("statsd_exporter_events_actions_total", "The total number of StatsD events by action.", "action"),
		errors:    vec("statsd_exporter_events_error_total", "The total number of StatsD events discarded due to errors.", "reason"),
		events:    vec("statsd_exporter_events_total", "The total number of StatsD events seen.", "type"),
		conflicts: vec("statsd_exporter_events_conflict_total", "The total number of StatsD events with conflicting names.", "type", "metric_name"),
		unmapped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "statsd_exporter_events_unmapped_total", Help: "The total number of StatsD events no mapping was found for.",
		}),
		metrics: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "statsd_exporter_metrics_total", Help: "The total number of metrics."}, []string{"type"}),
	}
}
