package tlsreload

import (
	"bytes"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/throttle-rl/throttle/internal/testkit/certtest"
)

// serve runs a TLS listener of r's ServerConfig on loopback, answering
// each connection's first byte with the serial of the certificate it was
// served, until the test ends. It returns the address.
func serve(t *testing.T, r *Reloader) string {
	t.Helper()
	l, err := tls.Listen("tcp", "127.0.0.1:0", r.ServerConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				b := make([]byte, 1)
				if _, err := c.Read(b); err != nil {
					return
				}
				c.Write([]byte("ok\n"))
			}()
		}
	}()
	return l.Addr().String()
}

// dial makes one handshake with cfg and a round trip; it returns the
// server certificate's serial, or the error.
func dial(addr string, cfg *tls.Config) (string, error) {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	// TLS 1.3: the server checks the client certificate after the client
	// finished; its refusal arrives on the first read.
	if _, err := c.Write([]byte("x")); err != nil {
		return "", err
	}
	b := make([]byte, 3)
	if _, err := c.Read(b); err != nil {
		return "", err
	}
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}

func TestClientCertificates(t *testing.T) {
	ca, other := certtest.NewCA(t, "ca"), certtest.NewCA(t, "other ca")
	dir := t.TempDir()
	files := ca.Localhost(t).Write(t, dir, ca)
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Options{Name: "grpc", CertFile: files.Cert, KeyFile: files.Key, CAFile: files.CA,
		AllowedSANs: []string{"spiffe://cluster.local/ns/gw/sa/envoy", "gw.example.com"}, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, r)

	envoy := ca.Issue(t, certtest.Leaf{URIs: []string{"spiffe://cluster.local/ns/gw/sa/envoy"}})
	gw := ca.Issue(t, certtest.Leaf{DNS: []string{"gw.example.com"}})
	for _, tt := range []struct {
		name   string
		client *certtest.Pair
		reason string // "": admitted
	}{
		{"SPIFFE id allowed", &envoy, ""},
		{"DNS name allowed", &gw, ""},
		{"no certificate", nil, ReasonNoCertificate},
		{"another CA", ptr(other.Issue(t, certtest.Leaf{URIs: []string{"spiffe://cluster.local/ns/gw/sa/envoy"}})), ReasonUnknownCA},
		{"SAN not allowed", ptr(ca.Issue(t, certtest.Leaf{URIs: []string{"spiffe://cluster.local/ns/gw/sa/other"}})), ReasonSANNotAllowed},
		{"expired", ptr(ca.Issue(t, certtest.Leaf{DNS: []string{"gw.example.com"}, NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})), ReasonExpired},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := value(m.handshakeFailures.WithLabelValues("grpc", tt.reason))
			_, err := dial(addr, certtest.ClientTLS(t, ca, "localhost", tt.client))
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("admitted")
			}
			if got := value(m.handshakeFailures.WithLabelValues("grpc", tt.reason)) - before; got != 1 {
				t.Errorf("handshake failures{reason=%q} grew by %v, want 1", tt.reason, got)
			}
		})
	}
	if got := value(m.expiry.WithLabelValues("grpc")); got != float64(r.cur.Load().cert.Leaf.NotAfter.Unix()) {
		t.Errorf("expiry gauge = %v, want %v", got, r.cur.Load().cert.Leaf.NotAfter.Unix())
	}
}

func ptr[T any](v T) *T { return &v }

// value is a counter's or a gauge's value.
func value(m prometheus.Metric) float64 {
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		panic(err)
	}
	return d.GetCounter().GetValue() + d.GetGauge().GetValue()
}

