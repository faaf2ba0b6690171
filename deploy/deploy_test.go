package deploy_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/throttle-rl/throttle/internal/testkit"
	"github.com/throttle-rl/throttle/internal/testkit/strictyaml"

	sigsjson "sigs.k8s.io/json"

	"github.com/throttle-rl/throttle/descriptors"
	"github.com/throttle-rl/throttle/envoy"
)

// settings are Throttle's environment variables (DESIGN.md, throttle serve --help).
var settings = []string{
	"PORT", "GRPC_PORT", "REDIS_URL", "DATABASE_URL", "DESCRIPTORS_DIR",
	"FAILURE_MODE", "TRUSTED_PROXIES", "LOG_LEVEL", "RATE_LIMIT_RESPONSE_HEADERS",
	// The rest of what `throttle serve --help` lists.
	"BIND_ADDRESS", "MERGE_DOMAIN_CONFIG", "DESCRIPTORS_RELOAD_INTERVAL", "BACKEND_TIMEOUT", "REST_BACKEND_TIMEOUT", "LOCAL_CACHE_SIZE_IN_BYTES", "DEBUG_ADDRESS",
	"CACHE_REFRESH_INTERVAL", "REGISTER_LIMIT_PER_HOUR", "SHUTDOWN_TIMEOUT", "RATE_LIMIT_HEADERS",
	"SHADOW_MODE", "RESPONSE_DYNAMIC_METADATA", "FORCE_START_WITHOUT_INITIAL_CONFIG", "STATS_MAX_VALUE_KEYS",
	// OpenTelemetry tracing (standard names).
	"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
	"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG",
}

// metrics are the metric names Throttle exports; histograms also have their
// _bucket, _sum and _count series.
var (
	metrics = []string{
		"throttle_http_requests_total",
		"throttle_http_requests_in_flight",
		"throttle_decisions_total",
		"throttle_ratelimit_hits_total",
		"throttle_ratelimit_over_limit_total",
		"throttle_ratelimit_near_limit_total",
		"throttle_ratelimit_within_limit_total",
		"throttle_ratelimit_shadow_mode_total",
		"throttle_backend_errors_total",
		"throttle_degraded_decisions_total",
		"throttle_backend_circuit_open",
		"throttle_descriptors_config_valid",
		"throttle_descriptors_config_load_errors_total",
		"throttle_db_open_connections",
		"throttle_db_in_use_connections",
		"throttle_approximate_blind_hits_total",
		"throttle_approximate_excess_hits_total",
		"throttle_reservations_held_hits",
		"throttle_reservations_total",
		"throttle_reservations_expired_total",
		"throttle_ratelimit_reservation_calls_total",
	}
	histograms = []string{
		"throttle_http_request_duration_seconds",
		"throttle_grpc_request_duration_seconds",
	}
)

// ---- docker-compose.yml ----

type composeFile struct {
	Name     string             `json:"name"`
	Services map[string]service `json:"services"`
	Volumes  map[string]any     `json:"volumes"`
}

type service struct {
	Image       string            `json:"image,omitempty"`
	Build       *build            `json:"build,omitempty"`
	Command     []string          `json:"command,omitempty"`
	Environment map[string]string `json:"environment,omitempty"`
	Volumes     []string          `json:"volumes,omitempty"`
	Ports       []string          `json:"ports,omitempty"`
	DependsOn   dependsOn         `json:"depends_on,omitempty"`
	Healthcheck *struct {
		Test     []string `json:"test"`
		Interval string   `json:"interval,omitempty"`
		Timeout  string   `json:"timeout,omitempty"`
		Retries  int      `json:"retries,omitempty"`
	} `json:"healthcheck,omitempty"`
	Restart string `json:"restart,omitempty"`
}

// build is compose's build: a context path, or {context, dockerfile}.
type build struct {
	Context    string `json:"context"`
	Dockerfile string `json:"dockerfile,omitempty"`
}

