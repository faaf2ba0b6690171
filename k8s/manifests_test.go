package k8s_test

import (
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/throttle-rl/throttle/internal/testkit"
	"github.com/throttle-rl/throttle/internal/testkit/manifest"
	"github.com/throttle-rl/throttle/internal/testkit/strictyaml"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/throttle-rl/throttle/descriptors"
	"github.com/throttle-rl/throttle/envoy"
)

const namespace = "throttle"

// settings are the environment variables Throttle reads (DESIGN.md, throttle serve --help).
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

func loadManifests(t *testing.T) *manifest.Set {
	t.Helper()
	var kz struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Resources  []string `json:"resources"`
	}
	if err := strictyaml.Unmarshal(testkit.MustRead(t, "kustomization.yaml"), &kz); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	if kz.APIVersion != "kustomize.config.k8s.io/v1beta1" || kz.Kind != "Kustomization" {
		t.Fatalf("kustomization.yaml: %s %s", kz.APIVersion, kz.Kind)
	}

	// Every YAML file here is in the kustomization, or is one of the two that
	// are not manifests.
	files, _ := filepath.Glob("*.yaml")
	for _, f := range files {
		if f != "kustomization.yaml" && f != "kind-config.yaml" && !slices.Contains(kz.Resources, f) {
			t.Errorf("%s is not listed in kustomization.yaml resources", f)
		}
	}

	m := manifest.NewSet()
	for _, file := range kz.Resources {
		for i, doc := range manifest.Split(testkit.MustRead(t, file)) {
			where := fmt.Sprintf("%s document %d", file, i)
			obj, err := manifest.Decode(doc)
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			if err := m.Add(obj); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			if _, ok := obj.(*corev1.Namespace); !ok && obj.GetNamespace() != namespace {
				t.Errorf("%s: %s has namespace %q, want %q", where, obj.GetName(), obj.GetNamespace(), namespace)
			}
		}
	}
	return m
}

func TestManifestsDecodeStrictly(t *testing.T) {
	m := loadManifests(t)
	if len(m.Namespaces) != 1 || m.Namespaces[0].Name != namespace {
		t.Errorf("want one Namespace %q", namespace)
	}
	for _, name := range []string{"throttle", "redis", "app", "envoy"} {
		if m.Deployments[name] == nil {
			t.Errorf("no Deployment %q", name)
		}
	}
	if m.StatefulSets["postgres"] == nil {
		t.Error("no StatefulSet postgres")
	}

	// A misspelled field fails, and so does a kind the test does not know.
	bad := []struct{ name, doc string }{
		{"misspelled field", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replica: 2}\n"},
		{"wrong case", "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {Selector: {a: b}}\n"},
		{"duplicate field", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: b}\ndata: {c: d}\n"},
		{"unknown kind", "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n"},
	}
	for _, tt := range bad {
		if _, err := manifest.Decode([]byte(tt.doc)); err == nil {
			t.Errorf("%s: manifest.Decode accepted %q", tt.name, tt.doc)
		}
	}
}

// Services select a workload's pods and target ports its containers declare;
// workload selectors select their own pods (manifest.CheckReferences); PDB
// and HPA point at Throttle.
func TestReferences(t *testing.T) {
	m := loadManifests(t)
	m.CheckReferences(t)

	throttlePods := labels.Set(m.Deployments["throttle"].Spec.Template.Labels)
	if len(m.PDBs) == 0 {
		t.Error("no PodDisruptionBudget")
	}
	for _, p := range m.PDBs {
		sel, _ := metav1.LabelSelectorAsSelector(p.Spec.Selector)
		if !sel.Matches(throttlePods) {
			t.Errorf("PodDisruptionBudget %s does not select Throttle's pods", p.Name)
		}
		if p.Spec.MinAvailable == nil || p.Spec.MinAvailable.IntValue() >= int(*m.Deployments["throttle"].Spec.Replicas) {
			t.Errorf("PodDisruptionBudget %s: minAvailable must be below the replica count, or no node can drain", p.Name)
		}
	}
	if len(m.HPAs) == 0 {
		t.Error("no HorizontalPodAutoscaler")
	}
	for _, h := range m.HPAs {
		if len(h.Spec.Metrics) == 0 || h.Spec.Metrics[0].Resource == nil || h.Spec.Metrics[0].Resource.Name != corev1.ResourceCPU {
			t.Errorf("HPA %s: want a CPU resource metric", h.Name)
		}
		if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 2 {
			t.Errorf("HPA %s: minReplicas below 2", h.Name)
		}
	}

	for _, s := range m.StatefulSets {
		svc := m.Services[s.Spec.ServiceName]
		if svc == nil || svc.Spec.ClusterIP != corev1.ClusterIPNone {
			t.Errorf("StatefulSet %s: serviceName %q must be a headless Service here", s.Name, s.Spec.ServiceName)
		}
	}
	if len(m.StatefulSets["postgres"].Spec.VolumeClaimTemplates) == 0 {
		t.Error("StatefulSet postgres has no volumeClaimTemplates")
	}
}

