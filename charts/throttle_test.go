package charts

import (
	"fmt"
	"net/url"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/throttle-rl/throttle/internal/testkit/manifest"
	"github.com/throttle-rl/throttle/internal/testkit/throttletest"
)

// The value sets the chart is rendered with. Each is rendered, every object
// decoded strictly, the common checks run (checkCommon), then its own.
var valueSets = []struct {
	name string
	rel  release
	in   input
	// theirs lists the objects the values name that the user manages.
	theirs []owned
	check  func(t *testing.T, r rendered)
}{
	{
		name:  "default values",
		rel:   defaultRelease,
		check: checkDefaults,
	},
	{
		name: "single Redis and PostgreSQL by URL (the README's command)",
		rel:  defaultRelease,
		in: input{set: []string{
			"redis.url=redis://redis.cache.svc.cluster.local:6379/0",
			"database.url=postgres://throttle:s3cret@postgres.db.svc.cluster.local:5432/throttle?sslmode=require",
		}},
		check: func(t *testing.T, r rendered) {
			wantSecret(t, r, map[string]string{
				"REDIS_URL":    "redis://redis.cache.svc.cluster.local:6379/0",
				"DATABASE_URL": "postgres://throttle:s3cret@postgres.db.svc.cluster.local:5432/throttle?sslmode=require",
			})
			d := deployment(t, r)
			if d.Spec.Template.Annotations["checksum/secret"] == "" {
				t.Error("no checksum/secret pod annotation: pods would keep the old URLs after an upgrade")
			}
			if slices.ContainsFunc(d.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == "data" }) {
				t.Error("a data emptyDir for SQLite, with database.url set")
			}
			for _, s := range []string{"WARNING", "NOTE:"} {
				if strings.Contains(r.notes, s) {
					t.Errorf("NOTES.txt has a %s with Redis and PostgreSQL set:\n%s", s, r.notes)
				}
			}
		},
	},
	{
		name: "single Redis by parts: TLS, ACL user, a password to escape, db 2, options",
		rel:  defaultRelease,
		in: input{values: `
redis:
  addresses: [redis-master.redis.svc.cluster.local:6380]
  db: 2
  tls: true
  username: throttle
  password: "p@ss w:rd/+%"
  options: {pool_size: 64, max_retries: 1}
`},
		check: func(t *testing.T, r rendered) {
			got := wantRedisURL(t, r, "rediss://throttle:p%40ss%20w%3Ard%2F%2B%25@redis-master.redis.svc.cluster.local:6380/2?max_retries=1&pool_size=64")
			if pass, _ := got.User.Password(); pass != "p@ss w:rd/+%" || got.User.Username() != "throttle" {
				t.Errorf("REDIS_URL user %q password %q: escaping lost them", got.User.Username(), pass)
			}
		},
	},
	{
		name: "Redis Sentinel",
		rel:  defaultRelease,
		in: input{values: `
redis:
  mode: sentinel
  addresses: [sentinel-0.redis:26379, sentinel-1.redis:26379, sentinel-2.redis:26379]
  password: "master pw"
  sentinel:
    masterName: mymaster
    password: "s:pw"
`},
		check: func(t *testing.T, r rendered) {
			got := wantRedisURL(t, r, "redis://:s%3Apw@sentinel-0.redis:26379/0?master_name=mymaster&addr=sentinel-1.redis:26379&addr=sentinel-2.redis:26379&password=master+pw")
			if pass, _ := got.User.Password(); pass != "s:pw" {
				t.Errorf("sentinel password %q, want s:pw", pass)
			}
			if q := got.Query(); q.Get("password") != "master pw" || q.Get("master_name") != "mymaster" {
				t.Errorf("query %v: want the master's password and name", q)
			}
			if !strings.Contains(r.notes, "redis.mode sentinel") {
				t.Errorf("NOTES.txt does not say sentinel:\n%s", r.notes)
			}
		},
	},
	{
		name: "Redis Cluster",
		rel:  defaultRelease,
		in: input{values: `
redis:
  mode: cluster
  addresses: [node-0.redis:6379, node-1.redis:6379, node-2.redis:6379]
  password: pw
config:
  failureMode: local
`},
		check: func(t *testing.T, r rendered) {
			wantRedisURL(t, r, "redis://:pw@node-0.redis:6379?cluster=true&addr=node-1.redis:6379&addr=node-2.redis:6379")
			if got := envOf(t, r)["FAILURE_MODE"].Value; got != "local" {
				t.Errorf("FAILURE_MODE = %q, want local", got)
			}
		},
	},
	{
		name: "existing Secrets for both URLs",
		rel:  release{"rl", "edge"},
		in: input{values: `
redis: {existingSecret: {name: redis-conn, key: url}}
database: {existingSecret: {name: pg-app, key: uri}}
`},
		theirs: []owned{{"Secret", "redis-conn", "url"}, {"Secret", "pg-app", "uri"}},
		check: func(t *testing.T, r rendered) {
			if len(r.set.Secrets) != 0 {
				t.Errorf("the chart made Secrets %v; the URLs are in existing ones", keys(r.set.Secrets))
			}
			env := envOf(t, r)
			for name, want := range map[string]corev1.SecretKeySelector{
				"REDIS_URL":    {LocalObjectReference: corev1.LocalObjectReference{Name: "redis-conn"}, Key: "url"},
				"DATABASE_URL": {LocalObjectReference: corev1.LocalObjectReference{Name: "pg-app"}, Key: "uri"},
			} {
				if r := env[name].ValueFrom; r == nil || r.SecretKeyRef == nil || r.SecretKeyRef.Name != want.Name || r.SecretKeyRef.Key != want.Key {
					t.Errorf("%s from %+v, want Secret %s key %s", name, env[name].ValueFrom, want.Name, want.Key)
				}
			}
			if d := deployment(t, r); d.Name != "rl-throttle" || d.Namespace != "edge" {
				t.Errorf("Deployment %s/%s, want edge/rl-throttle (release rl)", d.Namespace, d.Name)
			}
		},
	},
	{
		name: "Istio gateway with descriptors",
		rel:  defaultRelease,
		in: input{values: `
istio: {envoyFilter: {enabled: true}}
service: {headless: true}
`, setFile: []string{`descriptors.files.edge\.yaml=../envoy/descriptors/edge.yaml`}},
		check: checkIstio,
	},
	{
		name: "Istio gateway through the mesh's own cluster (STRICT mTLS)",
		rel:  release{"throttle", "limits"},
		in: input{values: `
istio: {envoyFilter: {enabled: true, meshCluster: true, namespace: gateways, workloadSelector: {app: public-gateway}}}
descriptors: {existingConfigMap: my-descriptors}
`},
		theirs: []owned{{"ConfigMap", "my-descriptors", ""}},
		check: func(t *testing.T, r rendered) {
			f := onlyEnvoyFilter(t, r)
			if f.Namespace != "gateways" || !maps2Equal(f.Spec.WorkloadSelector.Labels, map[string]string{"app": "public-gateway"}) {
				t.Errorf("EnvoyFilter %s/%s selects %v", f.Namespace, f.Name, f.Spec.WorkloadSelector.Labels)
			}
			ps := patches(t, f)
			if len(ps.Clusters) != 0 {
				t.Errorf("meshCluster: want no CLUSTER patch, got %d", len(ps.Clusters))
			}
			rl := rateLimitOf(t, ps)
			svc := rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc()
			if want := "outbound|8081||throttle.limits.svc.cluster.local"; svc.GetClusterName() != want || svc.GetAuthority() != "throttle.limits.svc.cluster.local" {
				t.Errorf("ratelimit cluster %q authority %q, want %q", svc.GetClusterName(), svc.GetAuthority(), want)
			}
			if len(r.set.ConfigMaps) != 0 {
				t.Errorf("the chart made ConfigMaps %v with descriptors.existingConfigMap", keys(r.set.ConfigMaps))
			}
			if !strings.Contains(r.notes, "ConfigMap my-descriptors") || strings.Contains(r.notes, "no file of descriptors.files") ||
				!strings.Contains(r.notes, "gateways labelled app=public-gateway ask") {
				t.Errorf("NOTES.txt about the existing ConfigMap:\n%s", r.notes)
			}
		},
	},
	{
		name: "failureMode closed behind an Istio gateway that fails open",
		rel:  defaultRelease,
		in: input{values: `
config: {failureMode: closed}
redis: {url: "redis://redis.cache.svc.cluster.local:6379/0"}
istio: {envoyFilter: {enabled: true}}
`, setFile: []string{`descriptors.files.edge\.yaml=../envoy/descriptors/edge.yaml`}},
		check: func(t *testing.T, r rendered) {
			if !strings.Contains(r.notes, "WARNING: config.failureMode is closed but the gateway fails open") ||
				!strings.Contains(r.notes, "Set istio.envoyFilter.failureModeDeny=true.") {
				t.Errorf("NOTES.txt does not warn that the gateway fails open while the pods are NotReady:\n%s", r.notes)
			}
		},
	},
	{
		name: "failureMode closed behind an Istio gateway that fails closed",
		rel:  defaultRelease,
		in: input{values: `
config: {failureMode: closed}
redis: {url: "redis://redis.cache.svc.cluster.local:6379/0"}
istio: {envoyFilter: {enabled: true, failureModeDeny: true}}
`, setFile: []string{`descriptors.files.edge\.yaml=../envoy/descriptors/edge.yaml`}},
		check: func(t *testing.T, r rendered) {
			if strings.Contains(r.notes, "WARNING") {
				t.Errorf("NOTES.txt warns with the gateway failing closed too:\n%s", r.notes)
			}
			if !rateLimitOf(t, patches(t, onlyEnvoyFilter(t, r))).GetFailureModeDeny() {
				t.Error("istio.envoyFilter.failureModeDeny true: the filter's failure_mode_deny is false")
			}
		},
	},
	{
		name: "autoscaling off, 3 replicas, PDB minAvailable 2",
		rel:  defaultRelease,
		in: input{values: `
autoscaling: {enabled: false}
replicaCount: 3
podDisruptionBudget: {minAvailable: 2}
redis: {url: "redis://redis:6379/0"}
`},
		check: func(t *testing.T, r rendered) {
			if len(r.set.HPAs) != 0 {
				t.Error("an HPA with autoscaling.enabled=false")
			}
			d := deployment(t, r)
			if d.Spec.Replicas == nil || *d.Spec.Replicas != 3 {
				t.Errorf("replicas = %v, want 3", d.Spec.Replicas)
			}
			if len(r.set.PDBs) != 1 || r.set.PDBs[0].Spec.MinAvailable.IntValue() != 2 {
				t.Errorf("want one PDB with minAvailable 2")
			}
		},
	},
	{
		name: "ServiceMonitor, no scrape annotations, PDB off",
		rel:  defaultRelease,
		in: input{values: `
serviceMonitor: {enabled: true, namespace: monitoring, labels: {release: prometheus}, interval: 15s}
metrics: {scrapeAnnotations: false}
podDisruptionBudget: {enabled: false}
`},
		check: func(t *testing.T, r rendered) {
			if len(r.set.ServiceMonitors) != 1 {
				t.Fatalf("%d ServiceMonitors, want 1", len(r.set.ServiceMonitors))
			}
			m := r.set.ServiceMonitors[0]
			if m.Namespace != "monitoring" || m.Labels["release"] != "prometheus" {
				t.Errorf("ServiceMonitor %s/%s labels %v", m.Namespace, m.Name, m.Labels)
			}
			if len(m.Spec.Endpoints) != 1 || m.Spec.Endpoints[0].Path != "/metrics" || m.Spec.Endpoints[0].Interval != "15s" {
				t.Errorf("ServiceMonitor endpoints %+v, want /metrics every 15s", m.Spec.Endpoints)
			}
			if a := deployment(t, r).Spec.Template.Annotations; a["prometheus.io/scrape"] != "" {
				t.Errorf("prometheus.io annotations with metrics.scrapeAnnotations=false: %v", a)
			}
			if len(r.set.PDBs) != 0 {
				t.Error("a PDB with podDisruptionBudget.enabled=false")
			}
		},
	},
	{
		name: "TLS on both listeners and to Redis, from cert-manager's Secrets",
		rel:  defaultRelease,
		in:   input{values: tlsEverywhere},
		theirs: []owned{{"Secret", "throttle-tls", "tls.crt"}, {"Secret", "envoy-ca", "ca.crt"}, {"Secret", "redis-ca", "ca.crt"},
			{"Secret", "throttle-redis-client", "tls.crt"}},
		check: checkTLSEverywhere,
	},
	{
		name:   "client certificates on the REST port",
		rel:    defaultRelease,
		in:     input{values: "tls: {http: {secretName: throttle-tls, clientCA: {secretName: throttle-tls}}}"},
		theirs: []owned{{"Secret", "throttle-tls", "ca.crt"}},
		check:  checkRESTClientCertificates,
	},
	{
		name:   "every config value, extraEnv and other ports",
		rel:    defaultRelease,
		in:     input{values: everySetting},
		theirs: []owned{{"Secret", "tracing", "headers"}, {"ConfigMap", "throttle-extra", ""}},
		check: func(t *testing.T, r rendered) {
			env := envOf(t, r)
			want := map[string]string{
				"PORT": "9090", "GRPC_PORT": "9091",
				"FAILURE_MODE": "closed", "LOG_LEVEL": "debug", "TRUSTED_PROXIES": "10.0.0.0/8, 192.168.0.0/16",
				"RATE_LIMIT_HEADERS": "ietf", "RATE_LIMIT_RESPONSE_HEADERS": "true", "REST_BACKEND_TIMEOUT": "750ms",
				"BACKEND_TIMEOUT": "40ms", "LOCAL_CACHE_SIZE_IN_BYTES": "16777216", "MERGE_DOMAIN_CONFIG": "true",
				"DESCRIPTORS_RELOAD_INTERVAL": "10s", "FORCE_START_WITHOUT_INITIAL_CONFIG": "true", "SHADOW_MODE": "true",
				"RESPONSE_DYNAMIC_METADATA": "true", "STATS_MAX_VALUE_KEYS": "0", "CACHE_REFRESH_INTERVAL": "5s",
				"REGISTER_LIMIT_PER_HOUR": "100", "SHUTDOWN_TIMEOUT": "20s",
				"OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel-collector.observability:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
				"OTEL_SERVICE_NAME": "throttle-edge", "OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25",
				"CACHE_KEY_PREFIX": "edge:", "GOGC": "200",
			}
			for name, v := range want {
				if got := env[name].Value; got != v {
					t.Errorf("env %s = %q, want %q", name, got, v)
				}
			}
			if r := env["OTEL_EXPORTER_OTLP_HEADERS"].ValueFrom; r == nil || r.SecretKeyRef == nil || r.SecretKeyRef.Name != "tracing" {
				t.Errorf("OTEL_EXPORTER_OTLP_HEADERS from %+v, want Secret tracing", r)
			}
			c := deployment(t, r).Spec.Template.Spec.Containers[0]
			if len(c.EnvFrom) != 1 || c.EnvFrom[0].ConfigMapRef == nil || c.EnvFrom[0].ConfigMapRef.Name != "throttle-extra" {
				t.Errorf("envFrom %+v, want ConfigMap throttle-extra", c.EnvFrom)
			}
			svc := r.set.Services["throttle"]
			if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || svc.Annotations["service.beta.kubernetes.io/aws-load-balancer-internal"] != "true" {
				t.Errorf("Service type %s annotations %v", svc.Spec.Type, svc.Annotations)
			}
			if c.Lifecycle != nil {
				t.Errorf("preStopSleepSeconds 0: want no preStop hook, got %+v", c.Lifecycle)
			}
		},
	},
	{
		name:   "Envoy Gateway's rate-limit pod (values-envoy-gateway.yaml)",
		rel:    envoyGatewayRelease,
		in:     input{files: []string{envoyGatewayValues}},
		theirs: []owned{{"Secret", "envoy-rate-limit", "tls.crt"}},
		check: func(t *testing.T, r rendered) {
			checkEnvoyGatewayPod(t, r, "prometheus")
			for _, want := range []string{"Descriptors: from Envoy Gateway's xDS server envoy-gateway:18001 (node envoy-ratelimit).",
				"(TLS, Secret envoy-rate-limit)", "Counters:  Redis (REDIS_URL redis.redis-system.svc.cluster.local:6379)", ":19001/metrics"} {
				if !strings.Contains(r.notes, want) {
					t.Errorf("NOTES.txt lacks %q:\n%s", want, r.notes)
				}
			}
		},
	},
	{
		name:   "Envoy Gateway's rate-limit pod with the statsd-exporter sidecar",
		rel:    envoyGatewayRelease,
		in:     input{files: []string{envoyGatewayValues}, set: []string{"envoyGateway.stats=statsd"}},
		theirs: []owned{{"Secret", "envoy-rate-limit", "tls.crt"}},
		check: func(t *testing.T, r rendered) {
			checkEnvoyGatewayPod(t, r, "statsd")
		},
	},
	{
		name: "Envoy Gateway's rate-limit pod: its xDS server, node, certificates and Redis given, Redis from Secrets, ServiceMonitor",
		rel:  release{"rl", "gateways"},
		in: input{files: []string{envoyGatewayValues}, values: `
envoyGateway:
  xds: {serverURL: "envoy-gateway.envoy-gateway-system.svc.cluster.local:18001", nodeID: throttle-ratelimit}
  certsSecret: throttle-xds-client
  redis:
    url: ""
    existingSecret: {name: redis-conn, key: hostport}
    auth: {existingSecret: {name: redis-auth, key: password}}
serviceMonitor: {enabled: true}
extraEnv: [{name: REDIS_TYPE, value: SENTINEL}]
`},
		theirs: []owned{{"Secret", "throttle-xds-client", "tls.crt"}, {"Secret", "redis-conn", "hostport"}, {"Secret", "redis-auth", "password"}},
		check: func(t *testing.T, r rendered) {
			env := envValues(deployment(t, r).Spec.Template.Spec.Containers[0])
			for name, want := range map[string]string{
				"CONFIG_GRPC_XDS_SERVER_URL": "envoy-gateway.envoy-gateway-system.svc.cluster.local:18001",
				"CONFIG_GRPC_XDS_NODE_ID":    "throttle-ratelimit",
				"REDIS_SOCKET_TYPE":          "tcp",
				"REDIS_URL":                  "secretKeyRef:redis-conn/hostport",
				"REDIS_AUTH":                 "secretKeyRef:redis-auth/password",
				"REDIS_TYPE":                 "SENTINEL",
			} {
				if env[name] != want {
					t.Errorf("env %s = %q, want %q", name, env[name], want)
				}
			}
			if m := mountsOf(r, deployment(t, r).Spec.Template.Spec, deployment(t, r).Spec.Template.Spec.Containers[0])["/certs"]; m.Secret != "throttle-xds-client" || !m.ReadOnly {
				t.Errorf("/certs mounts %+v, want Secret throttle-xds-client read-only", m)
			}
			if len(r.set.Secrets) != 0 {
				t.Errorf("the chart made Secrets %v; Redis comes from the user's", keys(r.set.Secrets))
			}
			if m := r.set.ServiceMonitors; len(m) != 1 || m[0].Spec.Endpoints[0].Port != "metrics" {
				t.Errorf("want one ServiceMonitor scraping the metrics port (the reference's series), got %+v", m)
			}
			if !strings.Contains(r.notes, "REDIS_URL from Secret redis-conn") || strings.Contains(r.notes, "WARNING") {
				t.Errorf("NOTES.txt about Redis from a Secret:\n%s", r.notes)
			}
		},
	},
}

