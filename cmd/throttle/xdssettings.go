package main

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/throttle-rl/throttle/xdsconfig"
)

// The values of CONFIG_TYPE.
const (
	configTypeFile = "FILE"
	configTypeXDS  = "GRPC_XDS_SOTW"
)

// xdsConfig is the xDS config source of config (xds.go), with the
// reference service's settings.
type xdsConfig struct {
	// Type is CONFIG_TYPE: configTypeFile or configTypeXDS.
	Type           string
	NodeID         string
	NodeMetadata   map[string]string
	ServerURL      string
	ConnectTimeout time.Duration
	// Headers go with the stream; their values are secrets (a token).
	Headers                                    map[string]string
	UseTLS                                     bool
	ClientCert, ClientKey, ServerCA, ServerSAN string
	Backoff                                    xdsconfig.Backoff
	MaxMsgSize                                 int // 0: gRPC's default
	// ReservationOverlay is RESERVATION_OVERLAY: the overlay file's path,
	// or "" for none.
	ReservationOverlay string
}

// on reports whether the xDS config source is on.
func (x *xdsConfig) on() bool { return x.Type == configTypeXDS }

// xdsSettings are the xDS config source's, with the reference service's
// names, defaults and value syntax (its envconfig's: k:v maps, Go
// durations).
var xdsSettings = []setting{
	{env: "CONFIG_TYPE", flag: "config-type", def: configTypeFile, ref: upstreamDefault("FILE"),
		usage: "where the Envoy descriptor configuration comes from: FILE (the descriptor files) or GRPC_XDS_SOTW (also the " +
			"RateLimitConfig resources of an xDS control plane, such as Envoy Gateway's; a domain they describe wins over " +
			"the files' same domain)",
		set: func(c *config, v string) (err error) { c.XDS.Type, err = parseConfigType(v); return }},
	{env: "CONFIG_GRPC_XDS_NODE_ID", flag: "config-grpc-xds-node-id", def: "default", ref: upstreamDefault("default"),
		usage: "the node id given to the xDS control plane, which keeps a snapshot per node",
		set:   func(c *config, v string) error { c.XDS.NodeID = v; return nil }},
	{env: "CONFIG_GRPC_XDS_NODE_METADATA", flag: "config-grpc-xds-node-metadata", ref: upstreamDefault(""),
		usage: "metadata of the node given to the xDS control plane: key=value pairs, comma-separated",
		set:   func(c *config, v string) (err error) { c.XDS.NodeMetadata, err = parseNodeMetadata(v); return }},
	{env: "CONFIG_GRPC_XDS_SERVER_URL", flag: "config-grpc-xds-server-url", def: "localhost:18000", ref: upstreamDefault("localhost:18000"),
		usage: "the xDS control plane's gRPC address, host:port",
		set:   func(c *config, v string) error { c.XDS.ServerURL = v; return nil }},
	{env: "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", flag: "config-grpc-xds-server-connect-retry-interval", def: "3s", ref: upstreamDefault("3s"),
		usage: "how long one attempt to connect to the xDS control plane (TCP and TLS handshake) may take; one that takes " +
			"longer fails, and the next waits as XDS_CLIENT_BACKOFF_* say",
		set: func(c *config, v string) (err error) { c.XDS.ConnectTimeout, err = parseDuration(v); return }},
	{env: "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", flag: "config-grpc-xds-client-additional-headers", ref: upstreamDefault(""),
		usage: "gRPC headers sent to the xDS control plane with the stream: key:value pairs, comma-separated; never logged",
		set:   func(c *config, v string) (err error) { c.XDS.Headers, err = parseXDSHeaders(v); return }},
	{env: "CONFIG_GRPC_XDS_SERVER_USE_TLS", flag: "config-grpc-xds-server-use-tls", def: "false", ref: upstreamDefault("false"),
		usage: "reach the xDS control plane over TLS (1.2 or later)",
		set:   func(c *config, v string) (err error) { c.XDS.UseTLS, err = parseBool(v); return }},
	{env: "CONFIG_GRPC_XDS_CLIENT_TLS_CERT", flag: "config-grpc-xds-client-tls-cert", ref: upstreamDefault(""),
		usage: "PEM file of the client certificate presented to the xDS control plane (mTLS), with " +
			"CONFIG_GRPC_XDS_CLIENT_TLS_KEY; read again on change",
		set: func(c *config, v string) error { c.XDS.ClientCert = v; return nil }},
	{env: "CONFIG_GRPC_XDS_CLIENT_TLS_KEY", flag: "config-grpc-xds-client-tls-key", ref: upstreamDefault(""),
		usage: "PEM file of CONFIG_GRPC_XDS_CLIENT_TLS_CERT's private key",
		set:   func(c *config, v string) error { c.XDS.ClientKey = v; return nil }},
	{env: "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", flag: "config-grpc-xds-server-tls-cacert", ref: upstreamDefault(""),
		usage: "PEM file of the CA certificates the xDS control plane's certificate must chain to; read again on change; " +
			"empty = the system's roots",
		set: func(c *config, v string) error { c.XDS.ServerCA = v; return nil }},
	{env: "CONFIG_GRPC_XDS_SERVER_TLS_SAN", flag: "config-grpc-xds-server-tls-san", ref: upstreamDefault(""),
		usage: "the name the xDS control plane's certificate must carry, also sent as the TLS server name; empty = the host " +
			"of CONFIG_GRPC_XDS_SERVER_URL",
		set: func(c *config, v string) error { c.XDS.ServerSAN = v; return nil }},
	{env: "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", flag: "xds-client-backoff-initial-interval", def: "10s", ref: upstreamDefault("10s"),
		usage: "how long to wait before connecting again to the xDS control plane after its stream ended or an attempt " +
			"failed; doubled after each failed attempt",
		set: func(c *config, v string) (err error) { c.XDS.Backoff.Initial, err = parseDuration(v); return }},
	{env: "XDS_CLIENT_BACKOFF_MAX_INTERVAL", flag: "xds-client-backoff-max-interval", def: "60s", ref: upstreamDefault("60s"),
		usage: "the longest wait between attempts to connect to the xDS control plane",
		set:   func(c *config, v string) (err error) { c.XDS.Backoff.Max, err = parseDuration(v); return }},
	{env: "XDS_CLIENT_BACKOFF_RANDOM_FACTOR", flag: "xds-client-backoff-random-factor", def: "0.5", ref: upstreamDefault("0.5"),
		usage: "with XDS_CLIENT_BACKOFF_JITTER: each wait is drawn at random within this fraction of it (0-1; 0.5: between " +
			"half and one and a half times it, at most the maximum)",
		set: func(c *config, v string) (err error) { c.XDS.Backoff.RandomFactor, err = parseFraction(v); return }},
	{env: "XDS_CLIENT_BACKOFF_JITTER", flag: "xds-client-backoff-jitter", def: "true", ref: upstreamDefault("true"),
		usage: "draw the waits between attempts at random (XDS_CLIENT_BACKOFF_RANDOM_FACTOR), so replicas do not reconnect all at once",
		set:   func(c *config, v string) (err error) { c.XDS.Backoff.Jitter, err = parseBool(v); return }},
	{env: "RESERVATION_OVERLAY", flag: "reservation-overlay",
		usage: "YAML file that sets reserve on limits of xDS domains (Envoy Gateway, Envoy AI Gateway), whose control plane " +
			"has no field for it: docs/envoy-ai-gateway-reservations.md; read at start; empty = none",
		set: func(c *config, v string) error { c.XDS.ReservationOverlay = v; return nil }},
	{env: "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", flag: "xds-client-max-msg-size-in-bytes", ref: upstreamDefault(""),
		usage: "the largest xDS response taken, in bytes; empty = gRPC's 4 MiB (a larger configuration is refused until this " +
			"is raised)",
		set: func(c *config, v string) (err error) { c.XDS.MaxMsgSize, err = parseMsgSize(v); return }},
}

