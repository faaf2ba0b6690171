package xdsconfig

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/throttle-rl/throttle/descriptors"
	"github.com/throttle-rl/throttle/internal/testkit/certtest"
	"github.com/throttle-rl/throttle/internal/testkit/logbuf"
	"github.com/throttle-rl/throttle/internal/testkit/xdstest"
)

const nodeID = "ratelimit-node"

// perSecond is a RateLimitConfig of domain edge: key k, n per second.
func perSecond(name string, n uint32) *rlsconf.RateLimitConfig {
	return &rlsconf.RateLimitConfig{Name: name, Domain: "edge", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "k", RateLimit: limit(rlsconf.RateLimitUnit_SECOND, n)}}}
}

// limitOf is the requests per unit of edge's k in c; 0 when none.
func limitOf(c *descriptors.Config) uint32 {
	if m := c.Match("edge", []descriptors.Entry{{Key: "k", Value: "v"}}); m != nil {
		return m.Limit.RequestsPerUnit
	}
	return 0
}

// loads records the calls of OnLoad.
type loads struct {
	mu   sync.Mutex
	errs []error
}

func (l *loads) add(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, err)
}

func (l *loads) get() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs...)
}

// run runs c until the test ends and checks that Run returns then.
func run(t *testing.T, c *Client) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("Run still running 5s after its context ended")
		}
	})
}

// waitFor polls cond until it holds or 10s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 10s", what)
		}
	}
}

// TestClient follows a control plane over mTLS through a first snapshot,
// an update, a refused one, and a restart of the control plane.
func TestClient(t *testing.T) {
	ca := certtest.NewCA(t, "xds CA")
	srv := xdstest.Start(t, xdstest.Options{TLS: xdstest.MTLS(t, ca)})
	client := ca.Issue(t, certtest.Leaf{CommonName: "ratelimit"})
	var logs logbuf.Buffer
	var got loads
	reg := prometheus.NewRegistry()
	c, err := New(Options{
		Server: srv.Addr, NodeID: nodeID, NodeMetadata: map[string]string{"cluster": "c1"}, Headers: map[string]string{"x-token": "s3cret"},
		TLS: certtest.ClientTLS(t, ca, "127.0.0.1", &client), ConnectTimeout: time.Second,
		Backoff: Backoff{Initial: 20 * time.Millisecond, Max: 100 * time.Millisecond, RandomFactor: 0.5, Jitter: true},
		OnLoad:  got.add, Log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})), Registerer: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	run(t, c)

	// Before any snapshot: nothing loaded, nothing received.
	first := srv.WaitRequest(t, 10*time.Second, "first request", func(*discovery.DiscoveryRequest) bool { return true })
	if id, md := first.GetNode().GetId(), first.GetNode().GetMetadata().GetFields()["cluster"].GetStringValue(); id != nodeID || md != "c1" {
		t.Errorf("node id %q, metadata cluster %q; want %q, c1", id, md, nodeID)
	}
	if h := srv.Headers(); len(h) == 0 || strings.Join(h[0].Get("x-token"), ",") != "s3cret" {
		t.Errorf("stream headers %v, want x-token: s3cret", h)
	}
	select {
	case <-c.Received():
		t.Fatal("Received closed before any response")
	default:
	}
	if c.Current() != nil {
		t.Fatal("Current is not nil before any response")
	}

	srv.Set(t, nodeID, "1", perSecond("eg", 3))
	srv.WaitRequest(t, 10*time.Second, "ACK of version 1", xdstest.ACK("1"))
	<-c.Received()
	if n := limitOf(c.Current()); n != 3 {
		t.Fatalf("after version 1: limit %d, want 3", n)
	}

	srv.Set(t, nodeID, "2", perSecond("eg", 5))
	srv.WaitRequest(t, 10*time.Second, "ACK of version 2", xdstest.ACK("2"))
	if n := limitOf(c.Current()); n != 5 {
		t.Fatalf("after version 2: limit %d, want 5", n)
	}

	bad := perSecond("eg", 1)
	bad.Descriptors[0].RateLimit.Unit = rlsconf.RateLimitUnit_UNKNOWN
	srv.Set(t, nodeID, "3", bad)
	nack := srv.WaitRequest(t, 10*time.Second, "NACK of version 3", xdstest.NACK)
	want := `RateLimitConfig "eg": domain "edge" › descriptors[0] › rate_limit: invalid rate limit unit 'UNKNOWN'`
	if msg := nack.GetErrorDetail().GetMessage(); msg != want || nack.GetVersionInfo() != "2" {
		t.Errorf("NACK: version %q, error_detail %q; want version 2 (the last accepted), %q", nack.GetVersionInfo(), msg, want)
	}
	// The control plane sends version 3 again at each NACK: refused again,
	// once per repeatPause, without another log line or call.
	time.Sleep(repeatPause + repeatPause/2)
	if n := limitOf(c.Current()); n != 5 {
		t.Errorf("after the refused version 3: limit %d, want 5 (version 2's)", n)
	}

	srv.Set(t, nodeID, "4", perSecond("eg", 7))
	srv.WaitRequest(t, 10*time.Second, "ACK of version 4", xdstest.ACK("4"))
	if n := limitOf(c.Current()); n != 7 {
		t.Fatalf("after version 4: limit %d, want 7", n)
	}

	// The control plane goes away: the configuration stays; it comes back
	// on the same address with a new snapshot, which is followed.
	srv.Stop()
	waitFor(t, "disconnection", func() bool { return testutil.ToFloat64(c.m.connected) == 0 })
	time.Sleep(300 * time.Millisecond) // several attempts fail meanwhile
	if n := limitOf(c.Current()); n != 7 {
		t.Errorf("with the control plane gone: limit %d, want 7 (kept)", n)
	}
	srv2 := xdstest.Start(t, xdstest.Options{Addr: srv.Addr, TLS: xdstest.MTLS(t, ca)})
	srv2.Set(t, nodeID, "5", perSecond("eg", 9))
	srv2.WaitRequest(t, 10*time.Second, "ACK of version 5 after the restart", xdstest.ACK("5"))
	if n := limitOf(c.Current()); n != 9 {
		t.Fatalf("after the restart: limit %d, want 9", n)
	}

	var calls []string
	for _, err := range got.get() {
		s := "loaded"
		if err != nil {
			s = "refused: " + err.Error()
		}
		calls = append(calls, s)
	}
	wantCalls := []string{"loaded", "loaded", "refused: " + want, "loaded", "loaded"}
	if strings.Join(calls, "\n") != strings.Join(wantCalls, "\n") {
		t.Errorf("OnLoad calls:\n%s\nwant:\n%s", strings.Join(calls, "\n"), strings.Join(wantCalls, "\n"))
	}
	if l, r := testutil.ToFloat64(c.m.responses.WithLabelValues(loaded)), testutil.ToFloat64(c.m.responses.WithLabelValues(refused)); l != 4 || r != 1 {
		t.Errorf("throttle_xds_responses_total: loaded %v, refused %v; want 4, 1", l, r)
	}
	text := logs.String()
	for line, n := range map[string]int{
		"configuration refused (NACK)": 1, "xDS stream ended": 1, "cannot get the rate-limit": 0, "reached again": 1, "configuration loaded": 4,
	} {
		if got := strings.Count(text, line); got != n {
			t.Errorf("log lines with %q: %d, want %d:\n%s", line, got, n, text)
		}
	}
	if strings.Contains(text, "s3cret") {
		t.Errorf("a header value was logged:\n%s", text)
	}
}