func (b *build) UnmarshalJSON(data []byte) error {
	if json.Unmarshal(data, &b.Context) == nil {
		return nil
	}
	type plain build
	return strictJSON(data, (*plain)(b))
}

// dependsOn is compose's depends_on: a list of services, or a map of
// service → {condition}.
type dependsOn map[string]string

func (d *dependsOn) UnmarshalJSON(data []byte) error {
	*d = dependsOn{}
	var list []string
	if json.Unmarshal(data, &list) == nil {
		for _, s := range list {
			(*d)[s] = "service_started"
		}
		return nil
	}
	var m map[string]struct {
		Condition string `json:"condition"`
	}
	if err := strictJSON(data, &m); err != nil {
		return err
	}
	for s, c := range m {
		(*d)[s] = c.Condition
	}
	return nil
}

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	var c composeFile
	if err := strictyaml.Unmarshal(testkit.MustRead(t, "../docker-compose.yml"), &c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return c
}

// mount finds the bind mount of s whose host path is host (relative to the
// repository root) and returns its container path.
func (s service) mount(host string) (string, bool) {
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 && path.Clean(parts[0]) == path.Clean("./"+host) {
			return parts[1], true
		}
	}
	return "", false
}

// published returns the container ports of s, by host port.
func (s service) published() map[string]string {
	out := map[string]string{}
	for _, p := range s.Ports {
		host, container, ok := strings.Cut(p, ":")
		if !ok {
			continue
		}
		out[host] = container
	}
	return out
}