func parseConfigType(v string) (string, error) {
	if v != configTypeFile && v != configTypeXDS {
		return "", fmt.Errorf("%q is not %s (descriptor files) or %s (an xDS control plane)", v, configTypeFile, configTypeXDS)
	}
	return v, nil
}

// parseNodeMetadata reads key=value pairs, comma-separated, as the
// reference does, but refuses a pair it would drop unsaid (no '=', or no
// key).
func parseNodeMetadata(v string) (map[string]string, error) {
	m := map[string]string{}
	for _, item := range strings.Split(v, ",") {
		if item == "" {
			continue
		}
		k, val, ok := strings.Cut(item, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not key=value (pairs are comma-separated)", item)
		}
		m[k] = val
	}
	return m, nil
}

// parseXDSHeaders reads key:value pairs, comma-separated, as the
// reference's envconfig reads a map. A value may be a secret: errors never
// show one.
func parseXDSHeaders(v string) (map[string]string, error) {
	m := map[string]string{}
	if v == "" {
		return m, nil
	}
	for i, item := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(item, ":")
		switch {
		case !ok:
			return nil, fmt.Errorf("pair %d is not key:value (pairs are comma-separated)", i+1)
		case k == "" || strings.IndexFunc(k, notHeaderNameRune) >= 0:
			return nil, fmt.Errorf("header name %q: only letters, digits, '-', '_' and '.'", k)
		case !strings.HasSuffix(k, "-bin") && strings.IndexFunc(val, notPrintableASCII) >= 0:
			return nil, fmt.Errorf("the value of header %q has characters gRPC does not send (only printable ASCII, unless the name ends in -bin)", k)
		}
		m[strings.ToLower(k)] = val
	}
	return m, nil
}

