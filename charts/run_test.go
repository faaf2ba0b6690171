package charts

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/throttle-rl/throttle/internal/testkit/redistest"
	"github.com/throttle-rl/throttle/internal/testkit/throttletest"
)

// The pod the chart describes runs: the rendered container's environment,
// resolved as the kubelet would (Secret keys, the memory limit, mounted
// ConfigMaps and emptyDirs in temp folders), starts the real binary against
// a real Redis (single with a password to escape, Sentinel, Cluster, all
// given as parts) and PostgreSQL; the probes the Deployment declares answer,
// and Envoy's rate-limit call is limited by the chart's descriptors through
// that Redis.
func TestPodRuns(t *testing.T) {
	edge := `descriptors.files.edge\.yaml=../envoy/descriptors/edge.yaml`
	tests := []struct {
		name string
		in   func(t *testing.T) input
		// tls, when set, makes the values of a pod serving TLS (put in
		// in's), the Secrets they name and the clients that go with them.
		tls func(t *testing.T) podTLS
	}{
		{"single Redis by URL, PostgreSQL", func(t *testing.T) input {
			return input{set: []string{
				"redis.url=" + redistest.SharedURL(t),
				"database.url=" + testDatabaseURL(t),
			}, setFile: []string{edge}}
		}, nil},
		{"single Redis by parts, with a password to escape", func(t *testing.T) input {
			const pass = "p@ss w:rd/+%"
			r := redistest.Start(t, "--requirepass", pass)
			return input{values: fmt.Sprintf("redis: {addresses: [%q], password: %q, db: 3}", r.Addr(), pass), setFile: []string{edge}}
		}, nil},
		{"Redis Sentinel by parts, with passwords", func(t *testing.T) input {
			const masterPass, sentinelPass = "m@ster:pw", "s/pw+"
			master := redistest.Start(t, "--requirepass", masterPass)
			s := redistest.StartSentinel(t, master, "throttle-master",
				"sentinel auth-pass throttle-master "+masterPass, "requirepass "+sentinelPass)
			return input{values: fmt.Sprintf(`
redis:
  mode: sentinel
  addresses: [%q]
  password: %q
  sentinel: {masterName: throttle-master, password: %q}
`, s, masterPass, sentinelPass), setFile: []string{edge}}
		}, nil},
		{"Redis Cluster by parts", func(t *testing.T) input {
			addrs := redistest.StartCluster(t)
			return input{values: fmt.Sprintf("redis: {mode: cluster, addresses: [%q, %q, %q]}", addrs[0], addrs[1], addrs[2]), setFile: []string{edge}}
		}, nil},
		{"TLS and mTLS on both ports, Redis over TLS with a client certificate", func(t *testing.T) input {
			return input{setFile: []string{edge}}
		}, newPodTLS},
		{"every setting, memory counters, SQLite", func(t *testing.T) input {
			// The Secret and ConfigMap everySetting names are the user's:
			// plain values here. No collector: tracing goes to a closed
			// loopback port.
			values := strings.NewReplacer(
				"valueFrom: {secretKeyRef: {name: tracing, key: headers}}", "value: x-api-key=k",
				"extraEnvFrom:\n  - configMapRef: {name: throttle-extra}\n", "",
			).Replace(everySetting)
			return input{values: values, set: []string{
				"config.otelExporterOtlpEndpoint=http://127.0.0.1:9",
			}, setFile: []string{edge}}
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.in(t)
			pt := podTLS{http: http.DefaultClient, grpc: insecure.NewCredentials()}
			if tt.tls != nil {
				pt = tt.tls(t)
				in.values = pt.values
			}
			r := render(t, defaultRelease, in)
			for name, sec := range pt.secrets {
				r.set.Secrets[name] = sec
			}
			env := podEnv(t, r)
			var s *throttletest.Server
			if pt.https {
				s = throttletest.StartTLS(t, pt.http, env...)
			} else {
				s = throttletest.Start(t, env...)
			}

			c := deployment(t, r).Spec.Template.Spec.Containers[0]
			for name, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
				checkProbe(t, name, p, s, pt)
			}
			checkLimited(t, s, pt)
		})
	}
}