func TestCompose(t *testing.T) {
	c := loadCompose(t)
	var names []string
	for n := range c.Services {
		names = append(names, n)
	}
	sort.Strings(names)
	if got, want := fmt.Sprint(names), "[app envoy grafana postgres prometheus redis throttle]"; got != want {
		t.Errorf("services = %s, want %s", got, want)
	}

	// Bind mounts exist, named volumes are declared, builds have Dockerfiles.
	for name, s := range c.Services {
		for _, v := range s.Volumes {
			src, _, _ := strings.Cut(v, ":")
			if strings.HasPrefix(src, ".") {
				if _, err := os.Stat(filepath.Join("..", filepath.FromSlash(src))); err != nil {
					t.Errorf("service %s mounts %s, which does not exist", name, src)
				}
			} else if _, ok := c.Volumes[src]; !ok {
				t.Errorf("service %s mounts volume %q, which is not declared", name, src)
			}
		}
		if s.Build != nil {
			df := path.Join(s.Build.Context, orDefault(s.Build.Dockerfile, "Dockerfile"))
			if _, err := os.Stat(filepath.Join("..", filepath.FromSlash(df))); err != nil {
				t.Errorf("service %s builds with %s, which does not exist", name, df)
			}
		}
		for dep := range s.DependsOn {
			if _, ok := c.Services[dep]; !ok {
				t.Errorf("service %s depends on unknown service %s", name, dep)
			}
		}
	}

	th := c.Services["throttle"]
	if th.Image != "throttle:dev" || th.Build == nil || th.Build.Context != "." {
		t.Errorf("throttle: want image throttle:dev built from the repository root")
	}
	for k := range th.Environment {
		if !slices.Contains(settings, k) {
			t.Errorf("throttle env %s is not one of Throttle's settings %v", k, settings)
		}
	}
	env := th.Environment
	pub := th.published()
	if pub[env["PORT"]] != env["PORT"] || pub[env["GRPC_PORT"]] != env["GRPC_PORT"] || env["PORT"] != "8080" || env["GRPC_PORT"] != "8081" {
		t.Errorf("throttle: PORT=%s GRPC_PORT=%s, published %v; want 8080 and 8081 published as themselves", env["PORT"], env["GRPC_PORT"], th.Ports)
	}

	// Descriptors: the mounted folder is DESCRIPTORS_DIR and loads.
	dir, ok := th.mount("envoy/descriptors")
	if !ok || dir != env["DESCRIPTORS_DIR"] {
		t.Errorf("throttle: DESCRIPTORS_DIR=%q is not where ./envoy/descriptors is mounted (%q)", env["DESCRIPTORS_DIR"], dir)
	}
	if _, err := descriptors.LoadDir("../envoy/descriptors", descriptors.Options{}); err != nil {
		t.Errorf("envoy/descriptors: %v", err)
	}

	// Backends: URLs name the services, credentials match, health gates start.
	r, err := url.Parse(env["REDIS_URL"])
	if err != nil || r.Scheme != "redis" || r.Host != "redis:6379" {
		t.Errorf("REDIS_URL = %q, want redis://redis:6379/…", env["REDIS_URL"])
	}
	db, err := url.Parse(env["DATABASE_URL"])
	pg := c.Services["postgres"].Environment
	if err != nil {
		t.Fatalf("DATABASE_URL: %v", err)
	}
	pass, _ := db.User.Password()
	if db.Scheme != "postgres" || db.Host != "postgres:5432" || db.User.Username() != pg["POSTGRES_USER"] ||
		pass != pg["POSTGRES_PASSWORD"] || strings.TrimPrefix(db.Path, "/") != pg["POSTGRES_DB"] {
		t.Errorf("DATABASE_URL %q does not match the postgres service %v", env["DATABASE_URL"], pg)
	}
	for _, dep := range []string{"redis", "postgres"} {
		if th.DependsOn[dep] != "service_healthy" || c.Services[dep].Healthcheck == nil {
			t.Errorf("throttle must wait for %s to be healthy, and %s needs a healthcheck", dep, dep)
		}
	}
	if !strings.Contains(string(testkit.MustRead(t, "../docker-compose.yml")), "DEMO VALUES ONLY") {
		t.Error("docker-compose.yml: label the demo passwords DEMO VALUES ONLY")
	}

	// Envoy: the mounted config is the one it runs, it loads, and its clusters
	// are the compose services on their ports.
	ev := c.Services["envoy"]
	cfgPath, ok := ev.mount("envoy/envoy.yaml")
	if !ok || !slices.Contains(ev.Command, cfgPath) {
		t.Errorf("envoy: ./envoy/envoy.yaml is not mounted where the command's -c points (%v, %v)", ev.Volumes, ev.Command)
	}
	b, err := envoy.LoadBootstrap(testkit.MustRead(t, "../envoy/envoy.yaml"))
	if err != nil {
		t.Fatalf("envoy/envoy.yaml: %v", err)
	}
	want := map[string]string{
		"throttle": "throttle:" + env["GRPC_PORT"],
		"app":      "app:" + orDefault(c.Services["app"].Environment["PORT"], "8080"),
	}
	for _, cl := range b.GetStaticResources().GetClusters() {
		for _, e := range cl.GetLoadAssignment().GetEndpoints() {
			for _, le := range e.GetLbEndpoints() {
				sa := le.GetEndpoint().GetAddress().GetSocketAddress()
				got := fmt.Sprintf("%s:%d", sa.GetAddress(), sa.GetPortValue())
				if got != want[cl.GetName()] {
					t.Errorf("envoy cluster %s → %s, want %s", cl.GetName(), got, want[cl.GetName()])
				}
			}
		}
	}
	listen := fmt.Sprint(b.GetStaticResources().GetListeners()[0].GetAddress().GetSocketAddress().GetPortValue())
	if ev.published()[listen] != listen {
		t.Errorf("envoy: listener port %s is not published (%v)", listen, ev.Ports)
	}
}

// ---- Prometheus ----

type prometheusConfig struct {
	Global struct {
		ScrapeInterval     string `json:"scrape_interval"`
		EvaluationInterval string `json:"evaluation_interval"`
	} `json:"global"`
	ScrapeConfigs []struct {
		JobName       string `json:"job_name"`
		MetricsPath   string `json:"metrics_path"`
		StaticConfigs []struct {
			Targets []string `json:"targets"`
		} `json:"static_configs"`
	} `json:"scrape_configs"`
}