// owned is an object the user manages, which the chart only refers to: a
// Secret with its key, or a ConfigMap.
type owned struct{ kind, name, key string }

// everySetting sets every config value, extraEnv, and what else can be
// changed without a Redis: the settings test runs the binary with it too.
const everySetting = `
config:
  failureMode: closed
  logLevel: debug
  trustedProxies: "10.0.0.0/8, 192.168.0.0/16"
  rateLimitHeaders: ietf
  rateLimitResponseHeaders: true
  restBackendTimeout: 750ms
  backendTimeout: 40ms
  localCacheSizeInBytes: 16777216
  mergeDomainConfig: true
  descriptorsReloadInterval: 10s
  forceStartWithoutInitialConfig: true
  shadowMode: true
  responseDynamicMetadata: true
  statsMaxValueKeys: 0
  cacheRefreshInterval: 5s
  registerLimitPerHour: 100
  shutdownTimeout: 20s
  otelExporterOtlpEndpoint: http://otel-collector.observability:4317
  otelExporterOtlpProtocol: grpc
  otelServiceName: throttle-edge
  otelTracesSampler: parentbased_traceidratio
  otelTracesSamplerArg: "0.25"
  cacheKeyPrefix: "edge:"
  countRejectedHits: true
  maxDescriptorsPerRequest: 32
  maxDescriptorEntries: 16
adminKey: {value: operator-key-0123456789}
extraEnv:
  - {name: GOGC, value: "200"}
  - name: OTEL_EXPORTER_OTLP_HEADERS
    valueFrom: {secretKeyRef: {name: tracing, key: headers}}
extraEnvFrom:
  - configMapRef: {name: throttle-extra}
containerPorts: {http: 9090, grpc: 9091}
service: {type: LoadBalancer, annotations: {service.beta.kubernetes.io/aws-load-balancer-internal: "true"}}
resources: {requests: {cpu: 250m, memory: 128Mi}, limits: {cpu: "2", memory: 512Mi}}
preStopSleepSeconds: 0
`