// TestReadinessWithRedisDown: the chart's probes, run as the kubelet runs
// them (path, port, timeoutSeconds), on the pod with its Redis stopped:
// readiness passes under the default failureMode, open (the pod answers by
// policy, so it stays in the Service), and fails under closed; liveness
// passes under both (a dead Redis never restarts a pod).
func TestReadinessWithRedisDown(t *testing.T) {
	for _, tt := range []struct {
		mode string
		want int
	}{{"open", http.StatusOK}, {"closed", http.StatusServiceUnavailable}} {
		t.Run(tt.mode, func(t *testing.T) {
			redis := redistest.Start(t)
			r := render(t, defaultRelease, input{set: []string{"redis.url=" + redis.URL(), "config.failureMode=" + tt.mode}})
			s := throttletest.Start(t, podEnv(t, r)...)
			c := deployment(t, r).Spec.Template.Spec.Containers[0]
			checkProbe(t, "readiness", c.ReadinessProbe, s, podTLS{http: http.DefaultClient, grpc: insecure.NewCredentials()})

			redis.Stop()
			for range 3 {
				if got := probeOnce(t, c.ReadinessProbe, s); got != tt.want {
					t.Errorf("readiness probe with Redis stopped: %d, want %d", got, tt.want)
				}
				if got := probeOnce(t, c.LivenessProbe, s); got != http.StatusOK {
					t.Errorf("liveness probe with Redis stopped: %d, want 200", got)
				}
			}
		})
	}
}

// probeOnce runs an HTTP probe once, within its timeoutSeconds (the
// kubelet's default, 1, when unset), and returns the status; 0 when no
// reply came in time.
func probeOnce(t *testing.T, p *corev1.Probe, s *throttletest.Server) int {
	t.Helper()
	if p.HTTPGet == nil || p.HTTPGet.Port.StrVal != "http" {
		t.Fatalf("probe %+v: want httpGet on port http", p)
	}
	timeout := time.Duration(max(p.TimeoutSeconds, 1)) * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+p.HTTPGet.Path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// podEnv is the container's environment as the kubelet gives it, as
// NAME=value, with PORT and GRPC_PORT left to throttletest (free loopback
// ports) and the pod's mounts made temp folders.
func podEnv(t *testing.T, r rendered) []string {
	t.Helper()
	d := deployment(t, r)
	spec := d.Spec.Template.Spec
	c := spec.Containers[0]

	// Each mount becomes a temp folder: ConfigMaps and Secrets written
	// out, emptyDirs empty.
	mounts := map[string]string{}
	for _, vm := range c.VolumeMounts {
		dir := t.TempDir()
		for _, v := range spec.Volumes {
			if v.Name != vm.Name {
				continue
			}
			files := map[string][]byte{}
			switch {
			case v.ConfigMap != nil:
				cm := r.set.ConfigMaps[v.ConfigMap.Name]
				if cm == nil {
					t.Fatalf("volume %s: ConfigMap %s is not rendered", v.Name, v.ConfigMap.Name)
				}
				for name, data := range cm.Data {
					files[name] = []byte(data)
				}
			case v.Secret != nil:
				sec := r.set.Secrets[v.Secret.SecretName]
				if sec == nil {
					t.Fatalf("volume %s: Secret %s is neither rendered nor made by the test", v.Name, v.Secret.SecretName)
				}
				files = sec.Data
			}
			for name, data := range files {
				if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
					t.Fatal(err)
				}
			}
		}
		mounts[vm.MountPath] = dir
	}

	var env []string
	for _, e := range c.Env {
		v := e.Value
		switch {
		case e.Name == "PORT" || e.Name == "GRPC_PORT":
			continue
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			sec := r.set.Secrets[ref.Name]
			if sec == nil {
				t.Fatalf("env %s: Secret %s is not rendered", e.Name, ref.Name)
			}
			v = string(sec.Data[ref.Key])
		case e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil:
			q, ok := c.Resources.Limits[corev1.ResourceName(strings.TrimPrefix(e.ValueFrom.ResourceFieldRef.Resource, "limits."))]
			if !ok {
				t.Fatalf("env %s: no %s", e.Name, e.ValueFrom.ResourceFieldRef.Resource)
			}
			v = strconv.FormatInt(q.Value(), 10) // the kubelet's form: bytes
		case e.ValueFrom != nil:
			t.Fatalf("env %s: valueFrom %+v is not resolved by this test", e.Name, e.ValueFrom)
		}
		for path, dir := range mounts {
			if v == path || strings.HasPrefix(v, path+"/") || strings.HasPrefix(v, "sqlite://"+path+"/") {
				v = strings.Replace(v, path, dir, 1)
				break
			}
		}
		env = append(env, e.Name+"="+v)
	}
	return env
}