// TestClientUnreachable: a control plane that never answers is logged
// once, however many attempts fail, and Run still ends with its context.
func TestClientUnreachable(t *testing.T) {
	srv := xdstest.Start(t, xdstest.Options{})
	srv.Stop() // its port is now closed
	var logs logbuf.Buffer
	c, err := New(Options{Server: srv.Addr, Backoff: Backoff{Initial: 10 * time.Millisecond, Max: 20 * time.Millisecond},
		Log: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	run(t, c)
	waitFor(t, "5 failed attempts", func() bool { return strings.Count(logs.String(), "still unreachable") >= 4 })
	if n := strings.Count(logs.String(), "cannot get the rate-limit configuration"); n != 1 {
		t.Errorf("%d warnings for the unreachable control plane, want 1:\n%s", n, logs.String())
	}
}

// TestClientMaxRecvMsgSize: a response larger than MaxRecvMsgSize is not
// taken.
func TestClientMaxRecvMsgSize(t *testing.T) {
	srv := xdstest.Start(t, xdstest.Options{})
	var logs logbuf.Buffer
	c, err := New(Options{Server: srv.Addr, NodeID: nodeID, MaxRecvMsgSize: 64, Backoff: Backoff{Initial: time.Minute, Max: time.Minute},
		Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	run(t, c)
	srv.Set(t, nodeID, "1", perSecond(strings.Repeat("n", 100), 3))
	waitFor(t, "the refusal of the large response", func() bool { return strings.Contains(logs.String(), "larger than max") })
	if c.Current() != nil {
		t.Errorf("a response over MaxRecvMsgSize was loaded")
	}
}

func TestNewRefuses(t *testing.T) {
	ok := Backoff{Initial: time.Second, Max: time.Second}
	for _, tt := range []struct {
		name string
		o    Options
		want string
	}{
		{"no server", Options{Backoff: ok}, "xdsconfig: no control plane address"},
		{"bad backoff", Options{Server: "cp:18000"}, "xdsconfig: backoff: the initial interval must be positive"},
		{"negative size", Options{Server: "cp:18000", Backoff: ok, MaxRecvMsgSize: -1}, "xdsconfig: max receive message size -1 is negative"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := New(tt.o); err == nil || err.Error() != tt.want {
				t.Errorf("New: %v, want %s", err, tt.want)
			}
		})
	}
}