func TestValueSets(t *testing.T) {
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			r := render(t, vs.rel, vs.in)
			vs.check(t, r)
			checkCommon(t, vs.rel, vs.theirs, r)
		})
	}
}

// Without a memory limit there is no GOMEMLIMIT (a resourceFieldRef would
// give the node's memory). Maps merge with values.yaml's: null removes a default.
func TestNoMemoryLimit(t *testing.T) {
	r := render(t, defaultRelease, input{values: "resources: {limits: {memory: null}}"})
	if _, ok := envOf(t, r)["GOMEMLIMIT"]; ok {
		t.Error("GOMEMLIMIT without a memory limit")
	}
	if _, ok := deployment(t, r).Spec.Template.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU]; !ok {
		t.Error("the CPU limit went with the memory limit")
	}
}

// checkCommon checks what every value set must give: objects that refer to
// each other (manifest.CheckReferences, CheckPods) in the release's
// namespace with the chart's labels, and Throttle's Deployment and Service
// as the brief and DESIGN.md promise.
func checkCommon(t *testing.T, rel release, theirs []owned, r rendered) {
	t.Helper()
	// What the user manages is not rendered: stand it in, so that CheckPods
	// checks every other reference.
	for _, o := range theirs {
		switch o.kind {
		case "Secret":
			r.set.Secrets[o.name] = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: o.name}, Data: map[string][]byte{o.key: nil}}
		case "ConfigMap":
			r.set.ConfigMaps[o.name] = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: o.name}}
		default:
			t.Fatalf("owned %v: a Secret or a ConfigMap", o)
		}
	}
	r.set.CheckReferences(t)
	r.set.CheckPods(t)

	for _, obj := range r.set.Objects {
		kind := fmt.Sprintf("%T", obj)
		if l := obj.GetLabels(); l["app.kubernetes.io/instance"] != rel.name || l["app.kubernetes.io/managed-by"] != "Helm" || !strings.HasPrefix(l["helm.sh/chart"], "throttle-") {
			t.Errorf("%s %s: labels %v lack the chart's", kind, obj.GetName(), l)
		}
		switch obj.(type) {
		case *manifest.EnvoyFilter:
		default:
			if obj.GetNamespace() != rel.namespace && !(kind == "*v1.ServiceMonitor" && obj.GetNamespace() != "") {
				t.Errorf("%s %s: namespace %q, want the release's %q", kind, obj.GetName(), obj.GetNamespace(), rel.namespace)
			}
		}
	}
	if len(r.set.Deployments) != 1 || len(r.set.Services) != 1 {
		t.Fatalf("want one Deployment and one Service, got %v and %v", keys(r.set.Deployments), keys(r.set.Services))
	}
	d := deployment(t, r)
	if svc := r.set.Services[d.Name]; svc == nil {
		t.Errorf("no Service named %s like the Deployment", d.Name)
	}
	spec := d.Spec.Template.Spec
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Error("automountServiceAccountToken should be false (Throttle does not talk to the API server)")
	}
	// Envoy Gateway's pod runs /bin/ratelimit, the reference's settings,
	// and may have a statsd-exporter beside it.
	c := spec.Containers[0]
	eg := slices.Equal(c.Command, []string{"/bin/ratelimit"})
	if n := len(spec.Containers); c.Name != "throttle" || n > 2 || n == 2 && !(eg && spec.Containers[1].Name == "statsd-exporter") {
		t.Fatalf("containers %d, the first %s: want throttle alone, or beside Envoy Gateway's statsd-exporter", n, c.Name)
	}
	for _, side := range spec.Containers[1:] {
		if side.SecurityContext == nil || side.SecurityContext.ReadOnlyRootFilesystem == nil || !*side.SecurityContext.ReadOnlyRootFilesystem {
			t.Errorf("container %s: readOnlyRootFilesystem must be true", side.Name)
		}
	}
	if c.SecurityContext == nil || c.SecurityContext.ReadOnlyRootFilesystem == nil || !*c.SecurityContext.ReadOnlyRootFilesystem {
		t.Error("readOnlyRootFilesystem must be true")
	}
	if want := "ghcr.io/throttle-rl/throttle:latest"; c.Image != want {
		t.Errorf("image %q, want %q (the released image's repository, the chart's appVersion)", c.Image, want)
	}

	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	env := envOf(t, r)
	if eg {
		// Unset, as Envoy Gateway leaves them: the reference's defaults,
		// which are Throttle's.
		if _, set := env["PORT"]; set || env["GRPC_PORT"].Name != "" || ports["http"] != 8080 || ports["grpc"] != 8081 {
			t.Errorf("PORT=%q GRPC_PORT=%q, container ports %v: want them unset, and ports 8080 and 8081", env["PORT"].Value, env["GRPC_PORT"].Value, ports)
		}
	} else if env["PORT"].Value != strconv.Itoa(int(ports["http"])) || env["GRPC_PORT"].Value != strconv.Itoa(int(ports["grpc"])) || ports["http"] == 0 || ports["grpc"] == 0 {
		t.Errorf("PORT=%q GRPC_PORT=%q do not match container ports %v", env["PORT"].Value, env["GRPC_PORT"].Value, ports)
	}
	names := map[string]bool{}
	for _, e := range c.Env {
		if names[e.Name] {
			t.Errorf("env %s is set twice", e.Name)
		}
		names[e.Name] = true
	}
	if _, limited := c.Resources.Limits[corev1.ResourceMemory]; limited {
		if r := env["GOMEMLIMIT"].ValueFrom; r == nil || r.ResourceFieldRef == nil || r.ResourceFieldRef.Resource != "limits.memory" {
			t.Errorf("GOMEMLIMIT must come from the container's limits.memory, got %+v", env["GOMEMLIMIT"])
		}
	}
	// A URL that may hold a password comes from a Secret; Envoy Gateway's
	// host:port (its password in REDIS_AUTH) may be plain.
	for _, k := range []string{"REDIS_URL", "DATABASE_URL", "REDIS_AUTH"} {
		if e, ok := env[k]; ok && e.Value != "" && !strings.HasPrefix(e.Value, "sqlite://") && !(eg && k == "REDIS_URL" && !strings.ContainsAny(e.Value, "@/?")) {
			t.Errorf("%s is a plain value %q; it must come from a Secret", k, e.Value)
		}
	}

	// DESCRIPTORS_DIR is where a descriptors ConfigMap is mounted.
	if dir, ok := env["DESCRIPTORS_DIR"]; ok {
		var mounted bool
		for _, vm := range c.VolumeMounts {
			for _, v := range spec.Volumes {
				if v.Name == vm.Name && v.ConfigMap != nil && vm.MountPath == dir.Value {
					mounted = true
				}
			}
		}
		if !mounted {
			t.Errorf("DESCRIPTORS_DIR=%q is not the mount path of a ConfigMap", dir.Value)
		}
	}
	// Without a database URL, SQLite writes to /data: an emptyDir, since the
	// root filesystem is read-only.
	if db := env["DATABASE_URL"]; db.ValueFrom == nil {
		if db.Value != "sqlite:///data/throttle.db" || !mountsEmptyDir(spec, c, "/data") {
			t.Errorf("DATABASE_URL %q: want sqlite:///data/throttle.db on an emptyDir at /data", db.Value)
		}
	}
	if !mountsEmptyDir(spec, c, "/tmp") {
		t.Error("no emptyDir at /tmp")
	}

	// Probes: readiness GET /ready, liveness GET /health, startup over gRPC
	// health on the gRPC port; HTTPS with REST TLS, startup GET /health
	// with gRPC TLS (the kubelet's gRPC probe has none), and TCP only with
	// REST client certificates (the kubelet presents none).
	// Envoy Gateway's pod: every probe GETs /healthcheck (checkEnvoyGatewayPod).
	if !eg {
		checkProbes(t, c, env, ports["grpc"])
	}

	// The Service: REST and gRPC, by port name, with their app protocols.
	svc := r.set.Services[d.Name]
	var seen []string
	for _, p := range svc.Spec.Ports {
		proto := map[string]string{"metrics": "http"}[p.Name]
		if proto == "" {
			proto = p.Name
		}
		if p.AppProtocol == nil || *p.AppProtocol != proto || p.TargetPort.StrVal != p.Name {
			t.Errorf("Service port %s: appProtocol %v targetPort %s, want %s and %s", p.Name, p.AppProtocol, p.TargetPort.String(), proto, p.Name)
		}
		seen = append(seen, p.Name)
	}
	want := []string{"grpc", "http"}
	if eg {
		want = []string{"grpc", "http", "metrics"}
	}
	if slices.Sort(seen); !slices.Equal(seen, want) {
		t.Errorf("Service ports %v, want %v", seen, want)
	}

	// With a PDB, some pods may always go: minAvailable is below the count
	// the Deployment or HPA keeps.
	for _, p := range r.set.PDBs {
		floor := int32(0)
		if d.Spec.Replicas != nil {
			floor = *d.Spec.Replicas
		}
		for _, h := range r.set.HPAs {
			floor = *h.Spec.MinReplicas
		}
		if p.Spec.MinAvailable == nil || int32(p.Spec.MinAvailable.IntValue()) >= floor {
			t.Errorf("PodDisruptionBudget minAvailable %v is not below %d replicas", p.Spec.MinAvailable, floor)
		}
	}
	if len(r.set.HPAs) > 0 && d.Spec.Replicas != nil {
		t.Error("the Deployment sets replicas while an HPA scales it: each upgrade would reset the count")
	}

	host := fmt.Sprintf("%s.%s.svc.cluster.local", d.Name, rel.namespace)
	if !strings.Contains(r.notes, host) {
		t.Errorf("NOTES.txt does not name the Service %s:\n%s", host, r.notes)
	}
}