func notHeaderNameRune(r rune) bool {
	return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.')
}

func notPrintableASCII(r rune) bool { return r < ' ' || r > '~' }

// parseFraction reads a number from 0 to 1.
func parseFraction(v string) (float64, error) {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 0 || f > 1 {
		return 0, fmt.Errorf("%q is not a number from 0 to 1", v)
	}
	return f, nil
}

// parseMsgSize reads a size in bytes; empty is 0 (gRPC's default).
func parseMsgSize(v string) (int, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a size in bytes", v)
	}
	return n, nil
}

// validate checks the xDS settings together, when the source is on.
func (x *xdsConfig) validate() []error {
	if !x.on() {
		return nil
	}
	var errs []error
	if x.ServerURL == "" {
		errs = append(errs, errors.New("CONFIG_GRPC_XDS_SERVER_URL: empty; CONFIG_TYPE=GRPC_XDS_SOTW needs the control plane's host:port"))
	}
	switch {
	case x.ClientCert != "" && x.ClientKey == "":
		errs = append(errs, errors.New("CONFIG_GRPC_XDS_CLIENT_TLS_KEY: empty, but CONFIG_GRPC_XDS_CLIENT_TLS_CERT is set (a certificate needs its key)"))
	case x.ClientCert == "" && x.ClientKey != "":
		errs = append(errs, errors.New("CONFIG_GRPC_XDS_CLIENT_TLS_CERT: empty, but CONFIG_GRPC_XDS_CLIENT_TLS_KEY is set (a key needs its certificate)"))
	}
	if !x.UseTLS {
		for _, s := range []struct {
			name string
			set  bool
		}{{"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", x.ClientCert != ""}, {"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", x.ClientKey != ""},
			{"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", x.ServerCA != ""}, {"CONFIG_GRPC_XDS_SERVER_TLS_SAN", x.ServerSAN != ""}} {
			if s.set {
				errs = append(errs, fmt.Errorf("%s: set, but CONFIG_GRPC_XDS_SERVER_USE_TLS is not true (the control plane would be reached in plaintext)", s.name))
			}
		}
	}
	if x.Backoff.Max < x.Backoff.Initial {
		errs = append(errs, fmt.Errorf("XDS_CLIENT_BACKOFF_MAX_INTERVAL: %s is shorter than XDS_CLIENT_BACKOFF_INITIAL_INTERVAL, %s", x.Backoff.Max, x.Backoff.Initial))
	}
	return errs
}

// serverName is the name the control plane's certificate must carry:
// CONFIG_GRPC_XDS_SERVER_TLS_SAN, else the host of its address (a gRPC
// target, perhaps with a scheme such as dns:///).
func (x *xdsConfig) serverName() string {
	if x.ServerSAN != "" {
		return x.ServerSAN
	}
	target := x.ServerURL
	if i := strings.Index(target, ":///"); i >= 0 {
		target = target[i+len(":///"):]
	}
	if host, _, err := net.SplitHostPort(target); err == nil {
		return host
	}
	return target
}
