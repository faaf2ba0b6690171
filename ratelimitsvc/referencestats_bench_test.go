package ratelimitsvc_test

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"sync/atomic"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/ratelimitsvc"
	"github.com/throttle-rl/throttle/refstats"

	"github.com/throttle-rl/throttle/internal/testkit"
)

// BenchmarkReferenceStats: the cost of the reference's stats per Envoy
// call of two descriptors, on the memory store: off, and on with each sink.
// direct calls ShouldRateLimit itself, from one goroutine (the descriptor
// counters: the same for every sink, which they reach only at a flush; 2
// descriptors, 4 counters a call); grpc goes through a
// real listener, where the interceptor also counts the call and sends its
// response time to the sink at once.
func BenchmarkReferenceStats(b *testing.B) {
	cfg, err := descriptorsForBench()
	if err != nil {
		b.Fatal(err)
	}
	sinks := []struct {
		name string
		sink func(b *testing.B) refstats.Sink
	}{
		{"off", nil},
		{"statsd", func(b *testing.B) refstats.Sink {
			addr := testkit.DiscardUDP(b)
			host, port, _ := net.SplitHostPort(addr)
			p, _ := strconv.Atoi(port)
			return refstats.NewStatsdSink(host, p, "udp", slog.New(slog.DiscardHandler))
		}},
		{"dogstatsd", func(b *testing.B) refstats.Sink {
			s, err := refstats.NewDogStatsdSink(testkit.DiscardUDP(b), nil)
			if err != nil {
				b.Fatal(err)
			}
			return s
		}},
		{"prometheus", func(b *testing.B) refstats.Sink {
			s, err := refstats.NewPrometheusSink(refstats.DefaultMapping(false))
			if err != nil {
				b.Fatal(err)
			}
			return s
		}},
	}
	for _, sk := range sinks {
		opts := func(b *testing.B) ratelimitsvc.Options {
			o := ratelimitsvc.Options{Limiter: algorithms.NewMemoryStore(algorithms.MemoryOptions{}), Descriptors: cfg, Log: quietLog()}
			if sk.sink != nil {
				st := refstats.New(sk.sink(b), refstats.Options{})
				b.Cleanup(func() { _ = st.Close(context.Background()) })
				o.ReferenceStats = st
			}
			return o
		}
		b.Run("direct/"+sk.name, func(b *testing.B) {
			s, err := ratelimitsvc.New(opts(b))
			if err != nil {
				b.Fatal(err)
			}
			req := benchRequest(1)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.ShouldRateLimit(context.Background(), req); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("grpc/"+sk.name, func(b *testing.B) {
			c := serveBench(b, opts(b))
			var n atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				req := benchRequest(n.Add(1))
				for pb.Next() {
					if _, err := c.ShouldRateLimit(context.Background(), req); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// benchRequest is BenchmarkShouldRateLimit's call of user u.
func benchRequest(u int64) *rlsv3.RateLimitRequest {
	user := strconv.FormatInt(u, 10)
	return &rlsv3.RateLimitRequest{Domain: "test", Descriptors: []*rlcommon.RateLimitDescriptor{
		desc("path", "/bench-"+user), desc("generic_key", "api", "user_id", user)}}
}
