package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"
)

// listenerSettings are the reference service's listeners: the REST and
// gRPC ports' addresses, the gRPC socket and connection age, and the debug
// port, with its names and value syntax.
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
}

// listenConfig is where the ports listen, beyond PORT and GRPC_PORT.
type listenConfig struct {
	HTTPHost, GRPCHost, DebugHost string
	DebugPort                     int // 0: no debug port (unless DebugHost)
	GRPCUDS                       string
	MaxConnAge, MaxConnAgeGrace   time.Duration
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
	return errs
}

// parseOptionalInt reads a whole number; empty is 0.
func parseOptionalInt(v string) (int, error) {
	if v == "" {
		return 0, nil
	}
	return parseInt(v)
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

// listen binds every port before any is served, so a taken port fails the
// start; the debug port and the stats sink's PROMETHEUS_ADDR are served at
// once.
func (a *app) listen(context.Context) error {
	cfg := a.cfg
	var err error
	if a.httpLis, err = net.Listen("tcp", a.httpSrv.Addr); err != nil {
		return fmt.Errorf("PORT: %w", err)
	}
	a.onClose(func() { a.httpLis.Close() })
	if a.grpcLis, err = listenGRPC(cfg); err != nil {
		return err
	}
	a.onClose(func() { a.grpcLis.Close() })
	if err := a.listenDebugPort(); err != nil {
		return err
	}
	return a.listenStatsSink()
}
