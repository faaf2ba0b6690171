package charts

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
)

// Bad values fail the render, and the message names the value: the schema
// (values.schema.json) catches what one value alone decides, the templates
// what depends on several.
func TestBadValues(t *testing.T) {
	tests := []struct {
		name string
		in   input
		want []string // each must be in the error
	}{
		{"unknown failure mode", input{set: []string{"config.failureMode=sideways"}}, []string{"/config/failureMode", "open", "closed", "local"}},
		{"negative replica count", input{set: []string{"replicaCount=-1"}}, []string{"/replicaCount", "-1"}},
		{"replica count not a number", input{values: "replicaCount: two"}, []string{"/replicaCount", "string"}},
		{"misspelled top-level value", input{set: []string{"replicaCont=3"}}, []string{"replicaCont"}},
		{"misspelled nested value", input{set: []string{"redis.adresses={redis:6379}"}}, []string{"/redis", "adresses"}},
		{"unknown redis mode", input{set: []string{"redis.mode=master"}}, []string{"/redis/mode"}},
		{"redis address without a port", input{set: []string{"redis.addresses={redis}"}}, []string{"/redis/addresses/0", "redis"}},
		{"redis URL of another scheme", input{set: []string{"redis.url=http://redis:6379"}}, []string{"/redis/url"}},
		{"sentinel without a master name", input{values: "redis: {mode: sentinel, addresses: [s:26379]}"}, []string{"/redis/sentinel/masterName"}},
		{"URL and parts both", input{values: "redis: {url: redis://r:6379/0, addresses: [r:6379]}"}, []string{"redis.url and redis.addresses are both set"}},
		{"cluster with a database", input{values: "redis: {mode: cluster, addresses: [n:6379], db: 3}"}, []string{"redis.db is 3", "cluster"}},
		{"single with two addresses", input{values: "redis: {addresses: [a:6379, b:6379]}"}, []string{"redis.addresses has 2 entries"}},
		{"password without addresses", input{set: []string{"redis.password=pw"}}, []string{"redis.addresses is empty"}},
		{"database URL of another scheme", input{set: []string{"database.url=mysql://db/throttle"}}, []string{"/database/url"}},
		{"bad duration", input{set: []string{"config.cacheRefreshInterval=2 seconds"}}, []string{"/config/cacheRefreshInterval"}},
		{"unknown log level", input{set: []string{"config.logLevel=verbose"}}, []string{"/config/logLevel"}},
		{"sampler ratio above 1", input{values: `config: {otelTracesSamplerArg: "1.5"}`}, []string{"/config/otelTracesSamplerArg"}},
		{"cache size negative", input{set: []string{"config.localCacheSizeInBytes=-1"}}, []string{"/config/localCacheSizeInBytes"}},
		{"port out of range", input{set: []string{"containerPorts.grpc=70000"}}, []string{"/containerPorts/grpc", "65,535"}},
		{"min replicas above max", input{values: "autoscaling: {minReplicas: 5, maxReplicas: 3}"}, []string{"autoscaling.minReplicas (5) is above autoscaling.maxReplicas (3)"}},
		{"PDB that blocks every drain", input{values: "autoscaling: {enabled: false}\nreplicaCount: 2\npodDisruptionBudget: {minAvailable: 2}"}, []string{"podDisruptionBudget.minAvailable (2) must be below replicaCount (2)"}},
		{"descriptor file not YAML by name", input{values: "descriptors: {files: {edge.txt: 'domain: edge'}}"}, []string{"descriptors.files.edge.txt", "*.yaml"}},
		{"descriptor file not YAML", input{values: "descriptors: {files: {edge.yaml: 'domain: [edge'}}"}, []string{"descriptors.files.edge.yaml is not YAML"}},
		{"descriptor file without a domain", input{values: "descriptors: {files: {edge.yaml: 'descriptors: []'}}"}, []string{"descriptors.files.edge.yaml has no domain"}},
		{"descriptors given twice", input{values: "descriptors: {files: {edge.yaml: 'domain: edge'}, existingConfigMap: mine}"}, []string{"descriptors.files and descriptors.existingConfigMap are both set"}},
		{"extraEnv repeats a chart setting", input{values: "extraEnv: [{name: REDIS_URL, value: 'redis://x:6379'}]"}, []string{"extraEnv[0] sets REDIS_URL", "from redis"}},
		{"extraEnv sets GOMEMLIMIT too", input{values: "extraEnv: [{name: GOMEMLIMIT, value: 100MiB}]"}, []string{"extraEnv[0] sets GOMEMLIMIT", "resources.limits.memory"}},
		{"redis option the parts set", input{values: "redis: {addresses: [r:6379], options: {password: x}}"}, []string{"redis.options.password"}},
		{"extraEnv repeats a config setting", input{values: "extraEnv: [{name: GOGC, value: '100'}, {name: FAILURE_MODE, value: closed}]"}, []string{"extraEnv[1] sets FAILURE_MODE", "config.failureMode"}},
		{"extraEnv entry without a name", input{values: "extraEnv: [{value: x}]"}, []string{"/extraEnv/0", "name"}},
		{"headless LoadBalancer", input{values: "service: {type: LoadBalancer, headless: true}"}, []string{"service.headless needs service.type ClusterIP"}},
		{"Envoy duration in Go's form", input{values: "istio: {envoyFilter: {enabled: true, timeout: 50ms}}"}, []string{"/istio/envoyFilter/timeout", "50ms"}},
		{"unknown Envoy header mode", input{values: "istio: {envoyFilter: {enableXRatelimitHeaders: DRAFT_VERSION_99}}"}, []string{"/istio/envoyFilter/enableXRatelimitHeaders"}},
		{"no rate-limit actions", input{values: "istio: {envoyFilter: {rateLimits: []}}"}, []string{"/istio/envoyFilter/rateLimits"}},
		{"ServiceMonitor interval", input{values: "serviceMonitor: {interval: 30 seconds}"}, []string{"/serviceMonitor/interval"}},
		{"operator key of a client", input{set: []string{"adminKey.value=thr_0123456789abcdef"}}, []string{"/adminKey/value"}},
		{"operator key too short", input{set: []string{"adminKey.value=short"}}, []string{"/adminKey/value"}},
		{"key prefix with a hash tag", input{set: []string{"config.cacheKeyPrefix=a{b}"}}, []string{"/config/cacheKeyPrefix"}},
		{"client SANs without a client CA", input{values: "tls: {grpc: {secretName: t, clientSANs: [a.example.com]}}"}, []string{"tls.grpc.clientSANs needs tls.grpc.clientCA.secretName"}},
		{"client CA without TLS", input{values: "tls: {http: {clientCA: {secretName: ca}}}"}, []string{"tls.http.clientCA is set but tls.http.secretName is empty"}},
		{"gRPC client CA without TLS", input{values: "tls: {grpc: {clientCA: {secretName: ca}}}"}, []string{"tls.grpc.clientCA or tls.grpc.clientSANs is set but tls.grpc.secretName is empty"}},
		{"Redis TLS files without rediss", input{values: "redis: {addresses: [r:6379]}\ntls: {redis: {ca: {secretName: redis-ca}}}"}, []string{"tls.redis is set but REDIS_URL is not rediss://"}},
		{"Istio gateway to a TLS gRPC port", input{values: "istio: {envoyFilter: {enabled: true}}\ntls: {grpc: {secretName: t}}"}, []string{"istio.envoyFilter and tls.grpc are both set"}},
		{"Secret name not a name", input{set: []string{"tls.http.secretName=My Secret"}}, []string{"/tls/http/secretName"}},
		{"misspelled TLS value", input{set: []string{"tls.grpc.clientSAN=x"}}, []string{"/tls/grpc", "clientSAN"}},
		{"extraEnv sets a TLS file", input{values: "extraEnv: [{name: HTTP_TLS_CERT, value: /x}]"}, []string{"extraEnv[0] sets HTTP_TLS_CERT", "tls.http"}},
		{"unknown Envoy Gateway stats", input{set: []string{"envoyGateway.stats=graphite"}}, []string{"/envoyGateway/stats", "prometheus", "statsd"}},
		{"Envoy Gateway Redis as a URL", input{set: []string{"envoyGateway.redis.url=redis://r:6379"}}, []string{"/envoyGateway/redis/url"}},
		{"xDS server without a port", input{set: []string{"envoyGateway.xds.serverURL=envoy-gateway"}}, []string{"/envoyGateway/xds/serverURL"}},
		{"certs Secret not a name", input{set: []string{"envoyGateway.certsSecret=Envoy Rate Limit"}}, []string{"/envoyGateway/certsSecret"}},
		{"misspelled Envoy Gateway value", input{set: []string{"envoyGateway.enable=true"}}, []string{"/envoyGateway", "enable"}},
		{"statsd-exporter image not an image", input{set: []string{"envoyGateway.statsdExporter.image=Prom/statsd exporter"}}, []string{"/envoyGateway/statsdExporter/image"}},
		{"Envoy Gateway Redis while off", input{set: []string{"envoyGateway.redis.url=r:6379"}}, []string{"envoyGateway.redis is set but envoyGateway.enabled is false"}},
		{"Envoy Gateway with redis.url", input{files: []string{envoyGatewayValues}, set: []string{"redis.url=redis://r:6379/0"}}, []string{"envoyGateway.enabled takes Redis from envoyGateway.redis"}},
		{"Envoy Gateway Redis twice", input{files: []string{envoyGatewayValues}, set: []string{"envoyGateway.redis.existingSecret.name=redis"}}, []string{"envoyGateway.redis.url and envoyGateway.redis.existingSecret are both set"}},
		{"Envoy Gateway Redis password without Redis", input{files: []string{envoyGatewayValues}, set: []string{"envoyGateway.redis.url=", "envoyGateway.redis.auth.existingSecret.name=redis-auth"}}, []string{"envoyGateway.redis.auth is set but there is no Redis"}},
		{"Envoy Gateway with descriptor files", input{files: []string{envoyGatewayValues}, values: "descriptors: {files: {edge.yaml: 'domain: edge'}}"}, []string{"descriptors.files", "xDS"}},
		{"Envoy Gateway with tls.grpc", input{files: []string{envoyGatewayValues}, set: []string{"tls.grpc.secretName=throttle-tls"}}, []string{"envoyGateway.certsSecret", "leave tls.* empty"}},
		{"Envoy Gateway on other ports", input{files: []string{envoyGatewayValues}, set: []string{"containerPorts.grpc=9091"}}, []string{"envoyGateway.enabled needs containerPorts http 8080 and grpc 8081", "9091"}},
		{"Envoy Gateway and an Istio gateway", input{files: []string{envoyGatewayValues}, set: []string{"istio.envoyFilter.enabled=true"}}, []string{"envoyGateway.enabled and istio.envoyFilter.enabled are both set"}},
		{"Envoy Gateway and force start twice", input{files: []string{envoyGatewayValues}, set: []string{"config.forceStartWithoutInitialConfig=true"}}, []string{"config.forceStartWithoutInitialConfig", "FORCE_START_WITHOUT_INITIAL_CONFIG=true itself"}},
		{"extraEnv repeats an Envoy Gateway setting", input{files: []string{envoyGatewayValues}, values: "extraEnv: [{name: CONFIG_GRPC_XDS_NODE_ID, value: other}]"}, []string{"extraEnv[0] sets CONFIG_GRPC_XDS_NODE_ID", "envoyGateway"}},
		{"extraEnv repeats the operator key", input{values: "extraEnv: [{name: ADMIN_API_KEY, value: operator-key-0123456789}]"}, []string{"extraEnv[0] sets ADMIN_API_KEY", "adminKey"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := renderErr(t, tt.in)
			if err == nil {
				t.Fatalf("rendered with %s", tt.in)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not name %q:\n%v", w, err)
				}
			}
		})
	}
}