// checkDefaults: memory counters, SQLite, no descriptors, HPA and PDB, and
// NOTES.txt says what that means.
func checkDefaults(t *testing.T, r rendered) {
	env := envOf(t, r)
	if _, ok := env["REDIS_URL"]; ok {
		t.Error("REDIS_URL set by default; the default is memory counters")
	}
	if _, ok := env["DESCRIPTORS_DIR"]; ok {
		t.Error("DESCRIPTORS_DIR set with no descriptors")
	}
	if got := env["FAILURE_MODE"].Value; got != "open" {
		t.Errorf("FAILURE_MODE = %q, want open", got)
	}
	if len(r.set.Secrets) != 0 || len(r.set.ConfigMaps) != 0 || len(r.set.ServiceMonitors) != 0 || len(r.set.EnvoyFilters) != 0 {
		t.Errorf("by default want no Secret, ConfigMap, ServiceMonitor or EnvoyFilter; got %v %v %d %d",
			keys(r.set.Secrets), keys(r.set.ConfigMaps), len(r.set.ServiceMonitors), len(r.set.EnvoyFilters))
	}
	if len(r.set.HPAs) != 1 || len(r.set.PDBs) != 1 {
		t.Fatalf("want an HPA and a PDB by default, got %d and %d", len(r.set.HPAs), len(r.set.PDBs))
	}
	h := r.set.HPAs[0]
	if *h.Spec.MinReplicas != 2 || h.Spec.MaxReplicas != 6 || h.Spec.Metrics[0].Resource.Name != corev1.ResourceCPU || *h.Spec.Metrics[0].Resource.Target.AverageUtilization != 70 {
		t.Errorf("HPA %d-%d on %v, want 2-6 on CPU at 70%%", *h.Spec.MinReplicas, h.Spec.MaxReplicas, h.Spec.Metrics)
	}
	c := deployment(t, r).Spec.Template.Spec.Containers[0]
	if got, want := c.Resources.Limits[corev1.ResourceMemory], resource.MustParse("256Mi"); got.Cmp(want) != 0 {
		t.Errorf("memory limit %v, want %v", got.String(), want.String())
	}
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil || c.Lifecycle.PreStop.Sleep.Seconds != 5 {
		t.Error("want a preStop sleep of 5 s (distroless: no shell)")
	}
	a := deployment(t, r).Spec.Template.Annotations
	if a["prometheus.io/scrape"] != "true" || a["prometheus.io/port"] != "8080" || a["checksum/secret"] != "" {
		t.Errorf("pod annotations %v: want the prometheus.io ones and no Secret checksum (no Secret)", a)
	}
	for _, want := range []string{"WARNING: up to 6 replicas with counters in memory", "NOTE: without database.url", "Descriptors: none."} {
		if !strings.Contains(r.notes, want) {
			t.Errorf("NOTES.txt lacks %q:\n%s", want, r.notes)
		}
	}
}