// TestRotation: files swapped the way a Kubernetes Secret volume swaps
// them (a ..data symlink to a new folder) serve the next handshake; a key
// that does not match is logged, counted once, and the last good pair kept.
func TestRotation(t *testing.T) {
	ca := certtest.NewCA(t, "ca")
	vol := t.TempDir()
	first := ca.Localhost(t)
	first.Write(t, filepath.Join(vol, "v1"), ca)
	link := func(target string) {
		tmp := filepath.Join(vol, "..data_tmp")
		if err := os.Symlink(target, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(vol, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	link("v1")
	for _, f := range []string{"cert.pem", "key.pem", "ca.pem"} {
		if err := os.Symlink(filepath.Join("..data", f), filepath.Join(vol, f)); err != nil {
			t.Fatal(err)
		}
	}
	var logs bytes.Buffer
	m, _ := NewMetrics(prometheus.NewRegistry())
	r, err := New(Options{Name: "http", CertFile: filepath.Join(vol, "cert.pem"), KeyFile: filepath.Join(vol, "key.pem"),
		Metrics: m, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, r)
	client := certtest.ClientTLS(t, ca, "localhost", nil)
	if got, err := dial(addr, client); err != nil || got != first.Cert.SerialNumber.String() {
		t.Fatalf("serial %s, %v; want %s", got, err, first.Cert.SerialNumber)
	}

	second := ca.Localhost(t)
	second.Write(t, filepath.Join(vol, "v2"), ca)
	link("v2")
	r.Reload()
	if got, err := dial(addr, client); err != nil || got != second.Cert.SerialNumber.String() {
		t.Fatalf("after the swap: serial %s, %v; want %s", got, err, second.Cert.SerialNumber)
	}

	// A new certificate with a key that is not its own.
	third := ca.Localhost(t)
	bad := certtest.Pair{CertPEM: third.CertPEM, KeyPEM: first.KeyPEM}
	bad.Write(t, filepath.Join(vol, "v3"), ca)
	link("v3")
	r.Reload()
	r.Reload() // the same broken files: reported once
	if got, err := dial(addr, client); err != nil || got != second.Cert.SerialNumber.String() {
		t.Fatalf("after a broken key: serial %s, %v; want the last good %s", got, err, second.Cert.SerialNumber)
	}
	if got := value(m.reloadFailures.WithLabelValues("http")); got != 1 {
		t.Errorf("reload failures = %v, want 1", got)
	}
	if want := "file=" + filepath.Join(vol, "key.pem"); !strings.Contains(logs.String(), want) || !strings.Contains(logs.String(), "private key does not match public key") {
		t.Errorf("log lacks %q and the reason:\n%s", want, logs.String())
	}
	if got := value(m.expiry.WithLabelValues("http")); got != float64(second.Cert.NotAfter.Unix()) {
		t.Errorf("expiry gauge = %v, want the kept certificate's %v", got, second.Cert.NotAfter.Unix())
	}
}

func TestNewNamesTheFile(t *testing.T) {
	ca := certtest.NewCA(t, "ca")
	dir := t.TempDir()
	good := ca.Localhost(t).Write(t, filepath.Join(dir, "good"), ca)
	expired := ca.Issue(t, certtest.Leaf{DNS: []string{"localhost"}, NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Hour)}).Write(t, filepath.Join(dir, "expired"), ca)
	notPEM := filepath.Join(dir, "not.pem")
	os.WriteFile(notPEM, []byte("hello"), 0o600)
	for _, tt := range []struct {
		name string
		o    Options
		role Role
		path string
		msg  string
	}{
		{"missing certificate", Options{CertFile: filepath.Join(dir, "nope.pem"), KeyFile: good.Key}, Cert, filepath.Join(dir, "nope.pem"), "no such file"},
		{"not a certificate", Options{CertFile: notPEM, KeyFile: good.Key}, Cert, notPEM, "no PEM certificate"},
		{"wrong key", Options{CertFile: good.Cert, KeyFile: expired.Key}, Key, expired.Key, "private key does not match"},
		{"expired", Options{CertFile: expired.Cert, KeyFile: expired.Key}, Cert, expired.Cert, "expired at"},
		{"CA bundle without a certificate", Options{CertFile: good.Cert, KeyFile: good.Key, CAFile: notPEM}, CA, notPEM, "no PEM certificate"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.o)
			var fe *FileError
			if !errors.As(err, &fe) || fe.Role != tt.role || fe.Path != tt.path || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("err = %v; want a FileError of the %s %s saying %q", err, tt.role, tt.path, tt.msg)
			}
		})
	}
}