// The chart sets only Throttle's own settings (those `throttle serve --help`
// lists), every config key of values.yaml is one, everySetting sets them
// all, and the defaults values.yaml states are Throttle's.
func TestSettings(t *testing.T) {
	settings := throttleSettings(t)
	ch := loadChart(t)
	config, ok := ch.Values["config"].(map[string]any)
	if !ok || len(config) == 0 {
		t.Fatal("values.yaml has no config map")
	}

	r := render(t, defaultRelease, input{values: everySetting})
	env := envOf(t, r)
	for key, def := range config {
		name := screamingSnake(key)
		s, ok := settings[name]
		if !ok {
			t.Errorf("config.%s is %s, which `throttle serve --help` does not list", key, name)
			continue
		}
		if _, ok := env[name]; !ok {
			t.Errorf("config.%s: everySetting does not set it, or the chart does not pass it as %s", key, name)
		}
		if d := fmt.Sprint(def); d != "" && d != s.def {
			t.Errorf("config.%s defaults to %q in values.yaml, but %s defaults to %q", key, d, name, s.def)
		}
	}
	ports, _ := ch.Values["containerPorts"].(map[string]any)
	if fmt.Sprint(ports["http"]) != settings["PORT"].def || fmt.Sprint(ports["grpc"]) != settings["GRPC_PORT"].def {
		t.Errorf("containerPorts %v, want Throttle's PORT %s and GRPC_PORT %s", ports, settings["PORT"].def, settings["GRPC_PORT"].def)
	}

	// Every value set: each variable is a setting, one of the reference
	// service's (which Throttle takes), one Envoy Gateway sets (envoyGateway),
	// Go's GOMEMLIMIT, or one the values gave in extraEnv.
	reference := referenceSettings(t)
	f := loadEGFacts(t)
	egEnv := union(f.Env, f.Stats["prometheus"].Env, f.Stats["statsd"].Env)
	for _, vs := range valueSets {
		r := render(t, vs.rel, vs.in)
		for name := range envOf(t, r) {
			_, known := settings[name]
			ref := reference[name]
			_, eg := egEnv[name]
			if !known && !ref && !eg && name != "GOMEMLIMIT" && !strings.Contains(vs.in.values, "name: "+name) {
				t.Errorf("%s: env %s is not one of Throttle's settings", vs.name, name)
			}
		}
	}
}