// ---- helpers ----

func deployment(t *testing.T, r rendered) *appsv1.Deployment {
	t.Helper()
	for _, d := range r.set.Deployments {
		return d
	}
	t.Fatal("no Deployment")
	return nil
}

func envOf(t *testing.T, r rendered) map[string]corev1.EnvVar {
	t.Helper()
	env := map[string]corev1.EnvVar{}
	for _, e := range deployment(t, r).Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e
	}
	return env
}

// wantSecret checks the chart's Secret holds exactly want, and that the
// pod's env takes each key from it.
func wantSecret(t *testing.T, r rendered, want map[string]string) {
	t.Helper()
	if len(r.set.Secrets) != 1 {
		t.Fatalf("want one Secret, got %v", keys(r.set.Secrets))
	}
	for _, s := range r.set.Secrets {
		got := map[string]string{}
		for k, v := range s.Data {
			got[k] = string(v)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("Secret %s data %v, want %v", s.Name, got, want)
		}
		env := envOf(t, r)
		for k := range want {
			if ref := env[k].ValueFrom; ref == nil || ref.SecretKeyRef == nil || ref.SecretKeyRef.Name != s.Name || ref.SecretKeyRef.Key != k {
				t.Errorf("env %s does not come from Secret %s key %s: %+v", k, s.Name, k, env[k])
			}
		}
	}
}

