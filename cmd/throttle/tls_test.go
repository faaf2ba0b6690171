package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
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
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/throttle-rl/throttle/internal/testkit/certtest"
	"github.com/throttle-rl/throttle/internal/testkit/throttletest"
)

func TestTLSSettings(t *testing.T) {
	for _, tt := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"GRPC_SERVER_USE_TLS": "true"}, "GRPC_SERVER_USE_TLS: true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY"},
		{map[string]string{"GRPC_SERVER_USE_TLS": "yes please"}, `GRPC_SERVER_USE_TLS: "yes please" is not true or false`},
		{map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "c.pem"}, "GRPC_SERVER_TLS_KEY: empty, but GRPC_SERVER_TLS_CERT is set (a certificate needs its key)"},
		{map[string]string{"GRPC_SERVER_TLS_CERT": "c.pem", "GRPC_SERVER_TLS_KEY": "k.pem"}, "GRPC_SERVER_TLS_CERT: set, but GRPC_SERVER_USE_TLS is not true (gRPC would be plaintext)"},
		{map[string]string{"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "c.pem", "GRPC_SERVER_TLS_KEY": "k.pem", "GRPC_CLIENT_TLS_SAN": "spiffe://a/b"}, "GRPC_CLIENT_TLS_SAN: needs GRPC_CLIENT_TLS_CACERT"},
		{map[string]string{"HTTP_TLS_KEY": "k.pem"}, "HTTP_TLS_CERT: empty, but HTTP_TLS_KEY is set (a key needs its certificate)"},
		{map[string]string{"HTTP_CLIENT_TLS_CACERT": "ca.pem"}, "HTTP_CLIENT_TLS_CACERT: needs HTTP_TLS_CERT and HTTP_TLS_KEY"},
		{map[string]string{"REDIS_URL": "redis://r:6379", "REDIS_TLS_CACERT": "ca.pem"}, "REDIS_TLS_CACERT: needs TLS to Redis (a rediss:// REDIS_URL, or REDIS_TLS=true)"},
		{map[string]string{"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION": "true"}, "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION: needs TLS to Redis (a rediss:// REDIS_URL, or REDIS_TLS=true)"},
		{map[string]string{"REDIS_URL": "rediss://r:6379", "REDIS_TLS_CLIENT_CERT": "c.pem"}, "REDIS_TLS_CLIENT_KEY: empty, but REDIS_TLS_CLIENT_CERT is set"},
	} {
		_, err := parseServe(nil, env(tt.env), &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: err = %v, want it to contain %q", tt.env, err, tt.want)
		}
	}
	c, err := parseServe([]string{"--grpc-client-tls-san", " spiffe://cluster.local/ns/gw/sa/envoy , gw.example.com"}, env(map[string]string{
		"GRPC_SERVER_USE_TLS": "true", "GRPC_SERVER_TLS_CERT": "c.pem", "GRPC_SERVER_TLS_KEY": "k.pem", "GRPC_CLIENT_TLS_CACERT": "ca.pem",
	}), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.TLS.GRPCClientSANs, "|"); got != "spiffe://cluster.local/ns/gw/sa/envoy|gw.example.com" {
		t.Errorf("SANs = %q", got)
	}
}

// TestTLSFileAtStart: a file that does not load stops the start, naming
// its setting and the file.
func TestTLSFileAtStart(t *testing.T) {
	ca := certtest.NewCA(t, "ca")
	dir := t.TempDir()
	f := ca.Localhost(t).Write(t, dir, ca)
	other := ca.Localhost(t).Write(t, filepath.Join(dir, "other"), ca)
	missing := filepath.Join(dir, "missing.pem")
	for _, tt := range []struct {
		env  []string
		want string
	}{
		{[]string{"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT=" + missing, "GRPC_SERVER_TLS_KEY=" + f.Key}, "GRPC_SERVER_TLS_CERT: certificate " + missing + ": open " + missing + ": no such file or directory"},
		{[]string{"HTTP_TLS_CERT=" + f.Cert, "HTTP_TLS_KEY=" + other.Key}, "HTTP_TLS_KEY: key " + other.Key + ": tls: private key does not match public key"},
		{[]string{"HTTP_TLS_CERT=" + f.Cert, "HTTP_TLS_KEY=" + f.Key, "HTTP_CLIENT_TLS_CACERT=" + f.Key}, "HTTP_CLIENT_TLS_CACERT: CA bundle " + f.Key + ": no PEM certificate in it"},
		{[]string{"REDIS_URL=rediss://127.0.0.1:1/0", "REDIS_TLS_CACERT=" + missing}, "REDIS_TLS_CACERT: CA bundle " + missing},
	} {
		cmd := throttletest.Command(t, "serve")
		cmd.Env = append(cmd.Env, tt.env...)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), tt.want) {
			t.Errorf("%v: %v\n%s\nwant %q", tt.env, err, out, tt.want)
		}
	}
}

