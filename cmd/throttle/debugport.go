package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/throttle-rl/throttle/internal/debugport"
)

// redactArgs is args as /debug/pprof/cmdline shows them: the values of
// secretFlags hidden (redactSetting), and the password of any other URL
// too, a flag's value or not.
func redactArgs(args []string) []string {
	out := make([]string, len(args))
	var hideNext secretKind
	for i, a := range args {
		out[i] = a
		if hideNext != 0 {
			out[i], hideNext = redactSetting(hideNext, a), 0
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		kind, secret := secretFlags[name]
		switch {
		case strings.HasPrefix(a, "-") && secret && hasValue:
			out[i] = a[:len(a)-len(value)] + redactSetting(kind, value)
		case strings.HasPrefix(a, "-") && secret:
			hideNext = kind
		case strings.Contains(a, "://"):
			out[i] = redactURL(a)
		}
	}
	return out
}

// listenDebugPort binds the reference service's debug port (package
// debugport) when DEBUG_HOST/DEBUG_PORT or DEBUG_ADDRESS ask for it, and
// serves it until close. Its command line page hides the values of secret
// settings and the passwords of URLs (redactArgs).
func (a *app) listenDebugPort() error {
	addr := a.cfg.debugAddress()
	if addr == "" {
		return nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("debug port (DEBUG_ADDRESS, DEBUG_HOST/DEBUG_PORT): %w", err)
	}
	a.log.Info("serving the debug port", "addr", l.Addr().String())
	if !isLoopback(l.Addr()) {
		a.log.Warn("the debug port listens beyond loopback: whoever reaches it reads Go's profiler (/debug/pprof/), /rlconfig and /stats, in plain HTTP and with no key; give DEBUG_HOST=127.0.0.1 (or a loopback DEBUG_ADDRESS) unless that is meant", "addr", l.Addr().String())
	}
	srv := debugport.NewServer(debugport.Pages{ConfigDump: a.configDump, Metrics: a.metrics, Cmdline: redactArgs(os.Args)})
	a.goBG("debug server", func(ctx context.Context) error {
		// A profile in progress is cut short: the process is stopping.
		failed, err := serveUntil(ctx, srv, l, srv.Close)
		if failed != nil {
			return failed
		}
		return err
	})
	return nil
}

// isLoopback reports whether addr, a listener's, is on a loopback address
// only (127.0.0.0/8, ::1); the unspecified address (every interface) is
// not.
func isLoopback(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}
