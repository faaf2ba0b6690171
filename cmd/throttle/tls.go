package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"

	"github.com/throttle-rl/throttle/internal/tlsreload"
)

// tlsSettings are transport security, with the reference service's names.
var tlsSettings = []setting{
	{env: "GRPC_SERVER_USE_TLS", flag: "grpc-server-use-tls", def: "false", ref: upstreamDefault("false"),
		usage: "serve TLS (1.2 or later) on GRPC_PORT, with GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY",
		set:   func(c *config, v string) (err error) { c.TLS.GRPCUseTLS, err = parseBool(v); return }},
	{env: "GRPC_SERVER_TLS_CERT", flag: "grpc-server-tls-cert", ref: upstreamDefault(""),
		usage: "PEM file of the certificate (and its chain) served on GRPC_PORT; read again within 10s of a change (a change " +
			"that does not load keeps the last good pair)",
		set: func(c *config, v string) error { c.TLS.GRPCCert = v; return nil }},
	{env: "GRPC_SERVER_TLS_KEY", flag: "grpc-server-tls-key", ref: upstreamDefault(""),
		usage: "PEM file of GRPC_SERVER_TLS_CERT's private key",
		set:   func(c *config, v string) error { c.TLS.GRPCKey = v; return nil }},
	{env: "GRPC_CLIENT_TLS_CACERT", flag: "grpc-client-tls-cacert", ref: upstreamDefault(""),
		usage: "PEM file of CA certificates: gRPC clients must present a certificate one of them signed (mTLS); read again on " +
			"change; empty = no client certificate asked",
		set: func(c *config, v string) error { c.TLS.GRPCClientCA = v; return nil }},
	{env: "GRPC_CLIENT_TLS_SAN", flag: "grpc-client-tls-san", ref: upstreamDefault(""),
		usage: "comma-separated DNS or URI SANs (such as spiffe://cluster.local/ns/gw/sa/envoy): a gRPC client certificate " +
			"must carry one of them; empty = any GRPC_CLIENT_TLS_CACERT signed",
		set: func(c *config, v string) (err error) { c.TLS.GRPCClientSANs, err = parseList(v); return }},
	{env: "HTTP_TLS_CERT", flag: "http-tls-cert",
		usage: "PEM file of the certificate (and its chain) of HTTPS on PORT (REST API, dashboard, /metrics, /health), with " +
			"HTTP_TLS_KEY; read again on change; empty = plain HTTP",
		set: func(c *config, v string) error { c.TLS.HTTPCert = v; return nil }},
	{env: "HTTP_TLS_KEY", flag: "http-tls-key",
		usage: "PEM file of HTTP_TLS_CERT's private key",
		set:   func(c *config, v string) error { c.TLS.HTTPKey = v; return nil }},
	{env: "HTTP_CLIENT_TLS_CACERT", flag: "http-client-tls-cacert",
		usage: "PEM file of CA certificates: HTTPS clients on PORT (probes too) must present a certificate one of them " +
			"signed; read again on change; empty = none asked",
		set: func(c *config, v string) error { c.TLS.HTTPClientCA = v; return nil }},
	{env: "REDIS_TLS_CACERT", flag: "redis-tls-cacert", ref: upstreamDefault(""),
		usage: "with TLS to Redis (a rediss:// URL, or REDIS_TLS=true): PEM file of the CA certificates Redis's certificate " +
			"must chain to (every node, Sentinels too); read again on change; empty = the system's roots",
		set: func(c *config, v string) error { c.TLS.RedisCA = v; return nil }},
	{env: "REDIS_TLS_CLIENT_CERT", flag: "redis-tls-client-cert", ref: upstreamDefault(""),
		usage: "with TLS to Redis: PEM file of the client certificate presented to Redis (tls-auth-clients), with " +
			"REDIS_TLS_CLIENT_KEY; read again on change",
		set: func(c *config, v string) error { c.TLS.RedisCert = v; return nil }},
	{env: "REDIS_TLS_CLIENT_KEY", flag: "redis-tls-client-key", ref: upstreamDefault(""),
		usage: "PEM file of REDIS_TLS_CLIENT_CERT's private key",
		set:   func(c *config, v string) error { c.TLS.RedisKey = v; return nil }},
	{env: "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", flag: "redis-tls-skip-hostname-verification", def: "false", ref: upstreamDefault("false"),
		usage: "with TLS to Redis: check that Redis's certificate chains to REDIS_TLS_CACERT, but not that it names the " +
			"REDIS_URL host (Cluster nodes announced by IP address)",
		set: func(c *config, v string) (err error) { c.TLS.RedisSkipHostname, err = parseBool(v); return }},
}

