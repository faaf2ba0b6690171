package envoy_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/throttle-rl/throttle/internal/testkit"
	"github.com/throttle-rl/throttle/internal/testkit/manifest"
	"github.com/throttle-rl/throttle/internal/testkit/strictyaml"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/proto"

	"github.com/throttle-rl/throttle/descriptors"
	"github.com/throttle-rl/throttle/envoy"
)

// The front proxy decodes strictly into the v3 bootstrap, passes validation, and
// is wired the way the docs say: domain "edge" limited by descriptors/edge.yaml,
// Throttle reached over HTTP/2, failing open.
func TestFrontProxy(t *testing.T) {
	data := testkit.MustRead(t, "envoy.yaml")
	b, err := envoy.LoadBootstrap(data)
	if err != nil {
		t.Fatalf("envoy.yaml: %v", err)
	}
	cfg := mustLoadDescriptors(t, "edge.yaml", testkit.MustRead(t, "descriptors/edge.yaml"))

	hcm := onlyHTTPConnectionManager(t, b.GetStaticResources().GetListeners())
	filters := hcm.GetHttpFilters()
	if n := len(filters); n < 2 || filters[n-1].GetName() != "envoy.filters.http.router" {
		t.Fatalf("http_filters must end with envoy.filters.http.router, got %v", filterNames(filters))
	}
	rl := rateLimitFilter(t, filters)
	if rl.GetDomain() != cfg.Domain {
		t.Errorf("ratelimit filter domain = %q, descriptors/edge.yaml domain = %q", rl.GetDomain(), cfg.Domain)
	}
	if rl.GetStage() != 0 {
		t.Errorf("stage = %d, want 0", rl.GetStage())
	}
	if rl.GetFailureModeDeny() {
		t.Error("failure_mode_deny = true, want false (fail open)")
	}
	if !strings.Contains(string(data), "failure_mode_deny: false") {
		t.Error("envoy.yaml should state failure_mode_deny: false explicitly, for the reader")
	}
	if got, want := rl.GetTimeout().AsDuration().Seconds(), 0.05; got != want {
		t.Errorf("timeout = %vs, want %vs", got, want)
	}
	if got := rl.GetEnableXRatelimitHeaders(); got != ratelimitv3.RateLimit_DRAFT_VERSION_03 {
		t.Errorf("enable_x_ratelimit_headers = %v, want DRAFT_VERSION_03", got)
	}
	svc := rl.GetRateLimitService()
	if svc.GetTransportApiVersion().String() != "V3" {
		t.Errorf("rate_limit_service.transport_api_version = %v, want V3", svc.GetTransportApiVersion())
	}
	rlsCluster := svc.GetGrpcService().GetEnvoyGrpc().GetClusterName()

	clusters := map[string]*clusterv3.Cluster{}
	for _, c := range b.GetStaticResources().GetClusters() {
		clusters[c.GetName()] = c
	}
	c, ok := clusters[rlsCluster]
	if !ok {
		t.Fatalf("rate_limit_service names cluster %q, which is not defined", rlsCluster)
	}
	if rlsCluster != "throttle" {
		t.Errorf("rate-limit cluster = %q, want throttle", rlsCluster)
	}
	assertHTTP2(t, c)
	if got, want := envoy.EndpointAddrs(c), []string{"throttle:8081"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("cluster throttle endpoints = %v, want %v (docker-compose service throttle, GRPC_PORT)", got, want)
	}

	// Every route goes to a defined cluster, and its rate-limit actions produce
	// descriptors that edge.yaml limits.
	var sawLimits bool
	for _, vh := range hcm.GetRouteConfig().GetVirtualHosts() {
		for _, r := range vh.GetRoutes() {
			if _, ok := clusters[r.GetRoute().GetCluster()]; !ok {
				t.Errorf("route %v goes to undefined cluster %q", r.GetMatch(), r.GetRoute().GetCluster())
			}
			for i, lim := range r.GetRoute().GetRateLimits() {
				sawLimits = true
				assertLimited(t, fmt.Sprintf("virtual host %q rate_limits[%d]", vh.GetName(), i), lim, cfg)
			}
		}
	}
	if !sawLimits {
		t.Error("no route carries rate_limits")
	}
	if got, want := envoy.EndpointAddrs(clusters["app"]), []string{"app:8080"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("cluster app endpoints = %v, want %v", got, want)
	}

	// The descriptor keys the brief promises are all produced.
	keys := map[string]bool{}
	for _, vh := range hcm.GetRouteConfig().GetVirtualHosts() {
		for _, r := range vh.GetRoutes() {
			for _, lim := range r.GetRoute().GetRateLimits() {
				for _, e := range descriptorOf(t, lim) {
					keys[e.key] = true
				}
			}
		}
	}
	for _, k := range []string{"remote_address", "generic_key", "user_id"} {
		if !keys[k] {
			t.Errorf("no rate-limit action produces descriptor key %q", k)
		}
	}
}