// tlsFiles are a CA and the server certificate files of a test.
type tlsFiles struct {
	ca    *certtest.CA
	files certtest.Files
}

func newTLSFiles(t *testing.T) tlsFiles {
	t.Helper()
	ca := certtest.NewCA(t, "throttle test CA")
	return tlsFiles{ca: ca, files: ca.Localhost(t).Write(t, t.TempDir(), ca)}
}

// edgeRequest is a request of testdata/edge.yaml's limit, 2 an hour per
// user.
func edgeRequest(user string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{
		{Key: "generic_key", Value: "api"}, {Key: "user_id", Value: user}}}}}
}

// edgeDir is a descriptors folder with testdata/edge.yaml.
func edgeDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	data, err := os.ReadFile("testdata/edge.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// assertEdgeDecisions makes three calls of one new user over conn: OK,
// OK, OVER_LIMIT, as without TLS. It returns the user.
func assertEdgeDecisions(t *testing.T, conn *grpc.ClientConn) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rls := rlsv3.NewRateLimitServiceClient(conn)
	user := "user-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		resp, err := rls.ShouldRateLimit(ctx, edgeRequest(user))
		if err != nil || resp.GetOverallCode() != want {
			t.Fatalf("ShouldRateLimit %d: %v %v, want %v", i, resp, err, want)
		}
		if got := resp.GetStatuses()[0].GetLimitRemaining(); got != uint32(max(1-i, 0)) {
			t.Errorf("ShouldRateLimit %d: remaining %d, want %d", i, got, max(1-i, 0))
		}
	}
	return user
}

func dialGRPC(t *testing.T, addr string, cfg *tls.Config) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// handshake makes one TLS connection to addr with cfg and reads what the
// server says first: a gRPC server's HTTP/2 SETTINGS frame once it
// admitted the client, or the alert that refused it (TLS 1.3 sends it
// after the client's side of the handshake is done).
func handshake(addr string, cfg *tls.Config) error {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	_, err = c.Read(make([]byte, 1))
	return err
}

