package ratelimitsvc_test

import (
	"context"
	"net"
	"strconv"
	"sync/atomic"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/algorithms/redisstore"
	"github.com/throttle-rl/throttle/descriptors"
	"github.com/throttle-rl/throttle/internal/testkit/redistest"
	"github.com/throttle-rl/throttle/ratelimitsvc"
)

// BenchmarkShouldRateLimit: one Envoy call with two descriptors (per-IP and
// per-user), through a real gRPC listener, on memory and on Redis (with the
// coalescing Throttle serves with).
func BenchmarkShouldRateLimit(b *testing.B) {
	rs := redisstore.New(redistest.NewClient(b, redistest.SharedURL(b)), redisstore.Options{Coalesce: 16})
	b.Cleanup(rs.Close)
	stores := []struct {
		name string
		s    algorithms.Store
	}{
		{"memory", algorithms.NewMemoryStore(algorithms.MemoryOptions{})},
		{"redis", rs},
	}
	cfg, err := descriptorsForBench()
	if err != nil {
		b.Fatal(err)
	}
	for _, st := range stores {
		c := serveBench(b, ratelimitsvc.Options{Limiter: st.s, Descriptors: cfg})
		var n atomic.Int64
		b.Run(st.name+"/parallel", func(b *testing.B) {
			b.SetParallelism(16)
			b.RunParallel(func(pb *testing.PB) {
				user := strconv.FormatInt(n.Add(1), 10)
				req := &rlsv3.RateLimitRequest{Domain: "test", Descriptors: []*rlcommon.RateLimitDescriptor{
					desc("path", "/bench-"+user), desc("generic_key", "api", "user_id", user)}}
				for pb.Next() {
					if _, err := c.ShouldRateLimit(context.Background(), req); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

func descriptorsForBench() (func() *descriptors.Config, error) {
	cfg, err := descriptors.LoadFiles(descriptors.Options{}, "testdata/test.yaml")
	if err != nil {
		return nil, err
	}
	return func() *descriptors.Config { return cfg }, nil
}

// serveBench is serve for benchmarks.
func serveBench(b *testing.B, opts ratelimitsvc.Options) rlsv3.RateLimitServiceClient {
	b.Helper()
	opts.Log = quietLog()
	s, err := ratelimitsvc.New(opts)
	if err != nil {
		b.Fatal(err)
	}
	g, _ := ratelimitsvc.NewGRPCServer(s)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go g.Serve(lis)
	b.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}
