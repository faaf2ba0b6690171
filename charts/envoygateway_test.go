package charts

import (
	"context"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/throttle-rl/throttle/internal/testkit/manifest"
	"github.com/throttle-rl/throttle/internal/testkit/strictyaml"
	"github.com/throttle-rl/throttle/refstats"
)

// envoyGatewayValues is the value set of Envoy Gateway's rate-limit pod.
const envoyGatewayValues = chartDir + "/values-envoy-gateway.yaml"

// envoyGatewayRelease is where that value set is meant to go: Envoy
// Gateway's namespace, whose envoy-rate-limit Secret it mounts.
var envoyGatewayRelease = release{"throttle", "envoy-gateway-system"}

// egFacts is testdata/envoy-gateway-ratelimit.yaml: Envoy Gateway's managed
// rate-limit Deployment and Service, and where the chart's pod differs.
type egFacts struct {
	Command      []string           `json:"command"`
	Env          map[string]string  `json:"env"`
	Ports        map[string]int32   `json:"ports"`
	Probes       map[string]egProbe `json:"probes"`
	Mounts       map[string]egMount `json:"mounts"`
	Annotations  map[string]string  `json:"annotations"`
	ServicePorts []int32            `json:"servicePorts"`
	Stats        map[string]egStats `json:"stats"`
	Throttle     struct {
		Env          map[string]string            `json:"env"`
		StatsEnv     map[string]map[string]string `json:"statsEnv"`
		Omitted      map[string]string            `json:"omitted"`
		Ports        map[string]int32             `json:"ports"`
		Mounts       map[string]egMount           `json:"mounts"`
		ServicePorts []int32                      `json:"servicePorts"`
	} `json:"throttle"`
}

// egProbe is a probe's handler (an HTTP GET) and timings.
type egProbe struct {
	Path             string `json:"path"`
	Port             int32  `json:"port"`
	Scheme           string `json:"scheme"`
	PeriodSeconds    int32  `json:"periodSeconds"`
	TimeoutSeconds   int32  `json:"timeoutSeconds"`
	FailureThreshold int32  `json:"failureThreshold"`
}

// egMount is what is mounted at a path: a Secret by name, a ConfigMap
// ("mapping" for the statsd-exporter's mapping, whatever its name), or an
// emptyDir.
type egMount struct {
	Secret    string `json:"secret,omitempty"`
	ConfigMap string `json:"configMap,omitempty"`
	EmptyDir  bool   `json:"emptyDir,omitempty"`
	ReadOnly  bool   `json:"readOnly,omitempty"`
}

// egStats is one way of the reference's stats: the rate-limit container's
// settings and ports, and the sidecar's, if any.
type egStats struct {
	Env     map[string]string `json:"env"`
	Ports   map[string]int32  `json:"ports"`
	Sidecar *struct {
		Ports  map[string]int32   `json:"ports"`
		Mounts map[string]egMount `json:"mounts"`
	} `json:"sidecar"`
}

var egFactsOnce = sync.OnceValues(func() (egFacts, error) {
	var f egFacts
	b, err := os.ReadFile("testdata/envoy-gateway-ratelimit.yaml")
	if err != nil {
		return f, err
	}
	return f, strictyaml.Unmarshal(b, &f)
})

func loadEGFacts(t *testing.T) egFacts {
	t.Helper()
	f, err := egFactsOnce()
	if err != nil {
		t.Fatalf("testdata/envoy-gateway-ratelimit.yaml: %v", err)
	}
	if len(f.Env) == 0 || len(f.Stats) != 2 {
		t.Fatal("testdata/envoy-gateway-ratelimit.yaml: no env, or not both ways of stats")
	}
	return f
}

// union is the maps merged, a later one's keys over an earlier's.
func union[V any](ms ...map[string]V) map[string]V {
	out := map[string]V{}
	for _, m := range ms {
		maps.Copy(out, m)
	}
	return out
}