func TestPrometheus(t *testing.T) {
	c := loadCompose(t)
	if got, ok := c.Services["prometheus"].mount("deploy/prometheus/prometheus.yml"); !ok || got != "/etc/prometheus/prometheus.yml" {
		t.Errorf("prometheus: deploy/prometheus/prometheus.yml mounted at %q, want /etc/prometheus/prometheus.yml", got)
	}
	var p prometheusConfig
	if err := strictyaml.Unmarshal(testkit.MustRead(t, "prometheus/prometheus.yml"), &p); err != nil {
		t.Fatalf("prometheus.yml: %v", err)
	}
	want := "throttle:" + c.Services["throttle"].Environment["PORT"]
	var found bool
	for _, sc := range p.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			for _, target := range st.Targets {
				host, _, _ := strings.Cut(target, ":")
				if _, ok := c.Services[host]; !ok {
					t.Errorf("job %s: target %s is not a compose service", sc.JobName, target)
				}
				if target == want && sc.MetricsPath == "/metrics" {
					found = true
				}
			}
		}
	}
	if !found {
		t.Errorf("no scrape job targets %s at /metrics", want)
	}
}

// ---- Grafana ----

type dashboard struct {
	UID    string  `json:"uid"`
	Title  string  `json:"title"`
	Panels []panel `json:"panels"`
}