// Decoding is strict, and validation reaches inside typed_config: a mistake in
// envoy.yaml fails here rather than at Envoy's start.
func TestFrontProxyRejectsMistakes(t *testing.T) {
	good := string(testkit.MustRead(t, "envoy.yaml"))
	tests := []struct {
		name      string
		old, new_ string
	}{
		{"misspelled field", "failure_mode_deny: false", "failure_mode_denny: false"},
		{"misspelled field in cluster", "connect_timeout: 1s", "connect_timout: 1s"},
		{"unknown enum value", "DRAFT_VERSION_03", "DRAFT_VERSION_99"},
		{"unknown typed_config type", "ratelimit.v3.RateLimit", "ratelimit.v3.RateLimits"},
		{"validation rule inside typed_config (domain min_len 1)", "domain: edge", `domain: ""`},
		{"validation rule (port above 65535)", "port_value: 10000", "port_value: 70000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bad := strings.Replace(good, tt.old, tt.new_, 1)
			if bad == good {
				t.Fatalf("envoy.yaml has no %q to replace", tt.old)
			}
			if _, err := envoy.LoadBootstrap([]byte(bad)); err == nil {
				t.Fatalf("LoadBootstrap accepted envoy.yaml with %q → %q", tt.old, tt.new_)
			} else {
				t.Logf("rejected as expected: %v", err)
			}
		})
	}
}

// The edge descriptors load with Throttle's loader, and say what the README
// and the kind demo rely on.
func TestEdgeDescriptors(t *testing.T) {
	cfg := mustLoadDescriptors(t, "edge.yaml", testkit.MustRead(t, "descriptors/edge.yaml"))
	if cfg.Domain != "edge" {
		t.Fatalf("domain = %q, want edge", cfg.Domain)
	}
	e := func(k, v string) descriptors.Entry { return descriptors.Entry{Key: k, Value: v} }
	tests := []struct {
		name    string
		entries []descriptors.Entry
		want    string // "" = no limit
	}{
		// k8s/kind-demo.sh sends 15 requests as one user and expects 10 × 200, then 429.
		{"per user", []descriptors.Entry{e("generic_key", "api"), e("user_id", "alice")}, "10/MINUTE"},
		{"exact user value wins", []descriptors.Entry{e("generic_key", "api"), e("user_id", "load-tester")}, "1000/MINUTE"},
		{"per client IP", []descriptors.Entry{e("remote_address", "203.0.113.7")}, "100/MINUTE"},
		{"generic_key alone is not limited", []descriptors.Entry{e("generic_key", "api")}, ""},
		{"other generic_key", []descriptors.Entry{e("generic_key", "web"), e("user_id", "alice")}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ""
			if m := cfg.match(tt.entries...); m != nil {
				got = fmt.Sprintf("%d/%v", m.Limit.RequestsPerUnit, m.Limit.Unit)
			}
			if got != tt.want {
				t.Errorf("Match(%v) = %q, want %q", tt.entries, got, tt.want)
			}
		})
	}
}