// checkEnvoyGatewayPod compares the rendered Deployment and Service with
// Envoy Gateway's (testdata/envoy-gateway-ratelimit.yaml) for stats, its
// envoyGateway.stats: the rate-limit container's command, env (names and
// values), ports, probes and mounts, the sidecar's, the pod's scrape
// annotations and the Service's ports, each beyond Envoy Gateway's only by
// what the file says the chart adds.
func checkEnvoyGatewayPod(t *testing.T, r rendered, stats string) {
	t.Helper()
	f := loadEGFacts(t)
	s := f.Stats[stats]
	d := deployment(t, r)
	spec := d.Spec.Template.Spec
	c := spec.Containers[0]

	if !slices.Equal(c.Command, f.Command) || len(c.Args) != 0 {
		t.Errorf("command %q args %q, want %q and none", c.Command, c.Args, f.Command)
	}
	if diff := cmp.Diff(union(f.Env, s.Env, f.Throttle.Env, f.Throttle.StatsEnv[stats]), envValues(c)); diff != "" {
		t.Errorf("env (-Envoy Gateway's and the chart's additions +rendered):\n%s", diff)
	}
	for name := range f.Throttle.Omitted {
		if _, ok := f.Env[name]; ok {
			t.Errorf("testdata: %s is both in env and omitted", name)
		}
	}
	if diff := cmp.Diff(union(f.Ports, s.Ports, f.Throttle.Ports), portsOf(c)); diff != "" {
		t.Errorf("container ports (-want +rendered):\n%s", diff)
	}
	got := map[string]egProbe{
		"startup": probeOf(t, spec, c.StartupProbe), "readiness": probeOf(t, spec, c.ReadinessProbe), "liveness": probeOf(t, spec, c.LivenessProbe),
	}
	if diff := cmp.Diff(f.Probes, got); diff != "" {
		t.Errorf("probes (-Envoy Gateway's +rendered):\n%s", diff)
	}
	if diff := cmp.Diff(union(f.Mounts, f.Throttle.Mounts), mountsOf(r, spec, c)); diff != "" {
		t.Errorf("mounts (-want +rendered):\n%s", diff)
	}

	switch {
	case s.Sidecar == nil && len(spec.Containers) != 1:
		t.Errorf("%d containers, want the rate-limit container alone", len(spec.Containers))
	case s.Sidecar != nil && len(spec.Containers) != 2:
		t.Errorf("%d containers, want the rate-limit container and the statsd-exporter", len(spec.Containers))
	case s.Sidecar != nil:
		side := spec.Containers[1]
		if diff := cmp.Diff(s.Sidecar.Ports, portsOf(side)); diff != "" {
			t.Errorf("sidecar ports (-want +rendered):\n%s", diff)
		}
		if diff := cmp.Diff(s.Sidecar.Mounts, mountsOf(r, spec, side)); diff != "" {
			t.Errorf("sidecar mounts (-want +rendered):\n%s", diff)
		}
		checkStatsdMapping(t, r, spec, side)
	}

	a := d.Spec.Template.Annotations
	for k, want := range f.Annotations {
		if a[k] != want {
			t.Errorf("pod annotation %s = %q, want %q", k, a[k], want)
		}
	}
	var svcPorts []int32
	for _, p := range r.set.Services[d.Name].Spec.Ports {
		svcPorts = append(svcPorts, p.Port)
	}
	want := append(slices.Clone(f.ServicePorts), f.Throttle.ServicePorts...)
	if slices.Sort(want); !slices.Equal(slices.Sorted(slices.Values(svcPorts)), want) {
		t.Errorf("Service ports %v, want %v", svcPorts, want)
	}
}

// envValues is a container's env as NAME → value: the value, or where it
// comes from (secretKeyRef:NAME/KEY, resourceFieldRef:RESOURCE).
func envValues(c corev1.Container) map[string]string {
	out := map[string]string{}
	for _, e := range c.Env {
		v := e.Value
		switch from := e.ValueFrom; {
		case from == nil:
		case from.SecretKeyRef != nil:
			v = "secretKeyRef:" + from.SecretKeyRef.Name + "/" + from.SecretKeyRef.Key
		case from.ResourceFieldRef != nil:
			v = "resourceFieldRef:" + from.ResourceFieldRef.Resource
		default:
			v = "valueFrom"
		}
		out[e.Name] = v
	}
	return out
}

func portsOf(c corev1.Container) map[string]int32 {
	out := map[string]int32{}
	for _, p := range c.Ports {
		out[p.Name] = p.ContainerPort
	}
	return out
}

