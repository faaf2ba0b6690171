package refstats

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/statsd_exporter/pkg/mapper"
)

// scrape returns the sink's metrics in the text format.
func scrape(t *testing.T, p *PrometheusSink) string {
	t.Helper()
	rec := httptest.NewRecorder()
	p.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("GET /metrics: %d", rec.Code)
	}
	return rec.Body.String()
}

// wantSamples fails the test for every sample of want that body lacks.
func wantSamples(t *testing.T, body string, want ...string) {
	t.Helper()
	lines := map[string]bool{}
	for _, l := range strings.Split(body, "\n") {
		lines[l] = true
	}
	for _, w := range want {
		if !lines[w] {
			t.Errorf("no sample %s", w)
		}
	}
	if t.Failed() {
		t.Logf("scraped:\n%s", body)
	}
}

// TestPrometheusDefaultMapping: the default mapping names the stats as the
// reference's default does; what it does not map keeps its name.
func TestPrometheusDefaultMapping(t *testing.T) {
	p, err := NewPrometheusSink(DefaultMapping(false))
	if err != nil {
		t.Fatal(err)
	}
	s := New(p, Options{})
	s.DescriptorCounter("edge", "path_/a", TotalHits).Add(5)
	s.DescriptorCounter("edge", "path_/a", WithinLimit).Add(4)
	s.DescriptorCounter("edge", "path_/a", OverLimit).Add(1)
	s.DescriptorCounter("edge", "path_/a", NearLimit).Add(1)
	s.DescriptorCounter("edge", "generic_key_api.user_id_u1.x", TotalHits).Add(2)
	s.DescriptorCounter("edge", "path_/a", OverLimitWithLocalCache).Add(1)
	s.DescriptorCounter("edge", "t.u", OverLimitWithLocalCache).Add(4) // the reference's unanchored expression
	s.DomainNotFound("nope", 1)
	s.ServiceError()
	s.ConfigLoad(nil)
	s.GlobalShadowMode()
	s.UnaryCall("/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", 3*time.Millisecond)
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantSamples(t, scrape(t, p),
		`ratelimit_service_rate_limit_total_hits{domain="edge",key1="path_/a"} 5`,
		`ratelimit_service_rate_limit_within_limit{domain="edge",key1="path_/a"} 4`,
		`ratelimit_service_rate_limit_over_limit{domain="edge",key1="path_/a"} 1`,
		`ratelimit_service_rate_limit_near_limit{domain="edge",key1="path_/a"} 1`,
		`ratelimit_service_rate_limit_total_hits{domain="edge",key1="generic_key_api",key2="user_id_u1"} 2`,
		`ratelimit_service_rate_limit_edge_path__a_over_limit_with_local_cache 1`,
		`ratelimit_service_rate_limit_over_limit{domain="edge",key1="t",key2="u"} 4`,
		`ratelimit_service_rate_limit_nope_domain_not_found 1`,
		`ratelimit_service_should_rate_limit_error{err_type="service_error"} 1`,
		`ratelimit_service_config_load_success 1`,
		`ratelimit_service_global_shadow_mode 1`,
		`ratelimit_service_total_requests{grpc_method="ShouldRateLimit"} 1`,
		`ratelimit_service_response_time_seconds_bucket{grpc_method="ShouldRateLimit",le="0.005"} 1`,
		`ratelimit_service_response_time_seconds_sum{grpc_method="ShouldRateLimit"} 0.003`,
	)
}

// TestPrometheusMilliseconds: PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS
// keeps the response time in milliseconds.
func TestPrometheusMilliseconds(t *testing.T) {
	p, err := NewPrometheusSink(DefaultMapping(true))
	if err != nil {
		t.Fatal(err)
	}
	s := New(p, Options{})
	s.UnaryCall("/grpc.health.v1.Health/Check", 7*time.Millisecond)
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantSamples(t, scrape(t, p),
		`ratelimit_service_response_time_seconds_sum{grpc_method="Check"} 7`,
		`ratelimit_service_total_requests{grpc_method="Check"} 1`,
	)
}

// TestDefaultMappingLoads: the mapping is valid for statsd_exporter, and
// the reference's own default mapping (its deprecated timer_type
// included) loads too: a PROMETHEUS_MAPPER_YAML written for the reference
// moves over.
func TestDefaultMappingLoads(t *testing.T) {
	for _, ms := range []bool{false, true} {
		var m mapper.MetricMapper
		if err := m.InitFromYAMLString(DefaultMapping(ms)); err != nil {
			t.Errorf("DefaultMapping(%v): %v\n%s", ms, err, DefaultMapping(ms))
		}
	}
	if _, err := NewPrometheusSink("mappings:\n  - match: \"a.*\"\n    name: \"x\"\n    timer_type: histogram\n"); err != nil {
		t.Errorf("a mapping with timer_type: %v", err)
	}
	if _, err := NewPrometheusSink("mappings:\n  - match: \"a.*\"\n"); err == nil {
		t.Error("a mapping without a name: no error")
	}
	if err := CheckMapping("mappings:\n  - match: \"a.*\"\n"); err == nil {
		t.Error("CheckMapping of a mapping without a name: no error")
	}
	if err := CheckMapping(DefaultMapping(false)); err != nil {
		t.Errorf("CheckMapping(DefaultMapping): %v", err)
	}
}

// TestPrometheusCustomMapping: a mapping of one's own replaces the default.
func TestPrometheusCustomMapping(t *testing.T) {
	const custom = `mappings:
  - match: "ratelimit.service.rate_limit.*.*.total_hits"
    name: "rl_hits"
    labels: {ns: "$1", descriptor: "$2"}
`
	p, err := NewPrometheusSink(custom)
	if err != nil {
		t.Fatal(err)
	}
	s := New(p, Options{})
	s.DescriptorCounter("edge", "path_/a", TotalHits).Add(2)
	s.DescriptorCounter("edge", "path_/a", WithinLimit).Add(2)
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantSamples(t, scrape(t, p),
		`rl_hits{descriptor="path_/a",ns="edge"} 2`,
		`ratelimit_service_rate_limit_edge_path__a_within_limit 2`,
	)
}
