package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/throttle-rl/throttle/internal/testkit/redistest"
	"github.com/throttle-rl/throttle/internal/testkit/throttletest"
	"github.com/throttle-rl/throttle/internal/wanproxy"
)

// BenchmarkGlobalDecision: the decision of a global limit at one hot key
// (far below its limit), through the built binary, two replicas of one
// region, 32 callers at once, with the global Redis on loopback and behind
// a 100 ms round trip (a wanproxy, 50 ms each way): the decision's p99
// (p99-ms; the global Redis's round trip must not reach it), the global
// Redis's calls per decision (global-calls/op: scripts, pings and
// handshakes from INFO commandstats, not the commands a script runs; the
// target is ≤ 1/100 at a hot key) and its commands per decision counting
// those (global-cmds/op), and the decisions degraded (FAILURE_MODE's: 0).
//
//	scripts/with-test-services.sh go test -run '^$' -bench BenchmarkGlobalDecision -benchtime 20000x ./cmd/throttle/
func BenchmarkGlobalDecision(b *testing.B) {
	for _, c := range []struct {
		name  string
		delay time.Duration
	}{{"loopback", 0}, {"rtt=100ms", 50 * time.Millisecond}} {
		b.Run(c.name, func(b *testing.B) { benchGlobalDecision(b, c.delay) })
	}
}

func benchGlobalDecision(b *testing.B, delay time.Duration) {
	global, regional := redistest.Start(b), redistest.Start(b)
	globalAddr := global.Addr()
	if delay > 0 {
		p, err := wanproxy.New(globalAddr, wanproxy.Options{Delay: delay, Jitter: delay / 5})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { p.Close() })
		globalAddr = p.Addr()
	}
	dir := b.TempDir()
	conf := "domain: hot\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 1000000000, scope: global}\n"
	if err := os.WriteFile(filepath.Join(dir, "hot.yaml"), []byte(conf), 0o644); err != nil {
		b.Fatal(err)
	}
	env := []string{"REDIS_URL=" + regional.URL(), "GLOBAL_REDIS_URL=redis://" + globalAddr + "/0", "REGION=bench",
		"DESCRIPTORS_DIR=" + dir, "RESPONSE_DYNAMIC_METADATA=true"}
	var servers []*throttletest.Server
	var clients []rlsv3.RateLimitServiceClient
	for range 2 {
		s := throttletest.Start(b, env...)
		conn, err := grpc.NewClient(s.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { conn.Close() })
		servers, clients = append(servers, s), append(clients, rlsv3.NewRateLimitServiceClient(conn))
	}
	call := func(c rlsv3.RateLimitServiceClient) (time.Duration, bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		began := time.Now()
		resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "hot",
			Descriptors: []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "user", Value: "hot"}}}}})
		took := time.Since(began)
		if err != nil {
			return took, false, err
		}
		return took, resp.GetOverallCode() == rlsv3.RateLimitResponse_OK, nil
	}
	const callers = 32
	// run makes n calls through callers goroutines and returns each
	// call's time and how many were refused.
	run := func(n int) ([]time.Duration, int) {
		var mu sync.Mutex
		var times []time.Duration
		refused := 0
		var wg sync.WaitGroup
		next := make(chan int, callers)
		go func() {
			defer close(next)
			for i := range n {
				next <- i
			}
		}()
		for w := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var mine []time.Duration
				no := 0
				for range next {
					took, ok, err := call(clients[w%len(clients)])
					if err != nil {
						b.Error(err)
						continue
					}
					mine = append(mine, took)
					if !ok {
						no++
					}
				}
				mu.Lock()
				times, refused = append(times, mine...), refused+no
				mu.Unlock()
			}()
		}
		wg.Wait()
		return times, refused
	}
	// Warm: leases sized to the demand, the round trip measured.
	run(4000)
	rdb := redistest.NewClient(b, global.URL())
	degraded := func() float64 {
		var sum float64
		for _, s := range servers {
			sum += s.Metric(b, "throttle_degraded_decisions_total")
		}
		return sum
	}
	calls0, cmds0 := commandStats(b, rdb)
	degraded0 := degraded()
	b.ResetTimer()
	times, refused := run(b.N)
	b.StopTimer()
	calls1, cmds1 := commandStats(b, rdb)
	slices.Sort(times)
	// The second INFO's own call is in calls1.
	b.ReportMetric(float64(times[len(times)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(calls1-calls0-1)/float64(b.N), "global-calls/op")
	b.ReportMetric(float64(cmds1-cmds0-1)/float64(b.N), "global-cmds/op")
	b.ReportMetric(degraded()-degraded0, "degraded")
	b.ReportMetric(float64(refused), "refused")
}

// commandStats reads INFO commandstats: the calls a client made (scripts,
// pings, connection handshakes: every command but those a script runs),
// and every command counted.
func commandStats(b *testing.B, rdb *redis.Client) (calls, cmds int64) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	// Commands only a client sends (a script's own commands are the
	// others: get, incrby, hset, …).
	top := map[string]bool{"evalsha": true, "eval": true, "evalsha_ro": true, "eval_ro": true, "fcall": true, "fcall_ro": true,
		"ping": true, "hello": true, "client|setinfo": true, "client|setname": true, "function|load": true, "function|list": true,
		"script|load": true, "script|exists": true, "info": true, "select": true, "auth": true}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		field, _, _ := strings.Cut(rest, ",")
		n, err := strconv.ParseInt(strings.TrimPrefix(field, "calls="), 10, 64)
		if err != nil {
			b.Fatalf("commandstats line %q: %v", line, err)
		}
		cmds += n
		if top[name] {
			calls += n
		}
	}
	return calls, cmds
}