// referenceSettings is every setting of the reference service, by name:
// cmd/throttle/testdata/reference-settings.txt, the list Throttle's
// settings table is checked against.
func referenceSettings(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("../cmd/throttle/testdata/reference-settings.txt")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		name, _, _ := strings.Cut(line, " ")
		names[name] = true
	}
	if len(names) < 100 {
		t.Fatalf("reference-settings.txt: %d settings; the reference has over 100", len(names))
	}
	return names
}

// screamingSnake is the chart's config key to variable rule (sprig's
// snakecase, upper-cased) for the keys values.yaml uses: camelCase words.
func screamingSnake(key string) string {
	return strings.ToUpper(regexp.MustCompile(`([a-z0-9])([A-Z])`).ReplaceAllString(key, "${1}_${2}"))
}

// helm lint finds nothing to warn about for any value set (the first has
// the default values).
func TestLint(t *testing.T) {
	kv, err := common.ParseKubeVersion(kubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			vals, err := vs.in.parse()
			if err != nil {
				t.Fatal(err)
			}
			res := lint.RunAll(chartDir, vals, vs.rel.namespace, lint.WithKubeVersion(kv))
			for _, m := range res.Messages {
				if m.Severity >= support.WarningSev {
					t.Errorf("helm lint: %v", m)
				} else {
					t.Logf("helm lint: %v", m)
				}
			}
		})
	}
}

