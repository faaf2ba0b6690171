package main

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/throttle-rl/throttle/ratelimitsvc"
	"github.com/throttle-rl/throttle/restapi"
)

// listenerSettings are the reference service's listeners, endpoints, logs
// and backend choice, with its names and value syntax.
var listenerSettings = []setting{
	{env: "HOST", flag: "host", ref: upstreamDefault("0.0.0.0"),
		usage: "address the REST port (PORT) listens on, as the reference's HOST (Istio's sample: ::); empty = BIND_ADDRESS",
		set:   func(c *config, v string) error { c.Listen.HTTPHost = v; return nil }},
	{env: "GRPC_HOST", flag: "grpc-host", ref: upstreamDefault("0.0.0.0"),
		usage: "address the gRPC port (GRPC_PORT) listens on, as the reference's GRPC_HOST; empty = BIND_ADDRESS",
		set:   func(c *config, v string) error { c.Listen.GRPCHost = v; return nil }},
	{env: "GRPC_UDS", flag: "grpc-uds", ref: upstreamDefault(""),
		usage: "path of a unix socket gRPC listens on instead of GRPC_HOST:GRPC_PORT (a socket file left there by an earlier " +
			"run is replaced), mode 0660 whatever the umask (its owner and group may connect); empty = the TCP port",
		set: func(c *config, v string) error { c.Listen.GRPCUDS = v; return nil }},
	{env: "GRPC_MAX_CONNECTION_AGE", flag: "grpc-max-connection-age", def: "24h", ref: upstreamDefault("24h"),
		usage: "a gRPC connection is asked to close (GOAWAY) after this long, ±10 %, so Envoys spread over new replicas",
		set:   func(c *config, v string) (err error) { c.Listen.MaxConnAge, err = parseDuration(v); return }},
	{env: "GRPC_MAX_CONNECTION_AGE_GRACE", flag: "grpc-max-connection-age-grace", def: "1h", ref: upstreamDefault("1h"),
		usage: "how long calls in flight on a connection past GRPC_MAX_CONNECTION_AGE may finish before it is closed",
		set:   func(c *config, v string) (err error) { c.Listen.MaxConnAgeGrace, err = parseDuration(v); return }},
	{env: "DEBUG_HOST", flag: "debug-host", ref: upstreamDefault("0.0.0.0"),
		usage: "with DEBUG_PORT: address of the reference's debug port (its index at /, /rlconfig, /stats, /debug/pprof/), " +
			"plain HTTP, no key asked; empty = 127.0.0.1 (loopback), whatever BIND_ADDRESS; any other address is logged as " +
			"a warning at start",
		set: func(c *config, v string) error { c.Listen.DebugHost = v; return nil }},
	{env: "DEBUG_PORT", flag: "debug-port", ref: upstreamDefault("6070"),
		usage: "the reference's debug port (6070 there, where it is always on); empty = off (DEBUG_HOST alone means 6070); " +
			"not with DEBUG_ADDRESS",
		set: func(c *config, v string) (err error) { c.Listen.DebugPort, err = parseOptionalInt(v); return }},
	{env: "LOG_FORMAT", flag: "log-format", def: "json", ref: upstreamDefault("text"),
		usage: "json or text (the reference's default is text)",
		set:   func(c *config, v string) (err error) { c.LogFormat, err = parseLogFormat(v); return }},
	{env: "BACKEND_TYPE", flag: "backend-type", def: "redis", ref: upstreamDefault("redis"),
		usage: "the reference's counter backend: redis (counters in Redis with REDIS_URL, else in memory); memcache is " +
			"refused, Throttle has no memcached backend",
		set: func(c *config, v string) error { return parseBackendType(v) }},
	{env: "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", flag: "healthy-with-at-least-one-config-loaded", def: "false", ref: upstreamDefault("false"),
		usage: "GET /healthcheck answers 500 until a descriptor configuration has loaded (files or xDS), as the reference's",
		set:   func(c *config, v string) (err error) { c.HealthyWithConfig, err = parseBool(v); return }},
	{env: "LIMIT_RESPONSE_HEADERS_ENABLED", flag: "limit-response-headers-enabled", def: "false", ref: upstreamDefault("false"),
		usage: "add the reference's three headers (LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER, LIMIT_RESET_HEADER) of the " +
			"descriptor closest to its limit to gRPC rate-limit responses, for Envoy to add to its reply; beside " +
			"RATE_LIMIT_RESPONSE_HEADERS' sets when both are on",
		set: func(c *config, v string) (err error) { c.LimitHeaders.Enabled, err = parseBool(v); return }},
	{env: "LIMIT_LIMIT_HEADER", flag: "limit-limit-header", def: "RateLimit-Limit", ref: upstreamDefault("RateLimit-Limit"),
		usage: "with LIMIT_RESPONSE_HEADERS_ENABLED: the header carrying requests_per_unit",
		set:   func(c *config, v string) error { c.LimitHeaders.Limit = v; return nil }},
	{env: "LIMIT_REMAINING_HEADER", flag: "limit-remaining-header", def: "RateLimit-Remaining", ref: upstreamDefault("RateLimit-Remaining"),
		usage: "with LIMIT_RESPONSE_HEADERS_ENABLED: the header carrying the requests left in the window",
		set:   func(c *config, v string) error { c.LimitHeaders.Remaining = v; return nil }},
	{env: "LIMIT_RESET_HEADER", flag: "limit-reset-header", def: "RateLimit-Reset", ref: upstreamDefault("RateLimit-Reset"),
		usage: "with LIMIT_RESPONSE_HEADERS_ENABLED: the header carrying the seconds until the window resets",
		set:   func(c *config, v string) error { c.LimitHeaders.Reset = v; return nil }},
}