// probeOf is an HTTP GET probe with its port resolved to a number.
func probeOf(t *testing.T, spec corev1.PodSpec, p *corev1.Probe) egProbe {
	t.Helper()
	if p == nil || p.HTTPGet == nil {
		t.Errorf("probe %+v: want an HTTP GET", p)
		return egProbe{}
	}
	port, ok := manifest.ContainerPort(spec, p.HTTPGet.Port)
	if !ok {
		t.Errorf("probe port %s is no container port", p.HTTPGet.Port.String())
	}
	return egProbe{
		Path: p.HTTPGet.Path, Port: port.ContainerPort, Scheme: string(p.HTTPGet.Scheme),
		PeriodSeconds: p.PeriodSeconds, TimeoutSeconds: p.TimeoutSeconds, FailureThreshold: p.FailureThreshold,
	}
}

// mountsOf is what a container mounts, by path; a ConfigMap holding the
// chart's statsd-exporter mapping is "mapping".
func mountsOf(r rendered, spec corev1.PodSpec, c corev1.Container) map[string]egMount {
	out := map[string]egMount{}
	for _, vm := range c.VolumeMounts {
		for _, v := range spec.Volumes {
			if v.Name != vm.Name {
				continue
			}
			m := egMount{ReadOnly: vm.ReadOnly, EmptyDir: v.EmptyDir != nil}
			if v.Secret != nil {
				m.Secret = v.Secret.SecretName
			}
			if v.ConfigMap != nil {
				m.ConfigMap = v.ConfigMap.Name
				if cm := r.set.ConfigMaps[v.ConfigMap.Name]; cm != nil && cm.Data["mapping.yaml"] != "" {
					m.ConfigMap = "mapping"
				}
			}
			out[vm.MountPath] = m
		}
	}
	return out
}

// statsdMapping is the part of statsd_exporter's mapping format the chart's
// mapping uses.
type statsdMapping struct {
	Defaults struct {
		ObserverType string `json:"observer_type"`
	} `json:"defaults"`
	Mappings []struct {
		Match           string            `json:"match"`
		MatchType       string            `json:"match_type"`
		MatchMetricType string            `json:"match_metric_type"`
		Name            string            `json:"name"`
		Labels          map[string]string `json:"labels"`
	} `json:"mappings"`
}

// checkStatsdMapping: the sidecar reads the chart's mapping from its
// mount, and the mapping turns the reference's statsd names into the
// reference's Prometheus series (statsd_exporter's regex mappings are Go
// regular expressions, first match wins, $n expanded in name and labels).
func checkStatsdMapping(t *testing.T, r rendered, spec corev1.PodSpec, side corev1.Container) {
	t.Helper()
	var file string
	for _, a := range side.Args {
		if v, ok := strings.CutPrefix(a, "--statsd.mapping-config="); ok {
			file = v
		}
	}
	var text string
	for _, vm := range side.VolumeMounts {
		for _, v := range spec.Volumes {
			if v.Name == vm.Name && v.ConfigMap != nil && vm.MountPath == path.Dir(file) && r.set.ConfigMaps[v.ConfigMap.Name] != nil {
				text = r.set.ConfigMaps[v.ConfigMap.Name].Data[path.Base(file)]
			}
		}
	}
	var mapping statsdMapping
	if err := strictyaml.Unmarshal([]byte(text), &mapping); err != nil || len(mapping.Mappings) == 0 {
		t.Fatalf("the sidecar's --statsd.mapping-config=%s is no mapping of its mounts: %v\n%s", file, err, text)
	}
	if mapping.Defaults.ObserverType != "histogram" {
		t.Errorf("observer_type %q: want histogram (timers Prometheus can aggregate)", mapping.Defaults.ObserverType)
	}
	for stat, want := range map[string]string{
		"ratelimit.service.rate_limit.edge.remote_address.over_limit":            "ratelimit_service_rate_limit_over_limit{domain=edge,key1=remote_address}",
		"ratelimit.service.rate_limit.edge.generic_key_api.user_id.within_limit": "ratelimit_service_rate_limit_within_limit{domain=edge,key1=generic_key_api,key2=user_id}",
		"ratelimit.service.rate_limit.edge.a_1.b_2.c_3.total_hits":               "ratelimit_service_rate_limit_total_hits{domain=edge,key1=a_1,key2=b_2}",
		"ratelimit.service.rate_limit.edge.remote_address.near_limit":            "ratelimit_service_rate_limit_near_limit{domain=edge,key1=remote_address}",
		"ratelimit.service.rate_limit.edge.remote_address.shadow_mode":           "ratelimit_service_rate_limit_shadow_mode{domain=edge,key1=remote_address}",
		"ratelimit.service.call.should_rate_limit.redis_error":                   "ratelimit_service_should_rate_limit_error{err_type=redis_error}",
		"ratelimit_server.ShouldRateLimit.total_requests":                        "ratelimit_service_total_requests{grpc_method=ShouldRateLimit}",
		"ratelimit_server.ShouldRateLimit.response_time":                         "ratelimit_service_response_time_seconds{grpc_method=ShouldRateLimit}",
		"ratelimit.service.config_load_success":                                  "ratelimit_service_config_load_success{}",
		"ratelimit.service.config_load_error":                                    "ratelimit_service_config_load_error{}",
	} {
		if got := mapStatsd(t, mapping, stat); got != want {
			t.Errorf("mapping: %s becomes %s, want %s", stat, got, want)
		}
	}
}