// docs/helm.md shows a working command: its --set values render, and
// REDIS_URL is the one given.
func TestHelmDocCommand(t *testing.T) {
	readme, err := os.ReadFile("../docs/helm.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^helm install throttle \./charts/throttle((?: *\\\n)?(?: +--set [^ \n]+(?: *\\\n)?)+)`).FindSubmatch(readme)
	if m == nil {
		t.Fatal("docs/helm.md has no `helm install throttle ./charts/throttle --set …` line")
	}
	var sets []string
	for _, f := range strings.Fields(strings.ReplaceAll(string(m[1]), "\\\n", " ")) {
		if f != "--set" {
			sets = append(sets, strings.Trim(f, `'"`))
		}
	}
	if !slices.ContainsFunc(sets, func(s string) bool { return strings.HasPrefix(s, "redis.url=") }) {
		t.Fatalf("docs/helm.md's command sets %v, no redis.url", sets)
	}
	r := render(t, defaultRelease, input{set: sets})
	checkCommon(t, defaultRelease, nil, r)
	for _, s := range sets {
		if v, ok := strings.CutPrefix(s, "redis.url="); ok {
			wantSecretKey(t, r, "REDIS_URL", v)
		}
	}
}

func wantSecretKey(t *testing.T, r rendered, key, want string) {
	t.Helper()
	for _, s := range r.set.Secrets {
		if got := string(s.Data[key]); got != want {
			t.Errorf("Secret %s %s = %q, want %q", s.Name, key, got, want)
		}
		return
	}
	t.Errorf("no Secret holds %s", key)
}