// listenConfig is where the ports listen, beyond PORT and GRPC_PORT.
type listenConfig struct {
	HTTPHost, GRPCHost, DebugHost string
	DebugPort                     int // 0: no debug port (unless DebugHost)
	GRPCUDS                       string
	MaxConnAge, MaxConnAgeGrace   time.Duration
}

// limitHeadersConfig is LIMIT_RESPONSE_HEADERS_ENABLED and its names.
type limitHeadersConfig struct {
	Enabled bool
	ratelimitsvc.LimitHeaders
}

// defaultDebugPort is the reference's DEBUG_PORT.
const defaultDebugPort = 6070

// debugLoopback is the debug port's host unless DEBUG_HOST (or
// DEBUG_ADDRESS's host) names another: its pages (Go's profiler, the
// configuration, every metric) ask no key, so they stay on the machine
// unless the operator says otherwise.
const debugLoopback = "127.0.0.1"

// debugAddress is where the debug port listens: DEBUG_ADDRESS, or
// DEBUG_HOST:DEBUG_PORT, on debugLoopback when no host is given; "" for
// none.
func (c *config) debugAddress() string {
	l := c.Listen
	switch {
	case c.DebugAddress != "":
		if host, port, err := net.SplitHostPort(c.DebugAddress); err == nil && host == "" {
			return net.JoinHostPort(debugLoopback, port)
		}
		return c.DebugAddress
	case l.DebugPort == 0 && l.DebugHost == "":
		return ""
	}
	return joinHostPort(cmp.Or(l.DebugHost, debugLoopback), cmp.Or(l.DebugPort, defaultDebugPort))
}

// validateListen checks the reference's listener settings.
func (c *config) validateListen() []error {
	var errs []error
	if c.DebugAddress != "" && (c.Listen.DebugPort != 0 || c.Listen.DebugHost != "") {
		errs = append(errs, errors.New("DEBUG_ADDRESS and DEBUG_HOST/DEBUG_PORT are both set: give the debug port one way"))
	}
	if p := c.Listen.DebugPort; p < 0 || p > 65535 {
		errs = append(errs, fmt.Errorf("DEBUG_PORT: %d is not a port (1-65535)", p))
	}
	h := c.LimitHeaders
	if h.Enabled && (h.Limit == "" || h.Remaining == "" || h.Reset == "") {
		errs = append(errs, errors.New("LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER and LIMIT_RESET_HEADER must not be empty with LIMIT_RESPONSE_HEADERS_ENABLED"))
	}
	return errs
}

