package debugport

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/throttle-rl/throttle/internal/testkit"
)

// serve starts the debug port's handler of pages on a real listener.
func serve(t *testing.T, p Pages) string {
	t.Helper()
	s := httptest.NewServer(NewServer(p).Handler)
	t.Cleanup(s.Close)
	return s.URL
}

// TestPages: the index lists the reference's pages with its words,
// /rlconfig is the configuration's text, /stats the metrics text, and the
// command line page shows the arguments given, not the process's.
func TestPages(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "throttle_test_total", Help: "A counter."})
	reg.MustRegister(c)
	c.Add(3)
	url := serve(t, Pages{
		ConfigDump: func() string { return "edge.foo: unit=MINUTE requests_per_unit=1\n" },
		Metrics:    reg,
		Cmdline:    []string{"throttle", "serve", "--redis-url", "redis://xxxxx@h/0"},
	})
	for _, tt := range []struct {
		path, want string
	}{
		{"/", "/debug/pprof/: root of various pprof endpoints. hit for help.\n" +
			"/debug/pprof/profile: CPU profiling endpoint\n" +
			"/debug/pprof/trace: trace endpoint\n" +
			"/rlconfig: print out the currently loaded configuration for debugging\n" +
			"/stats: print out stats\n"},
		{"/rlconfig", "edge.foo: unit=MINUTE requests_per_unit=1\n"},
		{"/debug/pprof/cmdline", "throttle\x00serve\x00--redis-url\x00redis://xxxxx@h/0"},
	} {
		code, typ, body := testkit.GetText(t, url+tt.path)
		if code != http.StatusOK || body != tt.want || !strings.HasPrefix(typ, "text/plain") {
			t.Errorf("GET %s = %d %s %q, want 200 text/plain %q", tt.path, code, typ, body, tt.want)
		}
	}
	if code, _, body := testkit.GetText(t, url+"/stats"); code != http.StatusOK || !strings.Contains(body, "throttle_test_total 3\n") {
		t.Errorf("GET /stats = %d %.300q, want 200 and throttle_test_total 3", code, body)
	}
	if code, _, _ := testkit.GetText(t, url+"/nothing"); code != http.StatusNotFound {
		t.Errorf("GET /nothing = %d, want 404", code)
	}
}

// TestProfileSeconds: a profile, trace or delta profile of more than
// MaxProfileSeconds, or of no number of seconds, is refused at once; the
// write timeout outlasts the longest one taken.
func TestProfileSeconds(t *testing.T) {
	url := serve(t, Pages{ConfigDump: func() string { return "" }, Metrics: prometheus.NewRegistry()})
	for _, tt := range []struct {
		path string
		code int
		want string
	}{
		{"/debug/pprof/profile?seconds=61", 400, `seconds="61": give a number of seconds above 0 and at most 60`},
		{"/debug/pprof/trace?seconds=3600", 400, "at most 60"},
		{"/debug/pprof/heap?seconds=x", 400, `seconds="x"`},
		{"/debug/pprof/heap?seconds=0", 400, `seconds="0"`},
		{"/debug/pprof/heap", 200, ""},
	} {
		code, _, body := testkit.GetText(t, url+tt.path)
		if code != tt.code || !strings.Contains(body, tt.want) || body == "" {
			t.Errorf("GET %s = %d %.200q, want %d %q", tt.path, code, body, tt.code, tt.want)
		}
	}
	if srv := NewServer(Pages{}); srv.WriteTimeout <= MaxProfileSeconds*time.Second {
		t.Errorf("WriteTimeout %s: a profile of %ds would be cut", srv.WriteTimeout, MaxProfileSeconds)
	}
}
