package refstats

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestStatsdLines: gostats' sink writes NAME:VALUE|c and |ms lines.
func TestStatsdLines(t *testing.T) {
	addr, read := udpLines(t)
	host, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	s := New(NewStatsdSink(host, p, "udp", slog.New(slog.DiscardHandler)), Options{})
	s.DescriptorCounter("edge", "path_/a", TotalHits).Add(3)
	s.UnaryCall("/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", 4*time.Millisecond)
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	read("ratelimit.service.rate_limit.edge.path_/a.total_hits:3|c",
		"ratelimit_server.ShouldRateLimit.total_requests:1|c",
		"ratelimit_server.ShouldRateLimit.response_time:4|ms")
}

// TestStatsdNoInjection: a domain or value a request carries never adds a
// line of its own to the statsd packet, nor a tag: newlines, ':', '|',
// '#' and ".__" are written '_' (ratelimit.service.rate_limit.zz_INJECTED…),
// and a name is at most 256 bytes before its stat.
func TestStatsdNoInjection(t *testing.T) {
	addr, read := udpLines(t)
	host, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	s := New(NewStatsdSink(host, p, "udp", slog.New(slog.DiscardHandler)), Options{})
	s.DomainNotFound("zz\nINJECTED.evil:999|c\nx", 1)
	s.DescriptorCounter("edge", "user_a#b.__role=admin\r\tz", TotalHits).Add(2)
	s.DescriptorCounter("edge", "path_"+strings.Repeat("p", 1000), TotalHits).Add(3)
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	long := "ratelimit.service.rate_limit." + shortKey("edge.path_"+strings.Repeat("p", 1000)) + ".total_hits"
	lines := read("ratelimit.service.rate_limit.zz_INJECTED.evil_999_c_x.domain_not_found:1|c",
		"ratelimit.service.rate_limit.edge.user_a_b._role=admin__z.total_hits:2|c",
		long+":3|c")
	for _, l := range lines {
		if strings.HasPrefix(l, "INJECTED") || strings.HasPrefix(l, "x.") || strings.Contains(l, ".__") {
			t.Errorf("line %q: the request's text made a line or a tag", l)
		}
	}
	if n := len(long) - len("ratelimit.service.rate_limit.") - len(".total_hits"); n != 256 {
		t.Errorf("the long key is %d bytes in the name, want 256", n)
	}
}
