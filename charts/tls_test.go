package charts

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/credentials"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/throttle-rl/throttle/internal/testkit/certtest"
	"github.com/throttle-rl/throttle/internal/testkit/redistest"
)

// tlsEverywhere turns on every part of tls.*: gRPC with mTLS and a SAN
// allow-list, HTTPS, Redis with a private CA and a client certificate.
const tlsEverywhere = `
redis: {addresses: [redis.cache.svc.cluster.local:6380], tls: true}
tls:
  grpc:
    secretName: throttle-tls
    clientCA: {secretName: envoy-ca}
    clientSANs: [spiffe://cluster.local/ns/gateways/sa/envoy, gateway.example.com]
  http: {secretName: throttle-tls}
  redis:
    ca: {secretName: redis-ca}
    clientSecretName: throttle-redis-client
serviceMonitor:
  enabled: true
  tlsConfig: {ca: {secret: {name: throttle-tls, key: ca.crt}}, serverName: throttle.default.svc}
`

// checkProbes checks the probes for the listeners' TLS (see checkCommon).
func checkProbes(t *testing.T, c corev1.Container, env map[string]corev1.EnvVar, grpcPort int32) {
	t.Helper()
	_, tcpOnly := env["HTTP_CLIENT_TLS_CACERT"]
	scheme := corev1.URISchemeHTTP
	if _, ok := env["HTTP_TLS_CERT"]; ok {
		scheme = corev1.URISchemeHTTPS
	}
	wantGet := func(name string, p *corev1.Probe, path string) {
		t.Helper()
		switch {
		case p == nil:
			t.Errorf("no %s probe", name)
		case tcpOnly:
			if p.TCPSocket == nil || p.TCPSocket.Port != intstr.FromString("http") || p.HTTPGet != nil {
				t.Errorf("%s probe %+v: with client certificates on REST, want a TCP connection to port http", name, p.ProbeHandler)
			}
		case p.HTTPGet == nil || p.HTTPGet.Path != path || p.HTTPGet.Port.StrVal != "http" || p.HTTPGet.Scheme != scheme:
			t.Errorf("%s probe %+v: want %s GET %s on port http", name, p.ProbeHandler, scheme, path)
		}
	}
	wantGet("readiness", c.ReadinessProbe, "/ready")
	if p := c.ReadinessProbe; p != nil && p.TimeoutSeconds < 3 {
		t.Errorf("readinessProbe timeoutSeconds %d: /ready may take 2.5 s (the database 2 s, Redis 500 ms), want at least 3", p.TimeoutSeconds)
	}
	wantGet("liveness", c.LivenessProbe, "/health")
	if env["GRPC_SERVER_USE_TLS"].Value == "true" {
		wantGet("startup", c.StartupProbe, "/health")
	} else if p := c.StartupProbe; p == nil || p.GRPC == nil || p.GRPC.Port != grpcPort {
		t.Errorf("startupProbe must be gRPC health on the gRPC port %d", grpcPort)
	}
}

// tlsMounts are the Secret volumes of the pod by mount path: Secret name,
// read-only and whole (a subPath mount would never see a renewed file).
func tlsMounts(t *testing.T, r rendered) map[string]string {
	t.Helper()
	spec := deployment(t, r).Spec.Template.Spec
	out := map[string]string{}
	for _, vm := range spec.Containers[0].VolumeMounts {
		for _, v := range spec.Volumes {
			if v.Name != vm.Name || v.Secret == nil {
				continue
			}
			if !vm.ReadOnly || vm.SubPath != "" || len(v.Secret.Items) != 0 {
				t.Errorf("volume %s: mounted read-only %v, subPath %q, items %v; want read-only, whole", v.Name, vm.ReadOnly, vm.SubPath, v.Secret.Items)
			}
			out[vm.MountPath] = v.Secret.SecretName
		}
	}
	return out
}