// tlsConfig is the transport security of config: TLS and mTLS on the gRPC
// port (the reference service's settings), on the REST port, and to Redis.
type tlsConfig struct {
	GRPCUseTLS                      bool
	GRPCCert, GRPCKey, GRPCClientCA string
	GRPCClientSANs                  []string
	HTTPCert, HTTPKey, HTTPClientCA string
	RedisCA, RedisCert, RedisKey    string
	RedisSkipHostname               bool
}

// validate checks that the TLS settings make a whole: a certificate with
// its key, mTLS only where TLS is on, Redis's only with TLS to Redis
// (redisTLS: a rediss:// URL or REDIS_TLS=true).
func (t *tlsConfig) validate(redisTLS bool) []error {
	var errs []error
	pair := func(certName, cert, keyName, key string) {
		switch {
		case cert != "" && key == "":
			errs = append(errs, fmt.Errorf("%s: empty, but %s is set (a certificate needs its key)", keyName, certName))
		case cert == "" && key != "":
			errs = append(errs, fmt.Errorf("%s: empty, but %s is set (a key needs its certificate)", certName, keyName))
		}
	}
	pair("GRPC_SERVER_TLS_CERT", t.GRPCCert, "GRPC_SERVER_TLS_KEY", t.GRPCKey)
	pair("HTTP_TLS_CERT", t.HTTPCert, "HTTP_TLS_KEY", t.HTTPKey)
	pair("REDIS_TLS_CLIENT_CERT", t.RedisCert, "REDIS_TLS_CLIENT_KEY", t.RedisKey)
	if t.GRPCUseTLS && (t.GRPCCert == "" || t.GRPCKey == "") {
		errs = append(errs, errors.New("GRPC_SERVER_USE_TLS: true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY"))
	}
	type set struct {
		name string
		on   bool
	}
	if !t.GRPCUseTLS {
		for _, s := range []set{{"GRPC_SERVER_TLS_CERT", t.GRPCCert != ""}, {"GRPC_SERVER_TLS_KEY", t.GRPCKey != ""},
			{"GRPC_CLIENT_TLS_CACERT", t.GRPCClientCA != ""}, {"GRPC_CLIENT_TLS_SAN", len(t.GRPCClientSANs) > 0}} {
			if s.on {
				errs = append(errs, fmt.Errorf("%s: set, but GRPC_SERVER_USE_TLS is not true (gRPC would be plaintext)", s.name))
			}
		}
	}
	if len(t.GRPCClientSANs) > 0 && t.GRPCClientCA == "" {
		errs = append(errs, errors.New("GRPC_CLIENT_TLS_SAN: needs GRPC_CLIENT_TLS_CACERT (only a verified client certificate has SANs to check)"))
	}
	if t.HTTPClientCA != "" && t.HTTPCert == "" {
		errs = append(errs, errors.New("HTTP_CLIENT_TLS_CACERT: needs HTTP_TLS_CERT and HTTP_TLS_KEY (client certificates are asked over TLS)"))
	}
	if !redisTLS {
		for _, s := range []set{{"REDIS_TLS_CACERT", t.RedisCA != ""}, {"REDIS_TLS_CLIENT_CERT", t.RedisCert != ""},
			{"REDIS_TLS_CLIENT_KEY", t.RedisKey != ""}, {"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", t.RedisSkipHostname}} {
			if s.on {
				errs = append(errs, fmt.Errorf("%s: needs TLS to Redis (a rediss:// REDIS_URL, or REDIS_TLS=true)", s.name))
			}
		}
	}
	return errs
}

// parseList reads a comma-separated list, spaces around items dropped.
func parseList(v string) ([]string, error) {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out, nil
}