// TestGRPCMutualTLS: with GRPC_CLIENT_TLS_CACERT and GRPC_CLIENT_TLS_SAN,
// Envoy's rate-limit client with an allowed certificate gets the decisions
// it gets without TLS; no certificate, one of another CA, an expired one,
// one without an allowed SAN, and plaintext are refused and counted by
// reason.
func TestGRPCMutualTLS(t *testing.T) {
	srv := newTLSFiles(t)
	const spiffe = "spiffe://cluster.local/ns/gw/sa/envoy"
	s := throttletest.Start(t, "DESCRIPTORS_DIR="+edgeDir(t), "GRPC_SERVER_USE_TLS=true",
		"GRPC_SERVER_TLS_CERT="+srv.files.Cert, "GRPC_SERVER_TLS_KEY="+srv.files.Key,
		"GRPC_CLIENT_TLS_CACERT="+srv.files.CA, "GRPC_CLIENT_TLS_SAN="+spiffe+",gw.example.com")

	envoy := srv.ca.Issue(t, certtest.Leaf{URIs: []string{spiffe}})
	conn := dialGRPC(t, s.GRPCAddr, certtest.ClientTLS(t, srv.ca, "localhost", &envoy))
	assertEdgeDecisions(t, conn)

	other := certtest.NewCA(t, "another CA").Issue(t, certtest.Leaf{URIs: []string{spiffe}})
	wrongSAN := srv.ca.Issue(t, certtest.Leaf{URIs: []string{"spiffe://cluster.local/ns/gw/sa/other"}})
	expired := srv.ca.Issue(t, certtest.Leaf{URIs: []string{spiffe}, NotBefore: time.Now().Add(-3 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	for _, tt := range []struct {
		name   string
		client *certtest.Pair
		reason string
	}{
		{"no certificate", nil, "no_certificate"},
		{"another CA", &other, "unknown_ca"},
		{"SAN not allowed", &wrongSAN, "san_not_allowed"},
		{"expired", &expired, "expired"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			series := `throttle_tls_handshake_failures_total{listener="grpc",reason="` + tt.reason + `"}`
			before := s.Metric(t, series)
			cfg := certtest.ClientTLS(t, srv.ca, "localhost", tt.client)
			if err := handshake(s.GRPCAddr, cfg); err == nil {
				t.Fatal("handshake: admitted")
			}
			if got := s.Metric(t, series); got != before+1 {
				t.Errorf("%s = %v after one refused handshake, want %v", series, got, before+1)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := rlsv3.NewRateLimitServiceClient(dialGRPC(t, s.GRPCAddr, cfg)).ShouldRateLimit(ctx, edgeRequest("refused"))
			if status.Code(err) != codes.Unavailable {
				t.Errorf("ShouldRateLimit: %v, want Unavailable", err)
			}
		})
	}

	before := s.Metric(t, `throttle_tls_handshake_failures_total{listener="grpc",reason="other"}`)
	c, err := net.Dial("tcp", s.GRPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	c.Read(make([]byte, 64))
	c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for s.Metric(t, `throttle_tls_handshake_failures_total{listener="grpc",reason="other"}`) != before+1 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if got := s.Metric(t, `throttle_tls_handshake_failures_total{listener="grpc",reason="other"}`); got != before+1 {
		t.Errorf("plaintext HTTP/2 on the TLS port: other = %v, want %v", got, before+1)
	}
	if got, want := s.Metric(t, `throttle_tls_certificate_expiry_timestamp_seconds{listener="grpc"}`), float64(readCert(t, srv.files.Cert).NotAfter.Unix()); got != want {
		t.Errorf("expiry = %v, want %v", got, want)
	}
}

// TestRESTOverHTTPS: HTTP_TLS_CERT serves the REST API over HTTPS, and
// HTTP_CLIENT_TLS_CACERT asks its clients for a certificate.
// httpsClient is an HTTPS client of a server of srv's, with the client
// certificate c (nil: none).
func (srv tlsFiles) httpsClient(t *testing.T, c *certtest.Pair) *http.Client {
	t.Helper()
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: certtest.ClientTLS(t, srv.ca, "localhost", c), ForceAttemptHTTP2: true}}
}

func TestRESTOverHTTPS(t *testing.T) {
	srv := newTLSFiles(t)
	client := func(c *certtest.Pair) *http.Client { return srv.httpsClient(t, c) }
	t.Run("TLS", func(t *testing.T) {
		s := throttletest.StartTLS(t, client(nil), "HTTP_TLS_CERT="+srv.files.Cert, "HTTP_TLS_KEY="+srv.files.Key)
		key := s.Register(t, "https app")
		for i, want := range []string{`"allowed":true`, `"allowed":false`} {
			req, _ := http.NewRequest("POST", s.URL+"/check", strings.NewReader(`{"identifier":"u","limit":1,"window":60}`))
			req.Header.Set("X-API-Key", key)
			resp, err := s.HTTP.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var body bytes.Buffer
			body.ReadFrom(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || !strings.Contains(body.String(), want) || resp.ProtoMajor != 2 {
				t.Errorf("check %d: %s %d %s, want HTTP/2 200 %s", i, resp.Proto, resp.StatusCode, body.String(), want)
			}
		}
		resp, err := http.Get(strings.Replace(s.URL, "https://", "http://", 1) + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				t.Error("plain HTTP on the HTTPS port answered 200")
			}
		}
	})
	t.Run("client certificates", func(t *testing.T) {
		app := srv.ca.Issue(t, certtest.Leaf{DNS: []string{"app.example.com"}})
		s := throttletest.StartTLS(t, client(&app), "HTTP_TLS_CERT="+srv.files.Cert, "HTTP_TLS_KEY="+srv.files.Key, "HTTP_CLIENT_TLS_CACERT="+srv.files.CA)
		if _, err := client(nil).Get(s.URL + "/health"); err == nil {
			t.Error("a client without a certificate was admitted")
		}
		stranger := certtest.NewCA(t, "stranger").Issue(t, certtest.Leaf{DNS: []string{"app.example.com"}})
		if _, err := client(&stranger).Get(s.URL + "/health"); err == nil {
			t.Error("a client certificate of another CA was admitted")
		}
		for reason, want := range map[string]float64{"no_certificate": 1, "unknown_ca": 1, "expired": 0} {
			if got := s.Metric(t, `throttle_tls_handshake_failures_total{listener="http",reason="`+reason+`"}`); got != want {
				t.Errorf("http %s refusals = %v, want %v", reason, got, want)
			}
		}
	})
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("%s: no PEM", path)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// secretVolume is a folder laid out as a Kubernetes Secret volume:
// cert.pem, key.pem and ca.pem are symlinks into ..data, itself a symlink
// to the folder of the current version, swapped atomically on update.
type secretVolume struct {
	t   *testing.T
	dir string
	n   int
}

func newSecretVolume(t *testing.T, ca *certtest.CA, p certtest.Pair) *secretVolume {
	t.Helper()
	v := &secretVolume{t: t, dir: t.TempDir()}
	v.update(ca, p)
	for _, f := range []string{"cert.pem", "key.pem", "ca.pem"} {
		if err := os.Symlink(filepath.Join("..data", f), filepath.Join(v.dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	return v
}

// update writes p into a new version folder and swaps ..data to it.
func (v *secretVolume) update(ca *certtest.CA, p certtest.Pair) {
	v.t.Helper()
	v.n++
	version := "..v" + strconv.Itoa(v.n)
	p.Write(v.t, filepath.Join(v.dir, version), ca)
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(version, tmp); err != nil {
		v.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		v.t.Fatal(err)
	}
}

func (v *secretVolume) path(name string) string { return filepath.Join(v.dir, name) }

// servedSerial is the serial of the certificate a new connection to addr
// is served.
func servedSerial(t *testing.T, addr string, cfg *tls.Config) string {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

// TestTLSRotation: a certificate swapped in the Secret volume is served to
// new connections within 10 s while an open gRPC connection carries on
// with the old one; a new key that does not match keeps the last good
// pair, and is logged with its file and counted.
func TestTLSRotation(t *testing.T) {
	ca := certtest.NewCA(t, "rotating CA")
	first := ca.Localhost(t)
	vol := newSecretVolume(t, ca, first)
	s := throttletest.Start(t, "DESCRIPTORS_DIR="+edgeDir(t), "GRPC_SERVER_USE_TLS=true",
		"GRPC_SERVER_TLS_CERT="+vol.path("cert.pem"), "GRPC_SERVER_TLS_KEY="+vol.path("key.pem"))
	clientTLS := certtest.ClientTLS(t, ca, "localhost", nil)
	conn := dialGRPC(t, s.GRPCAddr, clientTLS)
	rls := rlsv3.NewRateLimitServiceClient(conn)
	call := func(user string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var p peer.Peer
		resp, err := rls.ShouldRateLimit(ctx, edgeRequest(user), grpc.Peer(&p))
		if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("ShouldRateLimit on the open connection: %v %v", resp, err)
		}
		return p.AuthInfo.(credentials.TLSInfo).State.PeerCertificates[0].SerialNumber.String()
	}
	if got := call("before"); got != first.Cert.SerialNumber.String() {
		t.Fatalf("served serial %s, want %s", got, first.Cert.SerialNumber)
	}

	second := ca.Localhost(t)
	vol.update(ca, second)
	changed := time.Now()
	for servedSerial(t, s.GRPCAddr, clientTLS) != second.Cert.SerialNumber.String() {
		if time.Since(changed) > 10*time.Second {
			t.Fatalf("new handshakes still get the old certificate 10s after the swap")
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("new certificate served %v after the swap", time.Since(changed).Round(10*time.Millisecond))
	if got := call("after"); got != first.Cert.SerialNumber.String() {
		t.Errorf("the open connection's certificate is %s, want the first, %s (it must carry on, not reconnect)", got, first.Cert.SerialNumber)
	}
	if got := s.Metric(t, `throttle_tls_certificate_expiry_timestamp_seconds{listener="grpc"}`); got != float64(second.Cert.NotAfter.Unix()) {
		t.Errorf("expiry = %v, want the new certificate's %v", got, second.Cert.NotAfter.Unix())
	}

	// A new certificate whose key is another's.
	third := ca.Localhost(t)
	vol.update(ca, certtest.Pair{CertPEM: third.CertPEM, KeyPEM: first.KeyPEM})
	changed = time.Now()
	for s.Metric(t, "throttle_tls_reload_failures_total") != 1 {
		if time.Since(changed) > 10*time.Second {
			t.Fatalf("the broken pair was not counted within 10s\n%s", s.Logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := servedSerial(t, s.GRPCAddr, clientTLS); got != second.Cert.SerialNumber.String() {
		t.Errorf("after a broken key new handshakes get %s, want the last good %s", got, second.Cert.SerialNumber)
	}
	if logs := s.Logs.String(); !strings.Contains(logs, `"file":"`+vol.path("key.pem")+`"`) || !strings.Contains(logs, "private key does not match public key") {
		t.Errorf("the log names neither the key file nor the reason:\n%s", logs)
	}
	if got := call("broken"); got != first.Cert.SerialNumber.String() {
		t.Errorf("the open connection's certificate is %s, want %s", got, first.Cert.SerialNumber)
	}
}