// mapStatsd is the series the first mapping that matches stat makes of it,
// as name{label=value,…} with the labels sorted.
func mapStatsd(t *testing.T, m statsdMapping, stat string) string {
	t.Helper()
	for _, mp := range m.Mappings {
		if mp.MatchType != "regex" {
			t.Fatalf("mapping %q: match_type %q; this test reads regex mappings only", mp.Match, mp.MatchType)
		}
		re, err := regexp.Compile(mp.Match)
		if err != nil {
			t.Fatalf("mapping %q: %v", mp.Match, err)
		}
		sub := re.FindStringSubmatchIndex(stat)
		if sub == nil {
			continue
		}
		expand := func(s string) string { return string(re.ExpandString(nil, s, stat, sub)) }
		var labels []string
		for _, k := range slices.Sorted(maps.Keys(mp.Labels)) {
			labels = append(labels, k+"="+expand(mp.Labels[k]))
		}
		return expand(mp.Name) + "{" + strings.Join(labels, ",") + "}"
	}
	return "no series"
}

// egConfig is the part of Envoy Gateway's configuration (its EnvoyGateway
// kind, gateway.envoyproxy.io/v1alpha1) the README's snippet sets, with
// Envoy Gateway's field names: decoded strictly, a misspelled or misplaced
// key fails.
type egConfig struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Gateway    struct {
		ControllerName string `json:"controllerName"`
	} `json:"gateway"`
	Provider struct {
		Type       string `json:"type"`
		Kubernetes struct {
			RateLimitDeployment struct {
				Container struct {
					Image        string               `json:"image"`
					VolumeMounts []corev1.VolumeMount `json:"volumeMounts"`
				} `json:"container"`
				Pod struct {
					Volumes []corev1.Volume `json:"volumes"`
				} `json:"pod"`
			} `json:"rateLimitDeployment"`
		} `json:"kubernetes"`
	} `json:"provider"`
	RateLimit struct {
		Backend struct {
			Type  string `json:"type"`
			Redis struct {
				URL string `json:"url"`
			} `json:"redis"`
		} `json:"backend"`
	} `json:"rateLimit"`
}

// egImage is the form Envoy Gateway's API accepts for a container image
// (KubernetesContainerSpec.image): a repository with a tag.
var egImage = regexp.MustCompile(`^[a-zA-Z0-9._-]+(:[0-9]+)?(/[a-zA-Z0-9._/-]+)?(:[a-zA-Z0-9._-]+)?(@sha256:[a-z0-9]+)?$`)