// Every ConfigMap, Secret and key a pod refers to exists; every mount names a
// volume; probes use declared ports; every container has resources and runs
// under the restricted Pod Security Standard (manifest.CheckPods); no pod
// mounts a service account token; every container has readiness and
// liveness probes and uses images kind loaded.
func TestPods(t *testing.T) {
	m := loadManifests(t)
	m.CheckPods(t)
	for _, w := range m.Workloads() {
		spec := w.Pod.Spec
		where := w.Kind + " " + w.Name
		if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
			t.Errorf("%s: automountServiceAccountToken should be false (no pod here talks to the API server)", where)
		}
		for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
			cw := where + " container " + c.Name
			if c.ReadinessProbe == nil || c.LivenessProbe == nil {
				t.Errorf("%s: want readiness and liveness probes", cw)
			}
			if c.ImagePullPolicy != corev1.PullIfNotPresent {
				t.Errorf("%s: imagePullPolicy %q, want IfNotPresent (kind-loaded images have no registry)", cw, c.ImagePullPolicy)
			}
		}
	}
}

// Throttle's Deployment is what the brief and DESIGN.md promise.
func TestThrottleDeployment(t *testing.T) {
	m := loadManifests(t)
	d := m.Deployments["throttle"]
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas = %v, want 2", d.Spec.Replicas)
	}
	if len(d.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("want one container")
	}
	c := d.Spec.Template.Spec.Containers[0]
	if c.Image != "throttle:dev" {
		t.Errorf("image = %q, want throttle:dev", c.Image)
	}
	if c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem {
		t.Error("readOnlyRootFilesystem must be true")
	}

	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		if e.Name == "GOMEMLIMIT" { // Go's own, from the container's memory limit
			if r := e.ValueFrom; r == nil || r.ResourceFieldRef == nil || r.ResourceFieldRef.Resource != "limits.memory" {
				t.Errorf("GOMEMLIMIT must come from the container's limits.memory, got %+v", e)
			}
			continue
		}
		if !slices.Contains(settings, e.Name) {
			t.Errorf("env %s is not one of Throttle's settings %v", e.Name, settings)
		}
		env[e.Name] = e
	}
	for _, k := range []string{"REDIS_URL", "DATABASE_URL"} {
		if r := env[k].ValueFrom; r == nil || r.SecretKeyRef == nil || r.SecretKeyRef.Name != "throttle-secrets" {
			t.Errorf("env %s must come from Secret throttle-secrets", k)
		}
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if env["PORT"].Value != strconv.Itoa(int(ports["http"])) || env["GRPC_PORT"].Value != strconv.Itoa(int(ports["grpc"])) {
		t.Errorf("PORT=%q GRPC_PORT=%q do not match container ports %v", env["PORT"].Value, env["GRPC_PORT"].Value, ports)
	}
	if ports["http"] != 8080 || ports["grpc"] != 8081 {
		t.Errorf("container ports %v, want http 8080, grpc 8081", ports)
	}

	// DESCRIPTORS_DIR is where the throttle-descriptors ConfigMap is mounted.
	dir := env["DESCRIPTORS_DIR"].Value
	var mounted bool
	for _, vm := range c.VolumeMounts {
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name == vm.Name && v.ConfigMap != nil && v.ConfigMap.Name == "throttle-descriptors" && vm.MountPath == dir {
				mounted = true
			}
		}
	}
	if dir != "/etc/throttle/descriptors" || !mounted {
		t.Errorf("DESCRIPTORS_DIR=%q must be the mount path of ConfigMap throttle-descriptors", dir)
	}

	// Probes: readiness and liveness over HTTP, startup over gRPC on 8081.
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/ready" {
		t.Error("readinessProbe must be httpGet /ready")
	} else if p.TimeoutSeconds < 3 {
		t.Errorf("readinessProbe timeoutSeconds %d: /ready may take 2.5 s (the database 2 s, Redis 500 ms), want at least 3", p.TimeoutSeconds)
	}
	if p := c.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/health" {
		t.Error("livenessProbe must be httpGet /health")
	}
	var grpcProbe bool
	for _, p := range []*corev1.Probe{c.StartupProbe, c.ReadinessProbe, c.LivenessProbe} {
		if p != nil && p.GRPC != nil && p.GRPC.Port == ports["grpc"] {
			grpcProbe = true
		}
	}
	if c.StartupProbe == nil || !grpcProbe {
		t.Error("want a startupProbe and a gRPC probe on the gRPC port")
	}

	svc := m.Services["throttle"]
	want := map[string]struct {
		port        int32
		appProtocol string
	}{"http": {8080, "http"}, "grpc": {8081, "grpc"}}
	for _, p := range svc.Spec.Ports {
		w, ok := want[p.Name]
		if !ok || p.Port != w.port || p.AppProtocol == nil || *p.AppProtocol != w.appProtocol {
			t.Errorf("Service throttle port %s %d appProtocol %v, want %v", p.Name, p.Port, p.AppProtocol, w)
		}
		delete(want, p.Name)
	}
	if len(want) > 0 {
		t.Errorf("Service throttle lacks ports %v", want)
	}
}

