package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
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

// debugPages are the pages of the debug port beside Go's profiler.
type debugPages struct {
	// ConfigDump is /rlconfig: the descriptor configuration in use.
	ConfigDump func() string
	// Gatherer is /stats: every metric, in Prometheus's text format.
	Gatherer prometheus.Gatherer
}

// maxProfileSeconds is the longest profile or trace the debug port records
// (?seconds=, 30 when not given, as go tool pprof asks): a longer one is
// refused, so that its write timeout can bound every reply.
const maxProfileSeconds = 60

// capSeconds refuses, with 400, a request whose seconds (of a CPU profile,
// a trace or a delta profile) is not a number from over 0 to
// maxProfileSeconds.
func capSeconds(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := r.URL.Query().Get("seconds"); r.URL.Query().Has("seconds") {
			if sec, err := strconv.ParseFloat(v, 64); err != nil || !(sec > 0 && sec <= maxProfileSeconds) {
				w.Header().Set("X-Content-Type-Options", "nosniff")
				http.Error(w, fmt.Sprintf("seconds=%q: give a number of seconds above 0 and at most %d (the longest the debug port records)", v, maxProfileSeconds), http.StatusBadRequest)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// isLoopback reports whether addr, a listener's, is on a loopback address
// only (127.0.0.0/8, ::1); the unspecified address (every interface) is
// not.
func isLoopback(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

// serveDebug serves the reference service's debug port on l until ctx
// ends (DEBUG_HOST/DEBUG_PORT or DEBUG_ADDRESS, off by default): its
// index of pages at /, /rlconfig (the configuration in use), /stats (the
// metrics) and Go's profiler (/debug/pprof/…), for `go tool pprof` under
// load. It is plain HTTP whatever the TLS settings, and asks no key:
// loopback is its place (debugAddress puts it there unless told
// otherwise). Its timeouts bound every connection; a profile records at
// most maxProfileSeconds. Its command line page hides the values of
// secret settings and the passwords of URLs (redactArgs).
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
	srv := &http.Server{
		Handler:           capSeconds(mux),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second, // its requests are GETs without a body
		// A profile or trace writes its reply after it ran: up to
		// maxProfileSeconds, then the time to send it.
		WriteTimeout: maxProfileSeconds*time.Second + 30*time.Second,
		IdleTimeout:  time.Minute,
	}
	// A profile in progress is cut short: the process is stopping.
	failed, err := serveUntil(ctx, srv, l, srv.Close)
	if failed != nil {
		return failed
	}
	return err
}