// wantRedisURL checks REDIS_URL in the chart's Secret is want, and parses it.
func wantRedisURL(t *testing.T, r rendered, want string) *url.URL {
	t.Helper()
	wantSecret(t, r, map[string]string{"REDIS_URL": want})
	u, err := url.Parse(want)
	if err != nil {
		t.Fatalf("REDIS_URL %q: %v", want, err)
	}
	return u
}

func mountsEmptyDir(spec corev1.PodSpec, c corev1.Container, path string) bool {
	for _, vm := range c.VolumeMounts {
		for _, v := range spec.Volumes {
			if v.Name == vm.Name && v.EmptyDir != nil && vm.MountPath == path && !vm.ReadOnly {
				return true
			}
		}
	}
	return false
}

func keys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func maps2Equal(a, b map[string]string) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

// ---- Throttle's settings, from the binary ----

// setting is one of `throttle serve --help`'s settings.
type setting struct{ env, def string }

var help struct {
	once     sync.Once
	settings map[string]setting
	err      error
}

// throttleSettings runs `throttle serve --help` and returns its settings by
// environment variable: the chart must set only these.
func throttleSettings(t *testing.T) map[string]setting {
	t.Helper()
	bin := throttletest.Binary(t)
	help.once.Do(func() {
		out, err := exec.Command(bin, "serve", "--help").CombinedOutput()
		if err != nil {
			help.err = fmt.Errorf("throttle serve --help: %v\n%s", err, out)
			return
		}
		help.settings = map[string]setting{}
		for _, m := range regexp.MustCompile(`\(env ([A-Z0-9_]+), default ([^)]*)\)`).FindAllStringSubmatch(string(out), -1) {
			def := m[2]
			if def == `""` {
				def = ""
			}
			help.settings[m[1]] = setting{m[1], def}
		}
		if len(help.settings) < 20 {
			help.err = fmt.Errorf("throttle serve --help lists %d settings; the parser is wrong:\n%s", len(help.settings), out)
		}
	})
	if help.err != nil {
		t.Fatal(help.err)
	}
	return help.settings
}
