package envoy_test

import (
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"

	"github.com/throttle-rl/throttle/envoy"
	"github.com/throttle-rl/throttle/internal/testkit"
)

// envoy-mtls.yaml is envoy.yaml whose throttle cluster speaks mTLS: an
// UpstreamTlsContext with Envoy's client certificate, the CA Throttle's
// must chain to and the name it must carry, HTTP/2 by ALPN, TLS 1.2 at
// least. Everything else is the same as envoy.yaml.
func TestFrontProxyMTLS(t *testing.T) {
	b, err := envoy.LoadBootstrap(testkit.MustRead(t, "envoy-mtls.yaml"))
	if err != nil {
		t.Fatalf("envoy-mtls.yaml: %v", err)
	}
	plain, err := envoy.LoadBootstrap(testkit.MustRead(t, "envoy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var throttle *clusterv3.Cluster
	for _, c := range b.GetStaticResources().GetClusters() {
		if c.GetName() == "throttle" {
			throttle = c
		}
	}
	if throttle == nil {
		t.Fatal("no cluster throttle")
	}
	ts := throttle.GetTransportSocket()
	if ts.GetName() != "envoy.transport_sockets.tls" {
		t.Fatalf("throttle cluster transport socket %q, want envoy.transport_sockets.tls", ts.GetName())
	}
	var up tlsv3.UpstreamTlsContext
	if err := ts.GetTypedConfig().UnmarshalTo(&up); err != nil {
		t.Fatalf("transport socket: %v", err)
	}
	ctx := up.GetCommonTlsContext()
	certs := ctx.GetTlsCertificates()
	if len(certs) != 1 || certs[0].GetCertificateChain().GetFilename() != "/etc/envoy-tls/tls.crt" || certs[0].GetPrivateKey().GetFilename() != "/etc/envoy-tls/tls.key" {
		t.Errorf("tls_certificates %v, want Envoy's client pair /etc/envoy-tls/tls.crt and tls.key", certs)
	}
	vc := ctx.GetValidationContext()
	if vc.GetTrustedCa().GetFilename() != "/etc/envoy-tls/ca.crt" {
		t.Errorf("trusted_ca %v, want /etc/envoy-tls/ca.crt", vc.GetTrustedCa())
	}
	sans := vc.GetMatchTypedSubjectAltNames()
	if len(sans) != 1 || sans[0].GetSanType() != tlsv3.SubjectAltNameMatcher_DNS || sans[0].GetMatcher().GetExact() != "throttle" {
		t.Errorf("match_typed_subject_alt_names %v, want DNS throttle (the name Envoy dials)", sans)
	}
	if up.GetSni() != "throttle" {
		t.Errorf("sni %q, want throttle", up.GetSni())
	}
	if got := ctx.GetAlpnProtocols(); len(got) != 1 || got[0] != "h2" {
		t.Errorf("alpn_protocols %v, want [h2]: Throttle's gRPC server requires HTTP/2 by ALPN", got)
	}
	if v := ctx.GetTlsParams().GetTlsMinimumProtocolVersion(); v != tlsv3.TlsParameters_TLSv1_2 {
		t.Errorf("tls_minimum_protocol_version %v, want TLSv1_2", v)
	}
	assertHTTP2(t, throttle)

	// The rest is envoy.yaml's.
	throttle.TransportSocket = nil
	if !proto.Equal(b, plain) {
		t.Error("envoy-mtls.yaml differs from envoy.yaml in more than the throttle cluster's transport socket")
	}
}

// A mistake inside the UpstreamTlsContext fails here, not at Envoy's start.
func TestFrontProxyMTLSRejectsMistakes(t *testing.T) {
	good := string(testkit.MustRead(t, "envoy-mtls.yaml"))
	for _, tt := range []struct{ name, old, new string }{
		{"unknown TLS version", "TLSv1_2", "TLSv12"},
		{"misspelled field", "trusted_ca:", "trusted_cas:"},
		{"empty SAN matcher", "matcher: { exact: throttle }", "matcher: {}"},
	} {
		bad := strings.Replace(good, tt.old, tt.new, 1)
		if bad == good {
			t.Fatalf("%s: %q not in envoy-mtls.yaml", tt.name, tt.old)
		}
		if _, err := envoy.LoadBootstrap([]byte(bad)); err == nil {
			t.Errorf("%s: accepted", tt.name)
		}
	}
}
