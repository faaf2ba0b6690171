package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/throttle-rl/throttle/internal/testkit/redistest"
	"github.com/throttle-rl/throttle/internal/testkit/throttletest"
)

// BenchmarkColdBurst: the built binary on a real Redis, 16 gRPC streams
// (4 connections) at once, 480 calls of fresh keys of an exact limit; each
// iteration idles first (COLD_IDLE, default 3 s: longer than the Guard's
// HungAfter), then measures the first burst (cold) and a second one right
// after (warm). Reported: the p99 of each, in ms, the p99 of the very
// first burst after the server started (first), and the degraded and
// failed calls (decisions from a fallback).
//
//	scripts/with-test-services.sh go test -run XXX -bench BenchmarkColdBurst -benchtime 5x ./cmd/throttle/
func BenchmarkColdBurst(b *testing.B) {
	idle := 3 * time.Second
	if v := os.Getenv("COLD_IDLE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatal(err)
		}
		idle = d
	}
	srv := redistest.Start(b)
	dir := b.TempDir()
	conf := "domain: cold\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 1000}\n"
	if err := os.WriteFile(filepath.Join(dir, "cold.yaml"), []byte(conf), 0o644); err != nil {
		b.Fatal(err)
	}
	s := throttletest.Start(b, append([]string{"REDIS_URL=" + srv.URL(), "DESCRIPTORS_DIR=" + dir}, strings.Fields(os.Getenv("COLD_ENV"))...)...)
	var clients []rlsv3.RateLimitServiceClient
	for range 4 {
		conn, err := grpc.NewClient(s.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { conn.Close() })
		clients = append(clients, rlsv3.NewRateLimitServiceClient(conn))
	}
	run := 0
	burstOnce := func() *outcomes {
		run++
		r := run
		return burst(480, 16, func(i int) (string, string) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			resp, err := clients[i%len(clients)].ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "cold",
				Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "user", Value: fmt.Sprintf("r%d-%d", r, i%48)}}}}})
			return resp.GetOverallCode().String(), fmt.Sprint(err)
		})
	}
	first := burstOnce() // the first burst after start: connections dialled, the engine loaded
	var cold, warm time.Duration
	failed := 0
	degraded0 := s.Metric(b, "throttle_degraded_decisions_total")
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		time.Sleep(idle)
		b.StartTimer()
		c := burstOnce()
		w := burstOnce()
		cold += c.quantile(0.99)
		warm += w.quantile(0.99)
		failed += 960 - c.counts["OK"] - w.counts["OK"]
	}
	b.ReportMetric(float64(first.quantile(0.99).Microseconds())/1000, "first-p99-ms")
	b.ReportMetric(float64(cold.Microseconds())/1000/float64(b.N), "cold-p99-ms")
	b.ReportMetric(float64(warm.Microseconds())/1000/float64(b.N), "warm-p99-ms")
	b.ReportMetric(float64(failed)/float64(b.N), "not-ok/op")
	b.ReportMetric((s.Metric(b, "throttle_degraded_decisions_total")-degraded0)/float64(b.N), "degraded/op")
}