type panel struct {
	Title      string `json:"title"`
	Type       string `json:"type"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

func (p panel) all() []panel {
	out := []panel{p}
	for _, c := range p.Panels {
		out = append(out, c.all()...)
	}
	return out
}

func TestGrafana(t *testing.T) {
	c := loadCompose(t)
	gf := c.Services["grafana"]
	if got, ok := gf.mount("deploy/grafana/provisioning"); !ok || got != "/etc/grafana/provisioning" {
		t.Errorf("grafana: provisioning mounted at %q, want /etc/grafana/provisioning", got)
	}
	dashDir, ok := gf.mount("deploy/grafana/dashboards")
	if !ok {
		t.Fatal("grafana: deploy/grafana/dashboards is not mounted")
	}

	var ds struct {
		APIVersion  int `json:"apiVersion"`
		Datasources []struct {
			Name      string `json:"name"`
			UID       string `json:"uid"`
			Type      string `json:"type"`
			Access    string `json:"access"`
			URL       string `json:"url"`
			IsDefault bool   `json:"isDefault"`
			Editable  bool   `json:"editable"`
		} `json:"datasources"`
	}
	if err := strictyaml.Unmarshal(testkit.MustRead(t, "grafana/provisioning/datasources/prometheus.yml"), &ds); err != nil {
		t.Fatalf("datasource: %v", err)
	}
	if len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" {
		t.Fatalf("want one prometheus datasource")
	}
	src := ds.Datasources[0]
	if u, err := url.Parse(src.URL); err != nil || u.Hostname() != "prometheus" || u.Port() != "9090" {
		t.Errorf("datasource URL %q, want the prometheus service on 9090", src.URL)
	}

	var prov struct {
		APIVersion int `json:"apiVersion"`
		Providers  []struct {
			Name                  string `json:"name"`
			Folder                string `json:"folder"`
			Type                  string `json:"type"`
			DisableDeletion       bool   `json:"disableDeletion"`
			AllowUIUpdates        bool   `json:"allowUiUpdates"`
			UpdateIntervalSeconds int    `json:"updateIntervalSeconds,omitempty"`
			Options               struct {
				Path string `json:"path"`
			} `json:"options"`
		} `json:"providers"`
	}
	if err := strictyaml.Unmarshal(testkit.MustRead(t, "grafana/provisioning/dashboards/throttle.yml"), &prov); err != nil {
		t.Fatalf("dashboard provider: %v", err)
	}
	if len(prov.Providers) != 1 || prov.Providers[0].Options.Path != dashDir {
		t.Errorf("dashboard provider path must be %q, where compose mounts deploy/grafana/dashboards", dashDir)
	}

	files, _ := filepath.Glob("grafana/dashboards/*.json")
	if len(files) == 0 {
		t.Fatal("no dashboards")
	}
	used := map[string]bool{}
	for _, f := range files {
		var d dashboard
		dec := json.NewDecoder(bytes.NewReader(testkit.MustRead(t, f)))
		if err := dec.Decode(&d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if d.UID == "" || d.Title == "" {
			t.Errorf("%s: no uid or title", f)
		}
		var exprs []string
		for _, top := range d.Panels {
			for _, p := range top.all() {
				if p.Type == "row" {
					continue
				}
				if p.Datasource == nil || p.Datasource.UID != src.UID {
					t.Errorf("%s: panel %q does not use datasource uid %q", f, p.Title, src.UID)
				}
				if len(p.Targets) == 0 {
					t.Errorf("%s: panel %q has no query", f, p.Title)
				}
				for _, tg := range p.Targets {
					exprs = append(exprs, tg.Expr)
					names := metricNames(tg.Expr)
					if len(names) == 0 {
						t.Errorf("%s: panel %q: no metric in %q", f, p.Title, tg.Expr)
					}
					for _, n := range names {
						base, ok := knownMetric(n)
						if !ok {
							t.Errorf("%s: panel %q: %q is not a Throttle metric (in %q)", f, p.Title, n, tg.Expr)
						}
						used[base] = true
					}
				}
			}
		}
		all := strings.Join(exprs, "\n")
		for _, q := range []string{"0.5", "0.95", "0.99"} {
			for _, h := range histograms {
				if !strings.Contains(all, "histogram_quantile("+q+", sum by (le) (rate("+h+"_bucket") {
					t.Errorf("%s: no p%s of %s", f, strings.TrimPrefix(q, "0."), h)
				}
			}
		}
	}
	for _, m := range append(slices.Clone(metrics), histograms...) {
		if !used[m] {
			t.Errorf("no dashboard panel shows %s", m)
		}
	}
}

// knownMetric reports whether name is a Throttle metric (or a series of a
// histogram) and returns the metric's name.
func knownMetric(name string) (string, bool) {
	if slices.Contains(metrics, name) {
		return name, true
	}
	for _, h := range histograms {
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if name == h+suffix {
				return h, true
			}
		}
	}
	return "", false
}

var (
	promStrings   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	promMatchers  = regexp.MustCompile(`\{[^}]*\}`)
	promRanges    = regexp.MustCompile(`\[[^\]]*\]`)
	promGrouping  = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promIdent     = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	promFollowing = regexp.MustCompile(`^\s*\(`)
	promKeywords  = map[string]bool{
		"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
		"bool": true, "and": true, "or": true, "unless": true, "offset": true, "inf": true, "nan": true,
	}
)

// metricNames returns the metric names a PromQL expression selects: the
// identifiers left after removing strings, label matchers, ranges and grouping
// clauses that are neither functions (followed by "(") nor keywords.
func metricNames(expr string) []string {
	s := promStrings.ReplaceAllString(expr, " ")
	s = promMatchers.ReplaceAllString(s, " ")
	s = promRanges.ReplaceAllString(s, " ")
	s = promGrouping.ReplaceAllString(s, " ")
	var names []string
	for _, loc := range promIdent.FindAllStringIndex(s, -1) {
		id := s[loc[0]:loc[1]]
		if promKeywords[strings.ToLower(id)] || promFollowing.MatchString(s[loc[1]:]) {
			continue
		}
		if loc[0] > 0 && (s[loc[0]-1] >= '0' && s[loc[0]-1] <= '9' || s[loc[0]-1] == '.') {
			continue // the exponent or unit of a number, as in 1e3
		}
		names = append(names, id)
	}
	return names
}

func TestMetricNames(t *testing.T) {
	tests := []struct {
		expr string
		want string
	}{
		{`sum by (outcome) (rate(throttle_decisions_total{api="rest"}[$__rate_interval]))`, "[throttle_decisions_total]"},
		{`histogram_quantile(0.99, sum by (le, route) (rate(throttle_http_request_duration_seconds_bucket[5m])))`, "[throttle_http_request_duration_seconds_bucket]"},
		{`max(throttle_backend_circuit_open) > 0 and on (instance) up`, "[throttle_backend_circuit_open up]"},
		{`rate(throttle_decisions_totl[1m]) / 1e3`, "[throttle_decisions_totl]"},
		{`topk(10, sum without (key) (throttle_ratelimit_hits_total offset 5m))`, "[throttle_ratelimit_hits_total]"},
	}
	for _, tt := range tests {
		if got := fmt.Sprint(metricNames(tt.expr)); got != tt.want {
			t.Errorf("metricNames(%q) = %s, want %s", tt.expr, got, tt.want)
		}
	}
	for _, n := range []string{"throttle_decisions_totl", "up"} {
		if _, ok := knownMetric(n); ok {
			t.Errorf("knownMetric(%q) = true", n)
		}
	}
}

// ---- Dockerfiles ----

func TestDockerfiles(t *testing.T) {
	tests := []struct {
		file string
		want []string
	}{
		{"../Dockerfile", []string{
			"FROM --platform=$BUILDPLATFORM golang:1.26 AS build", // Go cross-compiles: no emulated stage
			"CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH",
			"go build -trimpath",
			"./cmd/throttle",
			"FROM gcr.io/distroless/static-debian12:nonroot",
			"USER 65532",
			"EXPOSE 8080 8081",
			`ENTRYPOINT ["/throttle"]`,
			`CMD ["serve"]`,
			"ln -s /throttle /out/bin/ratelimit", // the reference's deployments run /bin/ratelimit
			"COPY --from=build /out/bin/ /bin/",
		}},
		{"../examples/sampleapp/Dockerfile", []string{
			"FROM golang:1.26 AS build",
			"CGO_ENABLED=0 go build -trimpath",
			"./examples/sampleapp",
			"FROM gcr.io/distroless/static-debian12:nonroot",
			"USER 65532",
			"EXPOSE 8080",
		}},
	}
	for _, tt := range tests {
		df := string(testkit.MustRead(t, tt.file))
		for _, w := range tt.want {
			if !strings.Contains(df, w) {
				t.Errorf("%s lacks %q", tt.file, w)
			}
		}
		// What COPY takes from the context exists, and .dockerignore keeps it.
		for _, m := range regexp.MustCompile(`(?m)^COPY (?:--[^ ]+ )*(.+) \S+$`).FindAllStringSubmatch(df, -1) {
			if strings.Contains(m[0], "--from=") {
				continue
			}
			for _, src := range strings.Fields(m[1]) {
				if _, err := os.Stat(filepath.Join("..", filepath.FromSlash(src))); err != nil {
					t.Errorf("%s copies %s, which does not exist", tt.file, src)
				}
			}
		}
	}
	ignore := string(testkit.MustRead(t, "../.dockerignore"))
	for _, l := range strings.Split(ignore, "\n") {
		l = strings.TrimSpace(l)
		for _, needed := range []string{"go.mod", "go.sum", "cmd", "examples", "*.go"} {
			if l == needed || l == "/"+needed || l == needed+"/" {
				t.Errorf(".dockerignore excludes %s, which the builds need", needed)
			}
		}
	}
}

// ---- helpers ----

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func strictJSON(j []byte, v any) error {
	strict, err := sigsjson.UnmarshalStrict(j, v)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}
