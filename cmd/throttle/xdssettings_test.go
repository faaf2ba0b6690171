package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/throttle-rl/throttle/xdsconfig"
)

// TestXDSSettings: the xDS settings read the reference's syntax into
// config.XDS, with its defaults.
func TestXDSSettings(t *testing.T) {
	for _, tt := range []struct {
		name string
		env  map[string]string
		want xdsConfig
	}{
		{name: "defaults", want: xdsConfig{Type: configTypeFile, NodeID: "default", NodeMetadata: map[string]string{}, ServerURL: "localhost:18000",
			ConnectTimeout: 3 * time.Second, Headers: map[string]string{},
			Backoff: xdsconfig.Backoff{Initial: 10 * time.Second, Max: time.Minute, RandomFactor: 0.5, Jitter: true}}},
		{name: "Envoy Gateway's", env: map[string]string{
			"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL": "envoy-gateway:18001", "CONFIG_GRPC_XDS_NODE_ID": "envoy-ratelimit",
			"CONFIG_GRPC_XDS_SERVER_USE_TLS": "true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT": "/certs/tls.crt", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": "/certs/tls.key",
			"CONFIG_GRPC_XDS_SERVER_TLS_CACERT": "/certs/ca.crt",
		}, want: xdsConfig{Type: configTypeXDS, NodeID: "envoy-ratelimit", NodeMetadata: map[string]string{}, ServerURL: "envoy-gateway:18001",
			ConnectTimeout: 3 * time.Second, Headers: map[string]string{}, UseTLS: true,
			ClientCert: "/certs/tls.crt", ClientKey: "/certs/tls.key", ServerCA: "/certs/ca.crt",
			Backoff: xdsconfig.Backoff{Initial: 10 * time.Second, Max: time.Minute, RandomFactor: 0.5, Jitter: true}}},
		{name: "every other setting", env: map[string]string{
			"CONFIG_TYPE": "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_NODE_METADATA": "zone=eu-1,cluster=a=b,", "CONFIG_GRPC_XDS_SERVER_URL": "dns:///cp.example:443",
			"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL": "500ms", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS": "X-Token:abc:def,tenant:t1",
			"CONFIG_GRPC_XDS_SERVER_USE_TLS": "1", "CONFIG_GRPC_XDS_SERVER_TLS_SAN": "control-plane", "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL": "1s",
			"XDS_CLIENT_BACKOFF_MAX_INTERVAL": "1m30s", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR": "0", "XDS_CLIENT_BACKOFF_JITTER": "F",
			"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES": "16777216",
		}, want: xdsConfig{Type: configTypeXDS, NodeID: "default", NodeMetadata: map[string]string{"zone": "eu-1", "cluster": "a=b"},
			ServerURL: "dns:///cp.example:443", ConnectTimeout: 500 * time.Millisecond, Headers: map[string]string{"x-token": "abc:def", "tenant": "t1"},
			UseTLS: true, ServerSAN: "control-plane", Backoff: xdsconfig.Backoff{Initial: time.Second, Max: 90 * time.Second}, MaxMsgSize: 16 << 20}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseServe(nil, env(tt.env), &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.want, c.XDS); d != "" {
				t.Errorf("XDS (-want +got):\n%s", d)
			}
		})
	}
}

// TestXDSSettingsRefused: a bad value is refused with a sentence naming
// its setting; a header's value never shows.
func TestXDSSettingsRefused(t *testing.T) {
	xds := map[string]string{"CONFIG_TYPE": "GRPC_XDS_SOTW"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range xds {
			m[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, tt := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"CONFIG_TYPE": "grpc_xds_sotw"}, `CONFIG_TYPE: "grpc_xds_sotw" is not FILE (descriptor files) or GRPC_XDS_SOTW (an xDS control plane)`},
		{map[string]string{"CONFIG_TYPE": "GRPC_XDS_DELTA"}, `CONFIG_TYPE: "GRPC_XDS_DELTA" is not FILE`},
		{with("CONFIG_GRPC_XDS_NODE_METADATA", "zone:eu"), `CONFIG_GRPC_XDS_NODE_METADATA: "zone:eu" is not key=value (pairs are comma-separated)`},
		{with("CONFIG_GRPC_XDS_NODE_METADATA", "=eu"), `CONFIG_GRPC_XDS_NODE_METADATA: "=eu" is not key=value`},
		{with("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "a:1,token=s3cret"), `CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: pair 2 is not key:value (pairs are comma-separated)`},
		{with("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "bad key:1"), `CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: header name "bad key": only letters, digits, '-', '_' and '.'`},
		{with("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "token:s3cret\x01"), `CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: the value of header "token" has characters gRPC does not send`},
		{with("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "3"), `CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL: "3" is not a positive duration such as 2s or 15ms`},
		{with("CONFIG_GRPC_XDS_SERVER_USE_TLS", "yes"), `CONFIG_GRPC_XDS_SERVER_USE_TLS: "yes" is not true or false`},
		{with("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "0s"), `XDS_CLIENT_BACKOFF_INITIAL_INTERVAL: "0s" is not a positive duration`},
		{with("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "5s"), `XDS_CLIENT_BACKOFF_MAX_INTERVAL: 5s is shorter than XDS_CLIENT_BACKOFF_INITIAL_INTERVAL, 10s`},
		{with("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "1.5"), `XDS_CLIENT_BACKOFF_RANDOM_FACTOR: "1.5" is not a number from 0 to 1`},
		{with("XDS_CLIENT_BACKOFF_JITTER", "on"), `XDS_CLIENT_BACKOFF_JITTER: "on" is not true or false`},
		{with("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "4MiB"), `XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES: "4MiB" is not a size in bytes`},
		{with("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/c.pem"), `CONFIG_GRPC_XDS_CLIENT_TLS_KEY: empty, but CONFIG_GRPC_XDS_CLIENT_TLS_CERT is set (a certificate needs its key)`},
		{with("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "/ca.pem"), `CONFIG_GRPC_XDS_SERVER_TLS_CACERT: set, but CONFIG_GRPC_XDS_SERVER_USE_TLS is not true (the control plane would be reached in plaintext)`},
	} {
		_, err := parseServe(nil, env(tt.env), &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: %v\nwant %s", tt.env, err, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%v: the error shows a header's value: %v", tt.env, err)
		}
	}
	// The xDS settings are not checked together under CONFIG_TYPE=FILE,
	// where the reference ignores them.
	if _, err := parseServe(nil, env(map[string]string{"CONFIG_GRPC_XDS_SERVER_TLS_CACERT": "/ca.pem", "CONFIG_GRPC_XDS_SERVER_URL": ""}), &bytes.Buffer{}); err != nil {
		t.Errorf("xDS settings under CONFIG_TYPE=FILE: %v", err)
	}
}

func TestXDSServerName(t *testing.T) {
	for _, tt := range []struct{ url, san, want string }{
		{"envoy-gateway:18001", "", "envoy-gateway"},
		{"127.0.0.1:18000", "", "127.0.0.1"},
		{"[::1]:18000", "", "::1"},
		{"dns:///cp.example:443", "", "cp.example"},
		{"envoy-gateway:18001", "envoy-gateway.envoy-gateway-system.svc", "envoy-gateway.envoy-gateway-system.svc"},
	} {
		x := xdsConfig{ServerURL: tt.url, ServerSAN: tt.san}
		if got := x.serverName(); got != tt.want {
			t.Errorf("serverName(%q, SAN %q) = %q, want %q", tt.url, tt.san, got, tt.want)
		}
	}
}
