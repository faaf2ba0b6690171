package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
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

// debugPages are the pages of the debug port beside Go's profiler.
type debugPages struct {
	// ConfigDump is /rlconfig: the descriptor configuration in use.
	ConfigDump func() string
	// Gatherer is /stats: every metric, in Prometheus's text format.
	Gatherer prometheus.Gatherer
}

// serveDebug serves the reference service's debug port on l until ctx
// ends (DEBUG_HOST/DEBUG_PORT or DEBUG_ADDRESS, off by default): its
// index of pages at /, /rlconfig (the configuration in use), /stats (the
// metrics) and Go's profiler (/debug/pprof/…), for `go tool pprof` under
// load. It is plain HTTP whatever the TLS settings: loopback is its place.
// Its command line page hides passwords and keys given as flags.
func serveDebug(ctx context.Context, l net.Listener, pages debugPages) error {
	mux := http.NewServeMux()
	index := map[string]string{}
	handle := func(path, help string, h http.HandlerFunc) {
		mux.HandleFunc(path, h)
		index[path] = help
	}
	handle("/debug/pprof/", "root of various pprof endpoints. hit for help.", pprof.Index)
	handle("/debug/pprof/profile", "CPU profiling endpoint", pprof.Profile)
	handle("/debug/pprof/trace", "trace endpoint", pprof.Trace)
	handle("/rlconfig", "print out the currently loaded configuration for debugging", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, pages.ConfigDump())
	})
	handle("/stats", "print out stats", promhttp.HandlerFor(pages.Gatherer, promhttp.HandlerOpts{}).ServeHTTP)
	mux.HandleFunc("/debug/pprof/cmdline", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, strings.Join(redactArgs(os.Args), "\x00"))
	})
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		for _, path := range slices.Sorted(maps.Keys(index)) {
			fmt.Fprintf(w, "%s: %s\n", path, index[path])
		}
	})
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