// The demo Secrets agree with each other and with the Services they name.
func TestConnectionStrings(t *testing.T) {
	m := loadManifests(t)
	s := m.Secrets["throttle-secrets"]
	pg := m.Secrets["postgres-credentials"]
	if s == nil || pg == nil {
		t.Fatal("want Secrets throttle-secrets and postgres-credentials")
	}
	for _, sec := range []*corev1.Secret{s, pg} {
		if len(sec.Data) > 0 {
			t.Errorf("Secret %s: use stringData, so the demo values are readable", sec.Name)
		}
	}
	for _, f := range []string{"throttle-secrets.yaml", "postgres.yaml"} {
		if !strings.Contains(string(testkit.MustRead(t, f)), "DEMO VALUES ONLY") {
			t.Errorf("%s: the demo credentials must be labelled DEMO VALUES ONLY", f)
		}
	}

	db, err := url.Parse(s.StringData["DATABASE_URL"])
	if err != nil {
		t.Fatalf("DATABASE_URL: %v", err)
	}
	pass, _ := db.User.Password()
	if db.Scheme != "postgres" || db.User.Username() != pg.StringData["POSTGRES_USER"] || pass != pg.StringData["POSTGRES_PASSWORD"] ||
		strings.TrimPrefix(db.Path, "/") != pg.StringData["POSTGRES_DB"] {
		t.Errorf("DATABASE_URL %q does not match postgres-credentials", s.StringData["DATABASE_URL"])
	}
	checkServiceAddress(t, m, "DATABASE_URL", db.Host)

	r, err := url.Parse(s.StringData["REDIS_URL"])
	if err != nil || r.Scheme != "redis" {
		t.Fatalf("REDIS_URL %q: want redis://…", s.StringData["REDIS_URL"])
	}
	checkServiceAddress(t, m, "REDIS_URL", r.Host)
}

// checkServiceAddress checks that host:port is a Service here, by its
// cluster DNS name, on one of its ports; it returns the Service.
func checkServiceAddress(t *testing.T, m *manifest.Set, where, hostport string) *corev1.Service {
	t.Helper()
	host, port, ok := strings.Cut(hostport, ":")
	name, rest, _ := strings.Cut(host, ".")
	if !ok || (rest != namespace+".svc" && rest != namespace+".svc.cluster.local") {
		t.Errorf("%s: address %q, want <service>.%s.svc.cluster.local:<port>", where, hostport, namespace)
		return nil
	}
	svc := m.Services[name]
	if svc == nil {
		t.Errorf("%s: address %q names no Service here", where, hostport)
		return nil
	}
	for _, p := range svc.Spec.Ports {
		if strconv.Itoa(int(p.Port)) == port {
			return svc
		}
	}
	t.Errorf("%s: Service %s has no port %s", where, name, port)
	return nil
}