// The Istio variant: each EnvoyFilter patch value decodes into the proto Istio
// will merge it as, the filter talks to the cluster the patches add, and the
// ConfigMap limits every descriptor the actions produce.
func TestIstio(t *testing.T) {
	cfg := mustLoadIstioDescriptors(t)
	if got, want := cfg.raw, string(testkit.MustRead(t, "descriptors/edge.yaml")); got != want {
		t.Errorf("istio/descriptors-configmap.yaml data[edge.yaml] differs from descriptors/edge.yaml")
	}

	filters := mustLoadEnvoyFilters(t, "istio/envoyfilter.yaml")
	var (
		clusters = map[string]*clusterv3.Cluster{}
		rl       *ratelimitv3.RateLimit
		limits   []*routev3.RateLimit
	)
	for _, f := range filters {
		if f.Spec.WorkloadSelector.Labels["istio"] != "ingressgateway" {
			t.Errorf("EnvoyFilter %s: workloadSelector %v, want istio=ingressgateway", f.Name, f.Spec.WorkloadSelector.Labels)
		}
		for i, p := range f.Spec.ConfigPatches {
			where := fmt.Sprintf("EnvoyFilter %s configPatches[%d] (%s)", f.Name, i, p.ApplyTo)
			if p.Match.Context != "GATEWAY" {
				t.Errorf("%s: match.context = %q, want GATEWAY", where, p.Match.Context)
			}
			switch p.ApplyTo {
			case "CLUSTER":
				var c clusterv3.Cluster
				mustDecodeValid(t, where, p.Patch.Value, &c)
				if p.Patch.Operation != "ADD" {
					t.Errorf("%s: operation %q, want ADD", where, p.Patch.Operation)
				}
				assertHTTP2(t, &c)
				clusters[c.GetName()] = &c
			case "HTTP_FILTER":
				var hf hcmv3.HttpFilter
				mustDecodeValid(t, where, p.Patch.Value, &hf)
				if p.Patch.Operation != "INSERT_BEFORE" || p.Match.Listener == nil ||
					p.Match.Listener.FilterChain.Filter.SubFilter.Name != "envoy.filters.http.router" {
					t.Errorf("%s: the ratelimit filter must be inserted before envoy.filters.http.router", where)
				}
				rl = rateLimitFilter(t, []*hcmv3.HttpFilter{&hf})
			case "VIRTUAL_HOST":
				// A MERGE value is a fragment (no name or domains), so only its
				// rate limits are validated.
				var vh routev3.VirtualHost
				if err := envoy.Decode(p.Patch.Value, &vh); err != nil {
					t.Fatalf("%s: %v", where, err)
				}
				if p.Patch.Operation != "MERGE" {
					t.Errorf("%s: operation %q, want MERGE", where, p.Patch.Operation)
				}
				for j, lim := range vh.GetRateLimits() {
					if err := envoy.Validate(lim); err != nil {
						t.Errorf("%s rate_limits[%d]: %v", where, j, err)
					}
					limits = append(limits, lim)
				}
			default:
				t.Errorf("%s: applyTo %q is not checked by this test; add it", where, p.ApplyTo)
			}
		}
	}
	if rl == nil {
		t.Fatal("no HTTP_FILTER patch adds envoy.filters.http.ratelimit")
	}
	if rl.GetDomain() != cfg.Domain {
		t.Errorf("Istio ratelimit filter domain = %q, ConfigMap domain = %q", rl.GetDomain(), cfg.Domain)
	}
	if rl.GetFailureModeDeny() {
		t.Error("Istio ratelimit filter: failure_mode_deny = true, want false")
	}
	name := rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName()
	c, ok := clusters[name]
	if !ok {
		t.Fatalf("Istio ratelimit filter names cluster %q; no CLUSTER patch adds it", name)
	}
	// k8s/throttle.yaml: Service "throttle" in namespace "throttle", gRPC port 8081.
	if got, want := envoy.EndpointAddrs(c), []string{"throttle.throttle.svc.cluster.local:8081"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Istio cluster %s endpoints = %v, want %v", name, got, want)
	}
	if len(limits) == 0 {
		t.Fatal("no VIRTUAL_HOST patch adds rate_limits")
	}
	for i, lim := range limits {
		assertLimited(t, fmt.Sprintf("Istio rate_limits[%d]", i), lim, cfg.descriptorConfig)
	}
}

