package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"strings"
	"time"
)

// secretFlags are the flags whose values /debug/pprof/cmdline hides: keys,
// and URLs (whose passwords it hides).
var secretFlags = map[string]bool{"admin-api-key": true, "otel-exporter-otlp-headers": true, "redis-url": true, "database-url": true,
	"redis-auth": true, "redis-sentinel-auth": true, "redis-persecond-url": true, "redis-persecond-auth": true, "redis-persecond-sentinel-auth": true}

// redactArgs is args with the values of secretFlags replaced: a URL's
// password, anything else whole.
func redactArgs(args []string) []string {
	out := make([]string, len(args))
	hideNext := ""
	for i, a := range args {
		out[i] = a
		if hideNext != "" {
			out[i], hideNext = redactFlag(hideNext, a), ""
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch {
		case !strings.HasPrefix(a, "-") || !secretFlags[name]:
		case hasValue:
			out[i] = a[:len(a)-len(value)] + redactFlag(name, value)
		default:
			hideNext = name
		}
	}
	return out
}

func redactFlag(name, value string) string {
	if strings.HasSuffix(name, "-url") {
		return redactURL(value)
	}
	return redacted
}

// serveDebug serves Go's profiler (/debug/pprof/…) on l until ctx ends
// (setting DEBUG_ADDRESS, off by default: bind it to loopback). It is the
// reference service's debug port, for `go tool pprof` under load. It is
// plain HTTP whatever the TLS settings: loopback is its place. Its command
// line page hides passwords and keys given as flags.
func serveDebug(ctx context.Context, l net.Listener) error {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, strings.Join(redactArgs(os.Args), "\x00"))
	})
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	// A profile in progress is cut short: the process is stopping.
	err := srv.Close()
	if serr := <-done; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}