// openTLS loads the certificate, key and CA files of the gRPC and REST
// listeners, of Redis and of the xDS control plane, each named by its setting when it does not load,
// and re-reads them on change until close.
func (a *app) openTLS(context.Context) error {
	t := a.cfg.TLS
	x := a.cfg.XDS
	xdsTLS := x.on() && x.UseTLS
	if !t.GRPCUseTLS && t.HTTPCert == "" && t.RedisCA == "" && t.RedisCert == "" && !t.RedisSkipHostname && !xdsTLS {
		return nil
	}
	m, err := tlsreload.NewMetrics(a.reg)
	if err != nil {
		return err
	}
	open := func(o tlsreload.Options, names map[tlsreload.Role]string) (*tlsreload.Reloader, error) {
		o.Log, o.Metrics = a.log, m
		r, err := tlsreload.New(o)
		var fe *tlsreload.FileError
		if errors.As(err, &fe) {
			return nil, fmt.Errorf("%s: %w", names[fe.Role], err)
		}
		if err != nil {
			return nil, err
		}
		a.goBG("tls reload "+o.Name, r.Run)
		return r, nil
	}
	if t.GRPCUseTLS {
		a.grpcTLS, err = open(tlsreload.Options{Name: "grpc", CertFile: t.GRPCCert, KeyFile: t.GRPCKey, CAFile: t.GRPCClientCA, AllowedSANs: t.GRPCClientSANs},
			map[tlsreload.Role]string{tlsreload.Cert: "GRPC_SERVER_TLS_CERT", tlsreload.Key: "GRPC_SERVER_TLS_KEY", tlsreload.CA: "GRPC_CLIENT_TLS_CACERT"})
		if err != nil {
			return err
		}
	}
	if t.HTTPCert != "" {
		a.httpTLS, err = open(tlsreload.Options{Name: "http", CertFile: t.HTTPCert, KeyFile: t.HTTPKey, CAFile: t.HTTPClientCA, NextProtos: []string{"h2", "http/1.1"}},
			map[tlsreload.Role]string{tlsreload.Cert: "HTTP_TLS_CERT", tlsreload.Key: "HTTP_TLS_KEY", tlsreload.CA: "HTTP_CLIENT_TLS_CACERT"})
		if err != nil {
			return err
		}
	}
	if t.RedisCA != "" || t.RedisCert != "" || t.RedisSkipHostname {
		// Without files (REDIS_TLS_SKIP_HOSTNAME_VERIFICATION alone): the
		// system's roots, and no client certificate.
		r, err := open(tlsreload.Options{Name: "redis", CertFile: t.RedisCert, KeyFile: t.RedisKey, CAFile: t.RedisCA},
			map[tlsreload.Role]string{tlsreload.Cert: "REDIS_TLS_CLIENT_CERT", tlsreload.Key: "REDIS_TLS_CLIENT_KEY", tlsreload.CA: "REDIS_TLS_CACERT"})
		if err != nil {
			return err
		}
		a.redisTLS = func(serverName string) *tls.Config { return r.ClientConfig(serverName, t.RedisSkipHostname) }
	}
	if xdsTLS {
		// Without CONFIG_GRPC_XDS_SERVER_TLS_CACERT: the system's roots.
		r, err := open(tlsreload.Options{Name: "xds", CertFile: x.ClientCert, KeyFile: x.ClientKey, CAFile: x.ServerCA},
			map[tlsreload.Role]string{tlsreload.Cert: "CONFIG_GRPC_XDS_CLIENT_TLS_CERT", tlsreload.Key: "CONFIG_GRPC_XDS_CLIENT_TLS_KEY", tlsreload.CA: "CONFIG_GRPC_XDS_SERVER_TLS_CACERT"})
		if err != nil {
			return err
		}
		a.xdsTLS = r.ClientConfig(x.serverName(), false)
	}
	return nil
}

// describeTLS says what a listener serves, for the start line: off, tls,
// or mtls.
func describeTLS(on bool, clientCA string) string {
	switch {
	case !on:
		return "off"
	case clientCA != "":
		return "mtls"
	}
	return "tls"
}