// parseOptionalInt reads a whole number; empty is 0.
func parseOptionalInt(v string) (int, error) {
	if v == "" {
		return 0, nil
	}
	return parseInt(v)
}

// parseLogFormat reads json or text, in any case.
func parseLogFormat(v string) (string, error) {
	switch f := strings.ToLower(v); f {
	case "json", "text":
		return f, nil
	}
	return "", fmt.Errorf("%q is not json or text", v)
}

// parseBackendType checks the reference's BACKEND_TYPE: redis, what
// Throttle does (Redis with REDIS_URL, else memory), and nothing else.
func parseBackendType(v string) error {
	switch strings.ToLower(v) {
	case "redis":
		return nil
	case "memcache":
		return errors.New("memcache: Throttle has no memcached backend; keep counters in Redis (REDIS_URL, the reference's REDIS_* settings) or, on a single replica, in memory (no REDIS_URL)")
	}
	return fmt.Errorf("%q is not redis (the one backend of the reference Throttle has; memcache is not)", v)
}

// joinHostPort is host:port, with brackets around an IPv6 host.
func joinHostPort(host string, port int) string {
	return net.JoinHostPort(host, strconv.Itoa(port))
}

// httpAddress is where the REST port listens: HOST, else BIND_ADDRESS.
func (c *config) httpAddress() string {
	return joinHostPort(cmp.Or(c.Listen.HTTPHost, c.BindAddress), c.Port)
}

// grpcAddress is where the gRPC port listens: GRPC_HOST, else BIND_ADDRESS.
func (c *config) grpcAddress() string {
	return joinHostPort(cmp.Or(c.Listen.GRPCHost, c.BindAddress), c.GRPCPort)
}

// limitHeaders is ratelimitsvc's LimitHeaders, nil when off.
func (c *config) limitHeaders() *ratelimitsvc.LimitHeaders {
	if !c.LimitHeaders.Enabled {
		return nil
	}
	h := c.LimitHeaders.LimitHeaders
	return &h
}

// udsMode is the mode of the GRPC_UDS socket: its owner and group may
// connect (a sidecar Envoy shares the pod's group), no one else, whatever
// the umask (under umask 000 the socket would be 0777: any local user could
// spend every domain's counters).
const udsMode = 0o660

// listenGRPC binds the gRPC port: GRPC_UDS, else GRPC_HOST:GRPC_PORT. A
// socket file at GRPC_UDS (an earlier run's) is removed first; any other
// file there is an error. The socket is made udsMode before any call is
// served.
func listenGRPC(c *config) (net.Listener, error) {
	if p := c.Listen.GRPCUDS; p != "" {
		if fi, err := os.Lstat(p); err == nil && fi.Mode()&os.ModeSocket != 0 {
			_ = os.Remove(p)
		}
		l, err := net.Listen("unix", p)
		if err != nil {
			return nil, fmt.Errorf("GRPC_UDS: %w", err)
		}
		if err := os.Chmod(p, udsMode); err != nil {
			l.Close()
			return nil, fmt.Errorf("GRPC_UDS: %w", err)
		}
		return l, nil
	}
	l, err := net.Listen("tcp", c.grpcAddress())
	if err != nil {
		return nil, fmt.Errorf("GRPC_PORT: %w", err)
	}
	return l, nil
}

// healthcheck is GET /healthcheck's configuration: with
// REDIS_HEALTH_CHECK_ACTIVE_CONNECTION, every Redis master must answer; with
// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED, a descriptor configuration of at
// least one domain must have loaded (files or xDS), as the reference's
// (an empty xDS snapshot is a configuration without domains).
func (a *app) healthcheck() restapi.Healthcheck {
	var h restapi.Healthcheck
	if a.cfg.HealthyWithConfig {
		h.ConfigLoaded = func() bool {
			if a.current == nil {
				return false
			}
			c := a.current()
			return c != nil && c.DomainCount() > 0
		}
	}
	if a.cfg.RedisHealthCheck && a.ready != nil {
		h.Redis = a.ready // REDIS_HEALTH_CHECK_ACTIVE_CONNECTION: every master answers
	}
	return h
}