func TestIstioRejectsMistakes(t *testing.T) {
	good := string(testkit.MustRead(t, "istio/envoyfilter.yaml"))
	tests := []struct {
		name      string
		old, new_ string
	}{
		{"misspelled EnvoyFilter field", "workloadSelector:", "workloadselector:"},
		{"misspelled field in a patch value", "descriptor_key: user_id", "descriptorkey: user_id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bad := strings.Replace(good, tt.old, tt.new_, 1)
			if bad == good {
				t.Fatalf("envoyfilter.yaml has no %q to replace", tt.old)
			}
			if err := checkEnvoyFilters([]byte(bad)); err == nil {
				t.Fatalf("accepted envoyfilter.yaml with %q → %q", tt.old, tt.new_)
			}
		})
	}
}

// checkEnvoyFilters decodes each filter and each patch value (validated),
// for the negative test.
func checkEnvoyFilters(data []byte) error {
	fs, err := decodeEnvoyFilters(data)
	if err != nil {
		return err
	}
	for _, f := range fs {
		if _, err := f.Patches(); err != nil {
			return err
		}
	}
	return nil
}

// ---- rate-limit actions against descriptors ----

// entry is one (key, value) of a request descriptor as Envoy builds it from an
// action; value "" means it comes from the request (an IP, a header).
type entry struct{ key, value string }

