package xdsconfig

import (
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/throttle-rl/throttle/internal/testkit/logbuf"
	"github.com/throttle-rl/throttle/internal/testkit/xdstest"
)

// badPerSecond is perSecond(name, 1) with a unit the loader refuses.
func badPerSecond(name string) *rlsconf.RateLimitConfig {
	c := perSecond(name, 1)
	c.Descriptors[0].RateLimit.Unit = rlsconf.RateLimitUnit_UNKNOWN
	return c
}

// TestNackPauses: two bad snapshots that take turns (the control plane
// swaps them as it sends each, so every response differs from the one
// before) are refused with a pause before every NACK after the first,
// growing; each is logged and counted once, and the next good snapshot is
// loaded at once. Before, only the last refused digest was remembered:
// they reloaded and NACKed in a tight loop (thousands a second), each one
// logged. Also: headers sent without TLS are warned about, by name.
func TestNackPauses(t *testing.T) {
	var version atomic.Int64
	version.Store(1)
	swapping := atomic.Bool{}
	srv := xdstest.Start(t, xdstest.Options{OnResponse: func(s *xdstest.Server, v string) {
		if !swapping.Load() {
			return
		}
		next := badPerSecond("a")
		if n, _ := strconv.Atoi(v); n%2 == 0 {
			next = badPerSecond("b")
		}
		s.Set(t, nodeID, strconv.FormatInt(version.Add(1), 10), next)
	}})
	var logs logbuf.Buffer
	c, err := New(Options{Server: srv.Addr, NodeID: nodeID, Headers: map[string]string{"authorization": "Bearer s3cret"},
		Backoff: Backoff{Initial: time.Minute, Max: time.Minute}, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if text := logs.String(); !strings.Contains(text, "level=WARN") || !strings.Contains(text, "in plaintext") || !strings.Contains(text, "headers=[authorization]") || strings.Contains(text, "s3cret") {
		t.Errorf("headers without TLS: the log does not warn by the headers' names alone:\n%s", text)
	}
	run(t, c)
	srv.Set(t, nodeID, "1", perSecond("eg", 3))
	srv.WaitRequest(t, 10*time.Second, "ACK of version 1", xdstest.ACK("1"))

	swapping.Store(true)
	start := time.Now()
	srv.Set(t, nodeID, strconv.FormatInt(version.Add(1), 10), badPerSecond("a"))
	srv.WaitRequest(t, 10*time.Second, "the first NACK", xdstest.NACK)
	time.Sleep(3500 * time.Millisecond) // pauses of 0, 1s, 2s: NACKs at about 0s, 1s, 3s
	swapping.Store(false)
	nacks := 0
	for _, r := range srv.Requests() {
		if r.GetErrorDetail() != nil {
			nacks++
		}
	}
	if nacks < 2 || nacks > 4 {
		t.Errorf("%d NACKs in %s of two bad snapshots taking turns, want 3 (pauses of 0, 1s, 2s)", nacks, time.Since(start).Round(time.Millisecond))
	}
	if n := strings.Count(logs.String(), "configuration refused (NACK)"); n != 2 {
		t.Errorf("%d log lines of refusals, want 2 (one per snapshot):\n%.3000s", n, logs.String())
	}
	if r := testutil.ToFloat64(c.m.responses.WithLabelValues(refused)); r != 2 {
		t.Errorf("throttle_xds_responses_total{result=refused} = %v, want 2", r)
	}

	// A good snapshot ends it: loaded within the pause in progress (at most
	// 4s here), and the next bad one is NACKed at once.
	good := strconv.FormatInt(version.Add(1), 10)
	srv.Set(t, nodeID, good, perSecond("eg", 5))
	srv.WaitRequest(t, 10*time.Second, "ACK of the good snapshot", xdstest.ACK(good))
	if n := limitOf(c.Current()); n != 5 {
		t.Fatalf("after the good snapshot: limit %d, want 5", n)
	}
	before := len(srv.Requests())
	sent := time.Now()
	srv.Set(t, nodeID, strconv.FormatInt(version.Add(1), 10), badPerSecond("c"))
	waitFor(t, "the NACK after a load", func() bool {
		return slices.ContainsFunc(srv.Requests()[before:], func(r *discovery.DiscoveryRequest) bool { return r.GetErrorDetail() != nil })
	})
	if waited := time.Since(sent); waited > 900*time.Millisecond {
		t.Errorf("the first NACK after a load took %s, want no pause", waited)
	}
}

// TestNackDetailCapped: a refusal whose reason is longer than
// maxNackDetail (it quotes a 10 KiB resource name) is NACKed and logged
// with maxNackDetail bytes at most, saying how much was cut.
func TestNackDetailCapped(t *testing.T) {
	srv := xdstest.Start(t, xdstest.Options{})
	var logs logbuf.Buffer
	c, err := New(Options{Server: srv.Addr, NodeID: nodeID, Backoff: Backoff{Initial: time.Minute, Max: time.Minute},
		Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	run(t, c)
	srv.Set(t, nodeID, "1", badPerSecond(strings.Repeat("é", 5<<10)))
	nack := srv.WaitRequest(t, 10*time.Second, "NACK", xdstest.NACK)
	msg := nack.GetErrorDetail().GetMessage()
	if len(msg) > maxNackDetail || !utf8.ValidString(msg) || !strings.Contains(msg, "bytes more)") || !strings.HasPrefix(msg, `RateLimitConfig "éé`) {
		t.Errorf("NACK detail of %d bytes (valid UTF-8: %v), want at most %d, cut on a character and saying so: %.100q…%q",
			len(msg), utf8.ValidString(msg), maxNackDetail, msg, msg[max(0, len(msg)-40):])
	}
	waitFor(t, "the refusal's log line", func() bool { return strings.Contains(logs.String(), "configuration refused") })
	for _, line := range strings.Split(logs.String(), "\n") {
		if len(line) > maxNackDetail+512 {
			t.Errorf("a log line of %d bytes, want the detail capped at %d: %.200q", len(line), maxNackDetail, line)
		}
	}
}

func TestCapDetail(t *testing.T) {
	for _, n := range []int{0, 10, maxNackDetail, maxNackDetail + 1, 3 * maxNackDetail} {
		for _, unit := range []string{"x", "é", "日"} {
			msg := strings.Repeat(unit, n/len(unit))
			got := capDetail(msg)
			switch {
			case len(msg) <= maxNackDetail && got != msg:
				t.Errorf("capDetail of %d bytes changed it", len(msg))
			case len(got) > maxNackDetail || !utf8.ValidString(got):
				t.Errorf("capDetail of %d bytes of %q: %d bytes, valid %v", len(msg), unit, len(got), utf8.ValidString(got))
			}
		}
	}
}