// readmeSection is the chart README's section of that title, up to the next.
func readmeSection(t *testing.T, title string) string {
	t.Helper()
	b, err := os.ReadFile(chartDir + "/README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n## "+title+"\n")
	if !ok {
		t.Fatalf("charts/throttle/README.md has no section %q", title)
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	return sec
}

// The README's way (a): the EnvoyGateway configuration, in the ConfigMap
// Envoy Gateway reads, is valid YAML with Envoy Gateway's keys, names
// Throttle's released image and nothing else (started as ratelimit it
// writes no file: the read-only root filesystem needs no volume); the Redis
// is host:port, as Envoy Gateway passes it to REDIS_URL.
func TestEnvoyGatewayImageSnippet(t *testing.T) {
	sec := readmeSection(t, "Replacing Envoy Gateway's rate-limit service")
	m := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindStringSubmatch(sec)
	if m == nil {
		t.Fatal("the section has no yaml block")
	}
	var cm corev1.ConfigMap
	if err := strictyaml.Unmarshal([]byte(m[1]), &cm); err != nil {
		t.Fatalf("the snippet is no ConfigMap: %v\n%s", err, m[1])
	}
	if cm.APIVersion != "v1" || cm.Kind != "ConfigMap" || cm.Name != "envoy-gateway-config" || cm.Namespace != "envoy-gateway-system" {
		t.Errorf("%s %s %s/%s, want v1 ConfigMap envoy-gateway-system/envoy-gateway-config (Envoy Gateway's)", cm.APIVersion, cm.Kind, cm.Namespace, cm.Name)
	}
	var c egConfig
	if err := strictyaml.Unmarshal([]byte(cm.Data["envoy-gateway.yaml"]), &c); err != nil {
		t.Fatalf("envoy-gateway.yaml: %v\n%s", err, cm.Data["envoy-gateway.yaml"])
	}
	if c.APIVersion != "gateway.envoyproxy.io/v1alpha1" || c.Kind != "EnvoyGateway" || c.Provider.Type != "Kubernetes" || c.Gateway.ControllerName == "" {
		t.Errorf("envoy-gateway.yaml is %s %s, provider %q, controller %q: want an EnvoyGateway of gateway.envoyproxy.io/v1alpha1 with provider Kubernetes and a controllerName",
			c.APIVersion, c.Kind, c.Provider.Type, c.Gateway.ControllerName)
	}

	d := c.Provider.Kubernetes.RateLimitDeployment
	image, _ := loadChart(t).Values["image"].(map[string]any)
	repo, tag, _ := strings.Cut(d.Container.Image, ":")
	if repo != image["repository"] || !releaseTag.MatchString(tag) || !egImage.MatchString(d.Container.Image) {
		t.Errorf("rateLimitDeployment.container.image %q: want %s:TAG with a release tag, in the form Envoy Gateway accepts", d.Container.Image, image["repository"])
	}
	if len(d.Container.VolumeMounts) != 0 || len(d.Pod.Volumes) != 0 {
		t.Errorf("mounts %+v, volumes %+v: want none (the image alone)", d.Container.VolumeMounts, d.Pod.Volumes)
	}
	redis := c.RateLimit.Backend
	if redis.Type != "Redis" || !regexp.MustCompile(`^[^:/@]+:[0-9]+$`).MatchString(redis.Redis.URL) {
		t.Errorf("rateLimit.backend %+v: want type Redis and a host:port url", redis)
	}
}

// The README's way (b): its helm command renders Envoy Gateway's pod with
// the Redis it gives.
func TestEnvoyGatewayHelmCommand(t *testing.T) {
	sec := readmeSection(t, "Replacing Envoy Gateway's rate-limit service")
	m := regexp.MustCompile(`(?m)^helm install (\S+) \./charts/throttle -n (\S+) \\\n +-f charts/(throttle/values-envoy-gateway\.yaml)((?: \\\n +--set \S+)*)$`).FindStringSubmatch(sec)
	if m == nil {
		t.Fatal("the section has no `helm install NAME ./charts/throttle -n NAMESPACE -f charts/throttle/values-envoy-gateway.yaml --set …` command")
	}
	var sets []string
	for _, f := range strings.Fields(strings.ReplaceAll(m[4], "\\\n", " ")) {
		if f != "--set" {
			sets = append(sets, f)
		}
	}
	rel := release{m[1], m[2]}
	r := render(t, rel, input{files: []string{m[3]}, set: sets})
	checkCommon(t, rel, []owned{{"Secret", "envoy-rate-limit", "tls.crt"}}, r)
	env := envValues(deployment(t, r).Spec.Template.Spec.Containers[0])
	for _, s := range sets {
		if v, ok := strings.CutPrefix(s, "envoyGateway.redis.url="); ok && env["REDIS_URL"] != v {
			t.Errorf("REDIS_URL %q, want %q from the command", env["REDIS_URL"], v)
		}
	}
	if env["CONFIG_TYPE"] != "GRPC_XDS_SOTW" {
		t.Errorf("CONFIG_TYPE %q: the command does not render Envoy Gateway's pod", env["CONFIG_TYPE"])
	}
}

// TestEnvoyGatewayPrometheusSeries: the chart's Envoy Gateway pod, with its
// default stats (prometheus), serves the reference's stats as the series
// Envoy Gateway's own deployment serves through its mapping
// (testdata/envoy-gateway-statsd-conf.yaml, which its PROMETHEUS_MAPPER_YAML
// names): the same names, labels and values, the response time included,
// which that mapping leaves in milliseconds (it has no scale). The pod's
// env picks Throttle's mapping as serve does: PROMETHEUS_MAPPER_YAML's file
// when set, else the default mapping, in milliseconds when
// PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS is true.
func TestEnvoyGatewayPrometheusSeries(t *testing.T) {
	r := render(t, envoyGatewayRelease, input{files: []string{envoyGatewayValues}})
	env := envValues(deployment(t, r).Spec.Template.Spec.Containers[0])
	if env["USE_PROMETHEUS"] != "true" {
		t.Fatalf("USE_PROMETHEUS=%q: the pod serves no Prometheus series", env["USE_PROMETHEUS"])
	}
	if f, ok := env["PROMETHEUS_MAPPER_YAML"]; ok {
		t.Fatalf("PROMETHEUS_MAPPER_YAML=%s: the chart mounts no mapping file", f)
	}
	ms := false
	if v, ok := env["PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS"]; ok {
		var err error
		if ms, err = strconv.ParseBool(v); err != nil {
			t.Fatalf("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS=%q: %v", v, err)
		}
	}
	eg, err := os.ReadFile("testdata/envoy-gateway-statsd-conf.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := referenceSeries(t, string(eg))
	if diff := cmp.Diff(want, referenceSeries(t, refstats.DefaultMapping(ms))); diff != "" {
		t.Errorf("the pod's series (PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS=%v) differ from Envoy Gateway's (-Envoy Gateway's +the pod's):\n%s", ms, diff)
	}
	for _, s := range []string{
		`ratelimit_service_response_time_seconds_sum{grpc_method="ShouldRateLimit"} 1207`,
		`ratelimit_service_rate_limit_total_hits{domain="edge",key1="generic_key_api",key2="user_id_u1"} 2`,
	} {
		if !slices.Contains(want, s) {
			t.Errorf("Envoy Gateway's series lack %s: is testdata/envoy-gateway-statsd-conf.yaml its mapping?", s)
		}
	}
}

// referenceSeries is what a Prometheus sink mapped by mapping serves of a
// fixed set of the reference's stats (every stat of a descriptor of one,
// two and three keys, errors, config loads, two ShouldRateLimit calls of 7
// ms and 1.2 s): its ratelimit_service_* samples, in order.
func referenceSeries(t *testing.T, mapping string) []string {
	t.Helper()
	p, err := refstats.NewPrometheusSink(mapping)
	if err != nil {
		t.Fatal(err)
	}
	s := refstats.New(p, refstats.Options{})
	for _, key := range []string{"remote_address", "generic_key_api.user_id_u1", "a_1.b_2.c_3"} {
		for i, stat := range []string{refstats.TotalHits, refstats.WithinLimit, refstats.OverLimit, refstats.NearLimit, refstats.ShadowMode, refstats.OverLimitWithLocalCache} {
			s.DescriptorCounter("edge", key, stat).Add(uint64(2 + i))
		}
	}
	s.RedisError()
	s.ServiceError()
	s.ConfigLoad(nil)
	s.GlobalShadowMode()
	s.UnaryCall("/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", 7*time.Millisecond)
	s.UnaryCall("/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", 1200*time.Millisecond)
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	p.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d", rec.Code)
	}
	var series []string
	for _, l := range strings.Split(rec.Body.String(), "\n") {
		if strings.HasPrefix(l, "ratelimit_service_") {
			series = append(series, l)
		}
	}
	return series
}