// The Envoy ConfigMap holds a valid bootstrap that is envoy/envoy.yaml with
// in-cluster addresses, sends rate-limit calls to the Throttle Service's gRPC
// port, and uses the domain of the descriptors ConfigMap.
func TestEnvoyConfig(t *testing.T) {
	m := loadManifests(t)
	cm := m.ConfigMaps["envoy-config"]
	if cm == nil {
		t.Fatal("no ConfigMap envoy-config")
	}
	b, err := envoy.LoadBootstrap([]byte(cm.Data["envoy.yaml"]))
	if err != nil {
		t.Fatalf("envoy-config envoy.yaml: %v", err)
	}

	clusters := map[string]*clusterv3.Cluster{}
	for _, c := range b.GetStaticResources().GetClusters() {
		clusters[c.GetName()] = c
	}
	rl := rateLimitFilter(t, b.GetStaticResources().GetListeners()[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig())
	rlsCluster := clusters[rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc().GetClusterName()]
	if rlsCluster == nil {
		t.Fatal("the ratelimit filter names no defined cluster")
	}
	for _, addr := range envoy.EndpointAddrs(rlsCluster) {
		svc := checkServiceAddress(t, m, "Envoy cluster "+rlsCluster.GetName(), addr)
		if svc == nil {
			continue
		}
		if svc.Name != "throttle" {
			t.Errorf("Envoy rate-limit cluster points at Service %s, want throttle", svc.Name)
		}
		for _, p := range svc.Spec.Ports {
			if addr == fmt.Sprintf("%s.%s.svc.cluster.local:%d", svc.Name, namespace, p.Port) && p.Name != "grpc" {
				t.Errorf("Envoy rate-limit cluster uses Service port %s, want grpc", p.Name)
			}
		}
	}
	for _, addr := range envoy.EndpointAddrs(clusters["app"]) {
		if svc := checkServiceAddress(t, m, "Envoy cluster app", addr); svc != nil && svc.Name != "app" {
			t.Errorf("Envoy cluster app points at Service %s", svc.Name)
		}
	}

	// The same as envoy/envoy.yaml but for the addresses.
	front, err := envoy.LoadBootstrap(testkit.MustRead(t, "../envoy/envoy.yaml"))
	if err != nil {
		t.Fatalf("envoy/envoy.yaml: %v", err)
	}
	for _, c := range front.GetStaticResources().GetClusters() {
		for i, e := range c.GetLoadAssignment().GetEndpoints() {
			for j, le := range e.GetLbEndpoints() {
				in := clusters[c.GetName()].GetLoadAssignment().GetEndpoints()[i].GetLbEndpoints()[j]
				le.GetEndpoint().GetAddress().GetSocketAddress().Address = in.GetEndpoint().GetAddress().GetSocketAddress().GetAddress()
			}
		}
	}
	if !proto.Equal(front, b) {
		t.Error("k8s/envoy.yaml's envoy.yaml differs from envoy/envoy.yaml in more than cluster addresses")
	}

	// Descriptors: the ConfigMap is envoy/descriptors/edge.yaml and loads.
	dcm := m.ConfigMaps["throttle-descriptors"]
	if dcm == nil || len(dcm.Data) == 0 {
		t.Fatal("no ConfigMap throttle-descriptors with data")
	}
	if got, want := dcm.Data["edge.yaml"], string(testkit.MustRead(t, "../envoy/descriptors/edge.yaml")); got != want {
		t.Error("throttle-descriptors edge.yaml differs from envoy/descriptors/edge.yaml")
	}
	var srcs []descriptors.Source
	for name, data := range dcm.Data {
		srcs = append(srcs, descriptors.Source{Name: "throttle-descriptors/" + name, Data: []byte(data)})
	}
	cfg, err := descriptors.Load(descriptors.Options{}, srcs...)
	if err != nil {
		t.Fatalf("throttle-descriptors: %v", err)
	}
	if cfg.Domain(rl.GetDomain()) == nil {
		t.Errorf("Envoy's ratelimit domain %q is not in throttle-descriptors", rl.GetDomain())
	}

	// Envoy's NodePort is the port kind publishes.
	kind := loadKindConfig(t)
	svc := m.Services["envoy"]
	if svc == nil || svc.Spec.Type != corev1.ServiceTypeNodePort {
		t.Fatal("want Service envoy of type NodePort")
	}
	var published bool
	for _, p := range svc.Spec.Ports {
		for _, node := range kind.Nodes {
			for _, pm := range node.ExtraPortMappings {
				if pm.ContainerPort == p.NodePort {
					published = true
				}
			}
		}
		if _, ok := manifest.ContainerPort(m.Deployments["envoy"].Spec.Template.Spec, p.TargetPort); ok &&
			p.Port != int32(b.GetStaticResources().GetListeners()[0].GetAddress().GetSocketAddress().GetPortValue()) {
			t.Errorf("Service envoy port %d is not Envoy's listener port", p.Port)
		}
	}
	if !published {
		t.Error("no Service envoy nodePort is an extraPortMappings containerPort of kind-config.yaml")
	}
}

type kindConfig struct {
	Kind       string `json:"kind"`
	APIVersion string `json:"apiVersion"`
	Name       string `json:"name,omitempty"`
	Nodes      []struct {
		Role              string `json:"role"`
		Image             string `json:"image,omitempty"`
		ExtraPortMappings []struct {
			ContainerPort int32  `json:"containerPort"`
			HostPort      int32  `json:"hostPort"`
			ListenAddress string `json:"listenAddress,omitempty"`
			Protocol      string `json:"protocol,omitempty"`
		} `json:"extraPortMappings,omitempty"`
	} `json:"nodes"`
}

func loadKindConfig(t *testing.T) kindConfig {
	t.Helper()
	var k kindConfig
	if err := strictyaml.Unmarshal(testkit.MustRead(t, "kind-config.yaml"), &k); err != nil {
		t.Fatalf("kind-config.yaml: %v", err)
	}
	if k.Kind != "Cluster" || k.APIVersion != "kind.x-k8s.io/v1alpha4" {
		t.Fatalf("kind-config.yaml: %s %s, want kind.x-k8s.io/v1alpha4 Cluster", k.APIVersion, k.Kind)
	}
	return k
}

// The demo script parses, builds and loads every local image the manifests
// use, and waits for every workload; `make kind-demo` runs it.
func TestKindDemoScript(t *testing.T) {
	if out, err := exec.Command("bash", "-n", "kind-demo.sh").CombinedOutput(); err != nil {
		t.Fatalf("bash -n kind-demo.sh: %v\n%s", err, out)
	}
	info, err := os.Stat("kind-demo.sh")
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode()&0o111 == 0 {
		t.Error("kind-demo.sh is not executable")
	}
	script := string(testkit.MustRead(t, "kind-demo.sh"))
	m := loadManifests(t)
	for _, w := range m.Workloads() {
		for _, c := range w.Pod.Spec.Containers {
			if strings.HasSuffix(c.Image, ":dev") {
				if !strings.Contains(script, "docker build -t "+c.Image+" ") {
					t.Errorf("kind-demo.sh does not build %s", c.Image)
				}
				if !regexp.MustCompile(`kind load docker-image .*` + regexp.QuoteMeta(c.Image)).MatchString(script) {
					t.Errorf("kind-demo.sh does not kind-load %s", c.Image)
				}
			}
		}
		if !strings.Contains(script, "rollout status "+strings.ToLower(w.Kind)+"/"+w.Name+" ") {
			t.Errorf("kind-demo.sh does not wait for %s/%s", strings.ToLower(w.Kind), w.Name)
		}
	}
	for _, want := range []string{"--config k8s/kind-config.yaml", "kubectl apply -k k8s/", "x-user-id"} {
		if !strings.Contains(script, want) {
			t.Errorf("kind-demo.sh lacks %q", want)
		}
	}
	mk := string(testkit.MustRead(t, "../Makefile"))
	if !regexp.MustCompile(`(?m)^kind-demo:.*\n\tk8s/kind-demo.sh$`).MatchString(mk) {
		t.Error("Makefile has no kind-demo target running k8s/kind-demo.sh")
	}
}

// ---- helpers ----

func rateLimitFilter(t *testing.T, a *anypb.Any) *ratelimitv3.RateLimit {
	t.Helper()
	var hcm hcmv3.HttpConnectionManager
	if err := a.UnmarshalTo(&hcm); err != nil {
		t.Fatalf("listener filter: %v", err)
	}
	for _, f := range hcm.GetHttpFilters() {
		if f.GetName() == "envoy.filters.http.ratelimit" {
			var rl ratelimitv3.RateLimit
			if err := f.GetTypedConfig().UnmarshalTo(&rl); err != nil {
				t.Fatal(err)
			}
			return &rl
		}
	}
	t.Fatal("no envoy.filters.http.ratelimit")
	return nil
}