func descriptorOf(t *testing.T, lim *routev3.RateLimit) []entry {
	t.Helper()
	var out []entry
	for _, a := range lim.GetActions() {
		switch {
		case a.GetRemoteAddress() != nil:
			out = append(out, entry{"remote_address", ""})
		case a.GetGenericKey() != nil:
			g := a.GetGenericKey()
			out = append(out, entry{orDefault(g.GetDescriptorKey(), "generic_key"), g.GetDescriptorValue()})
		case a.GetRequestHeaders() != nil:
			out = append(out, entry{a.GetRequestHeaders().GetDescriptorKey(), ""})
		case a.GetHeaderValueMatch() != nil:
			h := a.GetHeaderValueMatch()
			out = append(out, entry{orDefault(h.GetDescriptorKey(), "header_match"), h.GetDescriptorValue()})
		case a.GetSourceCluster() != nil:
			out = append(out, entry{"source_cluster", ""})
		case a.GetDestinationCluster() != nil:
			out = append(out, entry{"destination_cluster", ""})
		default:
			t.Fatalf("rate-limit action %v is not understood by this test; add it to descriptorOf", a)
		}
	}
	return out
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// assertLimited checks that the descriptor lim produces has a limit in cfg,
// filling the values Envoy takes from the request with sample ones.
func assertLimited(t *testing.T, where string, lim *routev3.RateLimit, cfg *descriptorConfig) {
	t.Helper()
	var req []descriptors.Entry
	for _, e := range descriptorOf(t, lim) {
		v := e.value
		if v == "" {
			v = "sample-" + e.key
		}
		req = append(req, descriptors.Entry{Key: e.key, Value: v})
	}
	m := cfg.match(req...)
	if m == nil {
		t.Errorf("%s: request descriptor %v has no limit in domain %q", where, req, cfg.Domain)
		return
	}
	t.Logf("%s: %v → %d/%v (stats key %s)", where, req, m.Limit.RequestsPerUnit, m.Limit.Unit, m.StatsKey)
}

// ---- descriptor YAML (reference rate-limit service format) ----

// descriptorConfig is a descriptor file loaded by Throttle's own loader.
type descriptorConfig struct {
	Domain string
	cfg    *descriptors.Config
}

func mustLoadDescriptors(t *testing.T, name string, data []byte) *descriptorConfig {
	t.Helper()
	f, err := descriptors.Parse(name, data)
	if err != nil {
		t.Fatalf("descriptors: %v", err)
	}
	cfg, err := descriptors.Load(descriptors.Options{}, descriptors.Source{Name: name, Data: data})
	if err != nil {
		t.Fatalf("descriptors: %v", err)
	}
	return &descriptorConfig{Domain: f.Domain, cfg: cfg}
}

func (c *descriptorConfig) match(entries ...descriptors.Entry) *descriptors.Match {
	return c.cfg.Match(c.Domain, entries)
}

// ---- Istio ----

// decodeEnvoyFilters decodes every document strictly (manifest.Decode); each
// must be an EnvoyFilter.
func decodeEnvoyFilters(data []byte) ([]*manifest.EnvoyFilter, error) {
	var out []*manifest.EnvoyFilter
	for i, doc := range manifest.Split(data) {
		obj, err := manifest.Decode(doc)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		f, ok := obj.(*manifest.EnvoyFilter)
		if !ok {
			return nil, fmt.Errorf("document %d: %T, want networking.istio.io/v1alpha3 EnvoyFilter", i, obj)
		}
		out = append(out, f)
	}
	return out, nil
}

func mustLoadEnvoyFilters(t *testing.T, name string) []*manifest.EnvoyFilter {
	t.Helper()
	fs, err := decodeEnvoyFilters(testkit.MustRead(t, name))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if len(fs) == 0 {
		t.Fatalf("%s: no EnvoyFilter", name)
	}
	return fs
}

type istioDescriptors struct {
	*descriptorConfig
	raw string
}

func mustLoadIstioDescriptors(t *testing.T) istioDescriptors {
	t.Helper()
	var cm struct {
		APIVersion string            `json:"apiVersion"`
		Kind       string            `json:"kind"`
		Metadata   map[string]any    `json:"metadata"`
		Data       map[string]string `json:"data"`
	}
	if err := strictyaml.Unmarshal(testkit.MustRead(t, "istio/descriptors-configmap.yaml"), &cm); err != nil {
		t.Fatalf("istio/descriptors-configmap.yaml: %v", err)
	}
	if cm.Kind != "ConfigMap" || len(cm.Data) != 1 {
		t.Fatalf("istio/descriptors-configmap.yaml: want a ConfigMap with one file, got %s with %d", cm.Kind, len(cm.Data))
	}
	raw := cm.Data["edge.yaml"]
	return istioDescriptors{mustLoadDescriptors(t, "istio/descriptors-configmap.yaml data[edge.yaml]", []byte(raw)), raw}
}

// ---- helpers ----

func mustDecodeValid(t *testing.T, where string, data []byte, m proto.Message) {
	t.Helper()
	if err := envoy.Decode(data, m); err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	if err := envoy.Validate(m); err != nil {
		t.Fatalf("%s: %v", where, err)
	}
}

func onlyHTTPConnectionManager(t *testing.T, ls []*listenerv3.Listener) *hcmv3.HttpConnectionManager {
	t.Helper()
	if len(ls) != 1 {
		t.Fatalf("want one listener, got %d", len(ls))
	}
	if got := ls[0].GetAddress().GetSocketAddress().GetPortValue(); got != 10000 {
		t.Errorf("listener port = %d, want 10000", got)
	}
	chains := ls[0].GetFilterChains()
	if len(chains) != 1 || len(chains[0].GetFilters()) != 1 {
		t.Fatalf("want one filter chain with one filter")
	}
	var hcm hcmv3.HttpConnectionManager
	if err := chains[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatalf("listener filter is not an HttpConnectionManager: %v", err)
	}
	return &hcm
}

func rateLimitFilter(t *testing.T, filters []*hcmv3.HttpFilter) *ratelimitv3.RateLimit {
	t.Helper()
	for _, f := range filters {
		if f.GetName() != "envoy.filters.http.ratelimit" {
			continue
		}
		var rl ratelimitv3.RateLimit
		if err := f.GetTypedConfig().UnmarshalTo(&rl); err != nil {
			t.Fatalf("envoy.filters.http.ratelimit typed_config: %v", err)
		}
		return &rl
	}
	t.Fatalf("no envoy.filters.http.ratelimit among %v", filterNames(filters))
	return nil
}

func filterNames(fs []*hcmv3.HttpFilter) []string {
	var ns []string
	for _, f := range fs {
		ns = append(ns, f.GetName())
	}
	return ns
}

func assertHTTP2(t *testing.T, c *clusterv3.Cluster) {
	t.Helper()
	a, ok := c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
	if !ok {
		t.Errorf("cluster %s: no envoy.extensions.upstreams.http.v3.HttpProtocolOptions; gRPC needs HTTP/2", c.GetName())
		return
	}
	var opts upstreamhttpv3.HttpProtocolOptions
	if err := a.UnmarshalTo(&opts); err != nil {
		t.Fatalf("cluster %s: %v", c.GetName(), err)
	}
	if opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
		t.Errorf("cluster %s: explicit_http_config.http2_protocol_options not set; gRPC needs HTTP/2", c.GetName())
	}
}