// TestClientConfig: as a client (Redis), the server's certificate must
// chain to the CA bundle and name the server unless told otherwise; the
// client certificate is sent.
func TestClientConfig(t *testing.T) {
	ca := certtest.NewCA(t, "ca")
	dir := t.TempDir()
	srvFiles := ca.Issue(t, certtest.Leaf{DNS: []string{"redis.internal"}}).Write(t, filepath.Join(dir, "srv"), ca)
	srv, err := New(Options{Name: "test", CertFile: srvFiles.Cert, KeyFile: srvFiles.Key, CAFile: srvFiles.CA})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, srv)
	cliFiles := ca.Issue(t, certtest.Leaf{DNS: []string{"throttle"}}).Write(t, filepath.Join(dir, "cli"), ca)
	cli, err := New(Options{Name: "redis", CertFile: cliFiles.Cert, KeyFile: cliFiles.Key, CAFile: cliFiles.CA})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dial(addr, cli.ClientConfig("redis.internal", false)); err != nil {
		t.Errorf("the right name: %v", err)
	}
	if _, err := dial(addr, cli.ClientConfig("127.0.0.1", false)); err == nil || !strings.Contains(err.Error(), "127.0.0.1") {
		t.Errorf("another name: err = %v, want a name mismatch", err)
	}
	if _, err := dial(addr, cli.ClientConfig("127.0.0.1", true)); err != nil {
		t.Errorf("another name, hostname not verified: %v", err)
	}
	otherCA := certtest.NewCA(t, "other")
	os.WriteFile(cliFiles.CA, otherCA.PEM, 0o600)
	cli.Reload()
	if _, err := dial(addr, cli.ClientConfig("redis.internal", false)); err == nil || !strings.Contains(err.Error(), "unknown authority") {
		t.Errorf("after the CA bundle changed to another CA: err = %v, want unknown authority", err)
	}
}

// TestHTTPErrorLog: net/http reports failed handshakes only in its error
// log; a refused client certificate is counted once (by its reason), any
// other failure as other, and a client that leaves without a word not at
// all.
func TestHTTPErrorLog(t *testing.T) {
	ca := certtest.NewCA(t, "ca")
	files := ca.Localhost(t).Write(t, t.TempDir(), ca)
	m, _ := NewMetrics(prometheus.NewRegistry())
	r, err := New(Options{Name: "http", CertFile: files.Cert, KeyFile: files.Key, CAFile: files.CA, Metrics: m, NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler:   http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok")) }),
		TLSConfig: r.ServerConfig(), ErrorLog: r.HTTPErrorLog(slog.New(slog.DiscardHandler)),
	}
	go srv.ServeTLS(l, "", "")
	t.Cleanup(func() { srv.Close() })
	url := "https://" + l.Addr().String() + "/"
	get := func(cfg *tls.Config) error {
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 5 * time.Second}
		resp, err := c.Get(url)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	client := ca.Issue(t, certtest.Leaf{DNS: []string{"app"}})
	if err := get(certtest.ClientTLS(t, ca, "localhost", &client)); err != nil {
		t.Fatalf("with a client certificate: %v", err)
	}
	if err := get(certtest.ClientTLS(t, ca, "localhost", nil)); err == nil {
		t.Fatal("without a client certificate: admitted")
	}
	old := certtest.ClientTLS(t, ca, "localhost", &client)
	old.MinVersion, old.MaxVersion = tls.VersionTLS10, tls.VersionTLS11
	if err := get(old); err == nil {
		t.Fatal("TLS 1.1: admitted")
	}
	if c, err := net.Dial("tcp", l.Addr().String()); err == nil {
		c.Close()
	}
	want := map[string]float64{ReasonNoCertificate: 1, ReasonOther: 1, ReasonUnknownCA: 0}
	deadline := time.Now().Add(5 * time.Second)
	for reason, n := range want {
		for value(m.handshakeFailures.WithLabelValues("http", reason)) != n && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if got := value(m.handshakeFailures.WithLabelValues("http", reason)); got != n {
			t.Errorf("handshake failures{reason=%q} = %v, want %v", reason, got, n)
		}
	}
}
