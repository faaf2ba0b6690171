package refstats

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/throttle-rl/throttle/internal/testkit"
)

// BenchmarkUnaryCall: counting one gRPC call and sending its response time
// to each sink (the only stat sent at once, not at a flush).
func BenchmarkUnaryCall(b *testing.B) {

	for _, tt := range []struct {
		name string
		sink func(b *testing.B) Sink
	}{
		{"statsd", func(b *testing.B) Sink {
			host, port, _ := net.SplitHostPort(testkit.DiscardUDP(b))
			p, _ := strconv.Atoi(port)
			return NewStatsdSink(host, p, "udp", slog.New(slog.DiscardHandler))
		}},
		{"dogstatsd", func(b *testing.B) Sink {
			s, err := NewDogStatsdSink(testkit.DiscardUDP(b), nil)
			if err != nil {
				b.Fatal(err)
			}
			return s
		}},
		{"prometheus", func(b *testing.B) Sink {
			s, err := NewPrometheusSink(DefaultMapping(false))
			if err != nil {
				b.Fatal(err)
			}
			return s
		}},
	} {
		b.Run(tt.name, func(b *testing.B) {
			s := New(tt.sink(b), Options{})
			b.Cleanup(func() { _ = s.Close(context.Background()) })
			b.ReportAllocs()
			for b.Loop() {
				s.UnaryCall("/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", time.Millisecond)
			}
		})
	}
}
