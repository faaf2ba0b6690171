// Package debugport is the reference rate-limit service's debug port as an
// HTTP server: an index of its pages at /, /rlconfig (the descriptor
// configuration in use), /stats (the metrics text: every metric in
// Prometheus's text format) and Go's profiler (/debug/pprof/…), for `go
// tool pprof` under load. It is plain HTTP and asks no key: loopback is its
// place, which the caller chooses when it binds the listener.
package debugport

import (
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Pages are what the debug port shows beside Go's profiler.
type Pages struct {
	// ConfigDump is /rlconfig: the descriptor configuration in use.
	ConfigDump func() string
	// Metrics is /stats: every metric, in Prometheus's text format (the
	// reference's name for the page; not the reference's stats sink, nor
	// the REST API's /stats/{client_id}).
	Metrics prometheus.Gatherer
	// Cmdline is /debug/pprof/cmdline: the process's arguments as they may
	// be shown, secrets hidden (pprof's own page would show os.Args).
	Cmdline []string
}

// MaxProfileSeconds is the longest profile or trace the debug port records
// (?seconds=, 30 when not given, as go tool pprof asks): a longer one is
// refused, so that its write timeout can bound every reply.
const MaxProfileSeconds = 60

// NewServer returns the debug port's server, to serve on a listener of the
// caller's. Its timeouts bound every connection; a profile or trace records
// at most MaxProfileSeconds. Close, not Shutdown, stops it: a profile in
// progress is cut short.
func NewServer(p Pages) *http.Server {
	return &http.Server{
		Handler:           capSeconds(newMux(p)),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second, // its requests are GETs without a body
		// A profile or trace writes its reply after it ran: up to
		// MaxProfileSeconds, then the time to send it.
		WriteTimeout: MaxProfileSeconds*time.Second + 30*time.Second,
		IdleTimeout:  time.Minute,
	}
}

// newMux routes the pages, and lists them (with the reference's words) at /.
func newMux(p Pages) *http.ServeMux {
	mux := http.NewServeMux()
	index := map[string]string{}
	handle := func(path, help string, h http.HandlerFunc) {
		mux.HandleFunc(path, h)
		index[path] = help
	}
	handle("/debug/pprof/", "root of various pprof endpoints. hit for help.", pprof.Index)
	handle("/debug/pprof/profile", "CPU profiling endpoint", pprof.Profile)
	handle("/debug/pprof/trace", "trace endpoint", pprof.Trace)
	handle("/rlconfig", "print out the currently loaded configuration for debugging", configText(p.ConfigDump))
	handle("/stats", "print out stats", promhttp.HandlerFor(p.Metrics, promhttp.HandlerOpts{}).ServeHTTP)
	mux.HandleFunc("/debug/pprof/cmdline", cmdline(p.Cmdline))
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		for _, path := range slices.Sorted(maps.Keys(index)) {
			fmt.Fprintf(w, "%s: %s\n", path, index[path])
		}
	})
	return mux
}

// configText serves dump's text.
func configText(dump func() string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, dump())
	}
}

// cmdline serves args as pprof's cmdline page does: NUL-separated.
func cmdline(args []string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, strings.Join(args, "\x00"))
	}
}

// capSeconds refuses, with 400, a request whose seconds (of a CPU profile,
// a trace or a delta profile) is not a number from over 0 to
// MaxProfileSeconds.
func capSeconds(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := r.URL.Query().Get("seconds"); r.URL.Query().Has("seconds") {
			if sec, err := strconv.ParseFloat(v, 64); err != nil || !(sec > 0 && sec <= MaxProfileSeconds) {
				w.Header().Set("X-Content-Type-Options", "nosniff")
				http.Error(w, fmt.Sprintf("seconds=%q: give a number of seconds above 0 and at most %d (the longest the debug port records)", v, MaxProfileSeconds), http.StatusBadRequest)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}