func checkTLSEverywhere(t *testing.T, r rendered) {
	wantRedisURL(t, r, "rediss://redis.cache.svc.cluster.local:6380/0")
	env := envOf(t, r)
	for name, want := range map[string]string{
		"GRPC_SERVER_USE_TLS":    "true",
		"GRPC_SERVER_TLS_CERT":   "/etc/throttle/tls/grpc/tls.crt",
		"GRPC_SERVER_TLS_KEY":    "/etc/throttle/tls/grpc/tls.key",
		"GRPC_CLIENT_TLS_CACERT": "/etc/throttle/tls/grpc-client-ca/ca.crt",
		"GRPC_CLIENT_TLS_SAN":    "spiffe://cluster.local/ns/gateways/sa/envoy,gateway.example.com",
		"HTTP_TLS_CERT":          "/etc/throttle/tls/http/tls.crt",
		"HTTP_TLS_KEY":           "/etc/throttle/tls/http/tls.key",
		"REDIS_TLS_CACERT":       "/etc/throttle/tls/redis-ca/ca.crt",
		"REDIS_TLS_CLIENT_CERT":  "/etc/throttle/tls/redis-client/tls.crt",
		"REDIS_TLS_CLIENT_KEY":   "/etc/throttle/tls/redis-client/tls.key",
	} {
		if got := env[name].Value; got != want {
			t.Errorf("env %s = %q, want %q", name, got, want)
		}
	}
	if _, ok := env["HTTP_CLIENT_TLS_CACERT"]; ok {
		t.Error("HTTP_CLIENT_TLS_CACERT without tls.http.clientCA")
	}
	want := map[string]string{
		"/etc/throttle/tls/grpc": "throttle-tls", "/etc/throttle/tls/grpc-client-ca": "envoy-ca", "/etc/throttle/tls/http": "throttle-tls",
		"/etc/throttle/tls/redis-ca": "redis-ca", "/etc/throttle/tls/redis-client": "throttle-redis-client",
	}
	if got := tlsMounts(t, r); fmtMap(got) != fmtMap(want) {
		t.Errorf("Secret mounts %v, want %v", got, want)
	}
	if a := deployment(t, r).Spec.Template.Annotations; a["prometheus.io/scheme"] != "https" {
		t.Errorf("pod annotations %v: want prometheus.io/scheme https", a)
	}
	m := r.set.ServiceMonitors[0]
	if e := m.Spec.Endpoints[0]; e.Scheme == nil || strings.ToLower(string(*e.Scheme)) != "https" || e.TLSConfig == nil || e.TLSConfig.CA.Secret == nil ||
		e.TLSConfig.CA.Secret.Name != "throttle-tls" || e.TLSConfig.ServerName == nil || *e.TLSConfig.ServerName != "throttle.default.svc" {
		t.Errorf("ServiceMonitor endpoint %+v: want https with the tlsConfig given", e)
	}
}

func checkRESTClientCertificates(t *testing.T, r rendered) {
	env := envOf(t, r)
	if got := env["HTTP_CLIENT_TLS_CACERT"].Value; got != "/etc/throttle/tls/http-client-ca/ca.crt" {
		t.Errorf("HTTP_CLIENT_TLS_CACERT = %q", got)
	}
	if _, ok := env["GRPC_SERVER_USE_TLS"]; ok {
		t.Error("GRPC_SERVER_USE_TLS without tls.grpc")
	}
	want := map[string]string{"/etc/throttle/tls/http": "throttle-tls", "/etc/throttle/tls/http-client-ca": "throttle-tls"}
	if got := tlsMounts(t, r); fmtMap(got) != fmtMap(want) {
		t.Errorf("Secret mounts %v, want %v", got, want)
	}
}

func fmtMap(m map[string]string) string {
	var b strings.Builder
	for _, k := range keys(m) {
		b.WriteString(k + "=" + m[k] + " ")
	}
	return b.String()
}

// podTLS is what TestPodRuns needs of a pod serving TLS: its values, the
// Secrets they name (the user's, made here), and clients that trust its CA
// and present an allowed certificate.
type podTLS struct {
	values  string
	secrets map[string]*corev1.Secret
	https   bool
	http    *http.Client
	grpc    credentials.TransportCredentials
}

// newPodTLS starts a Redis serving TLS only and turns every part of tls.*
// on, with mTLS on both ports: a CA, Throttle's serving pair and its client
// pair for Redis in Secrets, Envoy's and an app's client pairs.
func newPodTLS(t *testing.T) podTLS {
	t.Helper()
	ca := certtest.NewCA(t, "pod CA")
	redisFiles := ca.Localhost(t).Write(t, t.TempDir(), ca)
	redisClient := ca.Issue(t, certtest.Leaf{DNS: []string{"throttle"}})
	rds := redistest.StartTLS(t, redistest.TLS{Cert: redisFiles.Cert, Key: redisFiles.Key, CA: redisFiles.CA,
		Client: certtest.ClientTLS(t, ca, "127.0.0.1", &redisClient)})
	secret := func(name string, p certtest.Pair) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{"tls.crt": p.CertPEM, "tls.key": p.KeyPEM, "ca.crt": ca.PEM}}
	}
	envoy := ca.Issue(t, certtest.Leaf{URIs: []string{"spiffe://cluster.local/ns/gateways/sa/envoy"}})
	app := ca.Issue(t, certtest.Leaf{DNS: []string{"app.example.com"}})
	return podTLS{
		values: fmt.Sprintf(`
redis: {addresses: [%q], tls: true}
tls:
  grpc: {secretName: throttle-tls, clientCA: {secretName: throttle-tls}, clientSANs: [spiffe://cluster.local/ns/gateways/sa/envoy]}
  http: {secretName: throttle-tls, clientCA: {secretName: throttle-tls}}
  redis: {ca: {secretName: throttle-tls}, clientSecretName: throttle-redis-client}
`, rds.Addr()),
		secrets: map[string]*corev1.Secret{"throttle-tls": secret("throttle-tls", ca.Localhost(t)), "throttle-redis-client": secret("throttle-redis-client", redisClient)},
		https:   true,
		http:    &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: certtest.ClientTLS(t, ca, "localhost", &app)}},
		grpc:    credentials.NewTLS(certtest.ClientTLS(t, ca, "localhost", &envoy)),
	}
}
