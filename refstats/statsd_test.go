package refstats

import (
	"context"
	"log/slog"
	"net"
	"strconv"
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