// checkProbe runs a probe of the Deployment against the running server, as
// the kubelet would: GET the path on the named port (HTTPS without
// verifying the certificate, as the kubelet does), a TCP connection, or
// gRPC health.
func checkProbe(t *testing.T, name string, p *corev1.Probe, s *throttletest.Server, pt podTLS) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	switch {
	case p.TCPSocket != nil:
		if p.TCPSocket.Port.StrVal != "http" {
			t.Fatalf("%s probe on port %s; this test maps only http", name, p.TCPSocket.Port.String())
		}
		c, err := net.Dial("tcp", strings.TrimPrefix(strings.TrimPrefix(s.URL, "https://"), "http://"))
		if err != nil {
			t.Fatalf("%s probe: %v", name, err)
		}
		c.Close()
	case p.HTTPGet != nil:
		if p.HTTPGet.Port.StrVal != "http" {
			t.Fatalf("%s probe on port %s; this test maps only http", name, p.HTTPGet.Port.String())
		}
		if scheme := strings.ToLower(string(p.HTTPGet.Scheme)); !strings.HasPrefix(s.URL, scheme+"://") {
			t.Fatalf("%s probe GETs over %s, but the server serves %s", name, p.HTTPGet.Scheme, s.URL)
		}
		kubelet := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		// /ready may need a moment after /health (migrations, first Redis call).
		var status int
		for {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+p.HTTPGet.Path, nil)
			resp, err := kubelet.Do(req)
			if err == nil {
				status = resp.StatusCode
				resp.Body.Close()
				if status == http.StatusOK {
					return
				}
			}
			if ctx.Err() != nil {
				t.Fatalf("%s probe GET %s: status %d, err %v", name, p.HTTPGet.Path, status, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	case p.GRPC != nil:
		conn := dial(t, s, pt)
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("%s probe: gRPC health %v, %v; want SERVING", name, resp.GetStatus(), err)
		}
	default:
		t.Fatalf("%s probe: no handler this test runs", name)
	}
}

// checkLimited sends Envoy's call for domain edge as one new user: 10 a
// minute pass (envoy/descriptors/edge.yaml, from the chart's ConfigMap),
// the 11th is over the limit.
func checkLimited(t *testing.T, s *throttletest.Server, pt podTLS) {
	t.Helper()
	client := rlsv3.NewRateLimitServiceClient(dial(t, s, pt))
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{{
		Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "generic_key", Value: "api"}, {Key: "user_id", Value: "chart-" + uuid.NewString()}},
	}}}
	for i := 1; i <= 11; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := client.ShouldRateLimit(ctx, req)
		cancel()
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		want := rlsv3.RateLimitResponse_OK
		if i == 11 {
			want = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if got := resp.GetStatuses()[0].GetCode(); got != want {
			t.Fatalf("call %d: %v, want %v", i, got, want)
		}
	}
}

func dial(t *testing.T, s *throttletest.Server, pt podTLS) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(s.GRPCAddr, grpc.WithTransportCredentials(pt.grpc))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func testDatabaseURL(t *testing.T) string {
	t.Helper()
	u := os.Getenv("THROTTLE_TEST_DATABASE_URL")
	if u == "" {
		t.Fatal("THROTTLE_TEST_DATABASE_URL is not set: run the tests via scripts/with-test-services.sh (make test)")
	}
	return u
}
