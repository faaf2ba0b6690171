package quotasvc_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/descriptors"
	"github.com/throttle-rl/throttle/internal/testkit/logbuf"
	"github.com/throttle-rl/throttle/internal/testkit/redistest"
	"github.com/throttle-rl/throttle/quotasvc"
)

const quotaYAML = `domain: quota
descriptors:
  - key: name
    value: api
    rate_limit: {unit: second, requests_per_unit: 100}
  - key: name
    value: tb
    rate_limit: {unit: minute, requests_per_unit: 600, algorithm: token_bucket, refill_rate: 20}
  - key: name
    value: banned
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: name
    value: free
    rate_limit: {unlimited: true}
  - key: name
    value: shadow
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: user
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: env
    value: prod
    descriptors:
      - key: name
        value: api
        rate_limit: {unit: second, requests_per_unit: 50}
`

func mustConfig(t testing.TB, yaml string) *descriptors.Config {
	t.Helper()
	cfg, err := descriptors.Load(descriptors.Options{}, descriptors.Source{Name: "quota.yaml", Data: []byte(yaml)})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// server is a quotasvc.Server on a real gRPC listener.
type server struct {
	*quotasvc.Server
	addr string
	reg  *prometheus.Registry
	logs *logbuf.Buffer
	// stopped is closed once GracefulStop returned.
	stopped chan struct{}
	stop    func()
}

// startServer serves opts (defaults: the quota domain, memory, 200ms
// interval) on a loopback port until the test ends.
func startServer(t testing.TB, opts quotasvc.Options) *server {
	t.Helper()
	if opts.Descriptors == nil {
		cfg := mustConfig(t, quotaYAML)
		opts.Descriptors = func() *descriptors.Config { return cfg }
	}
	if opts.Interval == 0 {
		opts.Interval = 200 * time.Millisecond
	}
	logs := &logbuf.Buffer{}
	opts.Log = slog.New(slog.NewTextHandler(logs, nil))
	reg := prometheus.NewRegistry()
	opts.Registerer = reg
	q, err := quotasvc.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	q.Register(g, nil)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = g.Serve(lis) }()
	go func() { defer wg.Done(); _ = q.Run(ctx) }()
	s := &server{Server: q, addr: lis.Addr().String(), reg: reg, logs: logs, stopped: make(chan struct{})}
	var once sync.Once
	s.stop = func() {
		once.Do(func() {
			q.Stop()
			done := make(chan struct{})
			go func() { g.GracefulStop(); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Errorf("GracefulStop still waiting 5s after Stop: a stream did not end")
				g.Stop()
				<-done
			}
			close(s.stopped)
			cancel()
			wg.Wait()
		})
	}
	t.Cleanup(func() {
		s.stop()
		if t.Failed() {
			t.Logf("server log:\n%s", logs.String())
		}
	})
	return s
}

func (s *server) metric(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := s.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue metrics
				}
			}
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// rawStream is a client stream driven by hand, for the protocol's details.
type rawStream struct {
	t      testing.TB
	s      rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient
	resps  chan *rlqsv3.RateLimitQuotaResponse
	ended  chan error
	cancel context.CancelFunc
}

func dialStream(t testing.TB, addr string) *rawStream {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	s, err := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := &rawStream{t: t, s: s, resps: make(chan *rlqsv3.RateLimitQuotaResponse, 1000), ended: make(chan error, 1), cancel: cancel}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			resp, err := s.Recv()
			if err != nil {
				r.ended <- err
				return
			}
			if err := resp.ValidateAll(); err != nil {
				t.Errorf("response fails Envoy's validation: %v", err)
			}
			r.resps <- resp
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

type usage struct {
	bucket          map[string]string
	allowed, denied uint64
	elapsedSeconds  int64
}

func (r *rawStream) send(domain string, us ...usage) {
	r.t.Helper()
	m := &rlqsv3.RateLimitQuotaUsageReports{Domain: domain}
	for _, u := range us {
		m.BucketQuotaUsages = append(m.BucketQuotaUsages, &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId: &rlqsv3.BucketId{Bucket: u.bucket}, TimeElapsed: &durationpb.Duration{Seconds: u.elapsedSeconds},
			NumRequestsAllowed: u.allowed, NumRequestsDenied: u.denied,
		})
	}
	if err := r.s.Send(m); err != nil && !errors.Is(err, io.EOF) {
		r.t.Fatalf("send: %v", err)
	}
}

// next returns the next response, failing after wait.
func (r *rawStream) next(wait time.Duration) *rlqsv3.RateLimitQuotaResponse {
	r.t.Helper()
	select {
	case resp := <-r.resps:
		return resp
	case err := <-r.ended:
		r.t.Fatalf("stream ended waiting for a response: %v", err)
	case <-time.After(wait):
		r.t.Fatalf("no response in %v", wait)
	}
	return nil
}

// actionFor waits for an action on bucket and returns it.
func (r *rawStream) actionFor(bucket map[string]string, wait time.Duration) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	r.t.Helper()
	deadline := time.Now().Add(wait)
	for {
		resp := r.next(time.Until(deadline))
		for _, a := range resp.GetBucketAction() {
			if bucketKeyOf(a.GetBucketId().GetBucket()) == bucketKeyOf(bucket) {
				return a
			}
		}
	}
}

// endErr waits for the stream to end and returns its status.
func (r *rawStream) endErr(wait time.Duration) error {
	r.t.Helper()
	for {
		select {
		case <-r.resps:
		case err := <-r.ended:
			return err
		case <-time.After(wait):
			r.t.Fatalf("stream still open after %v", wait)
			return nil
		}
	}
}

func describe(a *rlqsv3.RateLimitQuotaResponse_BucketAction) string {
	switch {
	case a.GetAbandonAction() != nil:
		return "abandon"
	case a.GetQuotaAssignmentAction() == nil:
		return "none"
	}
	s := a.GetQuotaAssignmentAction().GetRateLimitStrategy()
	ttl := a.GetQuotaAssignmentAction().GetAssignmentTimeToLive().AsDuration()
	if tb := s.GetTokenBucket(); tb != nil {
		return fmt.Sprintf("token_bucket %d/%v max %d ttl %v", tb.GetTokensPerFill().GetValue(), tb.GetFillInterval().AsDuration(), tb.GetMaxTokens(), ttl)
	}
	return fmt.Sprintf("%v ttl %v", s.GetBlanketRule(), ttl)
}

// A bucket's first report subscribes it and brings its first assignment at
// once, whatever it maps to; the time to live is whole seconds.
func TestFirstReportIsAnsweredAtOnce(t *testing.T) {
	s := startServer(t, quotasvc.Options{Interval: time.Hour}) // no reassignment during the test
	tests := []struct {
		bucket map[string]string
		want   string
		limit  string
	}{
		// A newcomer alone: half the floor, 2.5% of 100/s.
		{map[string]string{"name": "api"}, "token_bucket 2/1s max 2 ttl 3h0m0s", "shared"},
		// Entries sorted by key: [env=prod, name=api], 50/s.
		{map[string]string{"name": "api", "env": "prod"}, "token_bucket 1/1s max 2 ttl 3h0m0s", "shared"},
		// A key-only descriptor: every user their own 10/s (0.25/s).
		{map[string]string{"user": "alice"}, "token_bucket 1/4s max 2 ttl 3h0m0s", "shared"},
		// 600 a minute refilled at 20/s: 0.5/s, a bucket of 15 (2.5% of 600).
		{map[string]string{"name": "tb"}, "token_bucket 1/2s max 15 ttl 3h0m0s", "shared"},
		{map[string]string{"name": "banned"}, "DENY_ALL ttl 3h0m0s", "deny"},
		{map[string]string{"name": "free"}, "ALLOW_ALL ttl 3h0m0s", "unlimited"},
		{map[string]string{"name": "shadow"}, "ALLOW_ALL ttl 3h0m0s", "shadow"},
		{map[string]string{"name": "other"}, "ALLOW_ALL ttl 3h0m0s", "no_limit"},
		{map[string]string{"name": "api", "zone": "eu"}, "ALLOW_ALL ttl 3h0m0s", "no_limit"}, // deeper than the configuration
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.bucket), func(t *testing.T) {
			r := dialStream(t, s.addr)
			start := time.Now()
			r.send("quota", usage{bucket: tt.bucket, allowed: 1})
			a := r.actionFor(tt.bucket, 2*time.Second)
			if got := describe(a); got != tt.want {
				t.Errorf("first action = %s, want %s", got, tt.want)
			}
			if took := time.Since(start); took > time.Second {
				t.Errorf("first assignment took %v", took)
			}
		})
	}
	for _, l := range []string{"shared", "deny", "unlimited", "shadow", "no_limit"} {
		want := map[string]float64{"shared": 4, "deny": 1, "unlimited": 1, "shadow": 1, "no_limit": 2}[l]
		if got := s.metric(t, "throttle_rlqs_subscriptions_total", "domain", "quota", "limit", l); got != want {
			t.Errorf("throttle_rlqs_subscriptions_total{limit=%q} = %v, want %v", l, got, want)
		}
	}
}

func TestStreamErrors(t *testing.T) {
	var pending atomic.Bool
	cfg := mustConfig(t, quotaYAML)
	s := startServer(t, quotasvc.Options{Descriptors: func() *descriptors.Config {
		if pending.Load() {
			return nil
		}
		return cfg
	}})
	api := map[string]string{"name": "api"}
	tests := []struct {
		name    string
		send    func(r *rawStream)
		code    codes.Code
		message string
		reason  string
	}{
		{"no domain", func(r *rawStream) { r.send("", usage{bucket: api}) }, codes.InvalidArgument, "the first report must name the domain", "no_domain"},
		{"unknown domain", func(r *rawStream) { r.send("nope", usage{bucket: api}) }, codes.NotFound, `domain "nope" is not configured`, "unknown_domain"},
		{"domain changed", func(r *rawStream) {
			r.send("quota", usage{bucket: api})
			r.send("quota", usage{bucket: api}) // the same domain again is fine (Envoy sends it every time)
			r.send("other", usage{bucket: api})
		}, codes.InvalidArgument, `domain "other" differs from the stream's first report ("quota")`, "domain_changed"},
		{"configuration not loaded", func(r *rawStream) { pending.Store(true); r.send("quota", usage{bucket: api}) }, codes.Unavailable, "no rate limit configuration loaded", "config_pending"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer pending.Store(false)
			r := dialStream(t, s.addr)
			tt.send(r)
			err := r.endErr(2 * time.Second)
			if st := status.Convert(err); st.Code() != tt.code || !strings.Contains(st.Message(), tt.message) {
				t.Errorf("stream ended with %v, want %v containing %q", err, tt.code, tt.message)
			}
			if got := s.metric(t, "throttle_rlqs_streams_refused_total", "reason", tt.reason); got != 1 {
				t.Errorf("throttle_rlqs_streams_refused_total{reason=%q} = %v, want 1", tt.reason, got)
			}
		})
	}
}

// Reports that make no sense are ignored and counted; the stream goes on.
func TestBadReportsAreIgnored(t *testing.T) {
	s := startServer(t, quotasvc.Options{Interval: time.Hour})
	r := dialStream(t, s.addr)
	long := strings.Repeat("x", 5000)
	r.send("quota",
		usage{bucket: nil, allowed: 1},
		usage{bucket: map[string]string{"name": ""}, allowed: 1},
		usage{bucket: map[string]string{"": "api"}, allowed: 1},
		usage{bucket: map[string]string{"name": long}, allowed: 1},
		usage{bucket: map[string]string{"name": "api"}, allowed: 1 << 50},
		usage{bucket: map[string]string{"name": "free"}, allowed: 1},
	)
	resp := r.next(2 * time.Second)
	if len(resp.GetBucketAction()) != 1 || describe(resp.GetBucketAction()[0]) != "ALLOW_ALL ttl 3h0m0s" {
		t.Fatalf("response = %v, want only the good bucket's ALLOW_ALL", resp)
	}
	for reason, want := range map[string]float64{"empty_bucket_id": 1, "empty_bucket_entry": 2, "bucket_id_too_large": 1, "absurd_count": 1} {
		if got := s.metric(t, "throttle_rlqs_reports_ignored_total", "reason", reason); got != want {
			t.Errorf("ignored{reason=%q} = %v, want %v", reason, got, want)
		}
	}
	if got := s.metric(t, "throttle_rlqs_buckets"); got != 1 {
		t.Errorf("throttle_rlqs_buckets = %v, want 1", got)
	}
	// The stream still works.
	r.send("quota", usage{bucket: map[string]string{"name": "api"}, allowed: 1})
	if got := describe(r.actionFor(map[string]string{"name": "api"}, 2*time.Second)); !strings.HasPrefix(got, "token_bucket") {
		t.Errorf("after the bad reports: %s, want a token bucket", got)
	}
}

// tokensPerSecond is a token-bucket action's rate.
func tokensPerSecond(a *rlqsv3.RateLimitQuotaResponse_BucketAction) float64 {
	tb := a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket()
	if tb == nil {
		return 0
	}
	return float64(tb.GetTokensPerFill().GetValue()) / tb.GetFillInterval().AsDuration().Seconds()
}

// reporter sends a fixed demand of bucket every period and keeps the last
// assignment.
type reporter struct {
	r      *rawStream
	domain string
	bucket map[string]string
	mu     sync.Mutex
	last   *rlqsv3.RateLimitQuotaResponse_BucketAction
	perSec atomic.Int64
}

func startReporter(t *testing.T, addr, domain string, bucket map[string]string, perSec int64, period time.Duration) *reporter {
	rp := &reporter{r: dialStream(t, addr), domain: domain, bucket: bucket}
	rp.perSec.Store(perSec)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	t.Cleanup(func() { cancel(); wg.Wait() })
	go func() {
		defer wg.Done()
		rp.r.send(domain, usage{bucket: bucket, allowed: 1})
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			n := uint64(float64(rp.perSec.Load()) * period.Seconds())
			rp.r.send(domain, usage{bucket: bucket, allowed: n / 2, denied: n - n/2})
		}
	}()
	go func() {
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case resp := <-rp.r.resps:
				for _, a := range resp.GetBucketAction() {
					rp.mu.Lock()
					rp.last = a
					rp.mu.Unlock()
				}
			}
		}
	}()
	return rp
}

func (rp *reporter) rate() float64 {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	return tokensPerSecond(rp.last)
}

// waitShares waits until the reporters' rates are want (within 2%), and
// fails after wait with the last ones seen.
func waitShares(t *testing.T, wait time.Duration, want []float64, rps ...*reporter) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		got := make([]float64, len(rps))
		ok := true
		for i, rp := range rps {
			got[i] = rp.rate()
			if d := got[i] - want[i]; d > want[i]*0.02+0.5 || d < -want[i]*0.02-0.5 {
				ok = false
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("shares %v, want %v", got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Instances share a limit in proportion to their demand, and follow it
// when it moves.
func TestSharesFollowDemand(t *testing.T) {
	s := startServer(t, quotasvc.Options{})
	api := map[string]string{"name": "api"} // 100/s
	a := startReporter(t, s.addr, "quota", api, 300, 100*time.Millisecond)
	b := startReporter(t, s.addr, "quota", api, 100, 100*time.Millisecond)
	waitShares(t, 3*time.Second, []float64{75, 25}, a, b)
	b.perSec.Store(900)
	waitShares(t, 3*time.Second, []float64{25, 75}, a, b)
	if got := s.metric(t, "throttle_rlqs_assigned_rate", "domain", "quota"); got < 99 || got > 100 {
		t.Errorf("throttle_rlqs_assigned_rate = %v, want 100", got)
	}
	if got := s.metric(t, "throttle_rlqs_streams"); got != 2 {
		t.Errorf("throttle_rlqs_streams = %v, want 2", got)
	}
}

func newRedis(t testing.TB, url string) redis.UniversalClient {
	t.Helper()
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// uniqueDomain is a domain no other test run shares the Redis keys of.
func uniqueDomain(t testing.TB) (string, func() *descriptors.Config) {
	t.Helper()
	name := fmt.Sprintf("quota-%d", time.Now().UnixNano())
	cfg := mustConfig(t, strings.Replace(quotaYAML, "domain: quota", "domain: "+name, 1))
	return name, func() *descriptors.Config { return cfg }
}

// Two replicas on one Redis split one limit among all their instances.
func TestSharesAcrossReplicas(t *testing.T) {
	url := redistest.SharedURL(t)
	domain, cfg := uniqueDomain(t)
	s1 := startServer(t, quotasvc.Options{Descriptors: cfg, Redis: newRedis(t, url)})
	s2 := startServer(t, quotasvc.Options{Descriptors: cfg, Redis: newRedis(t, url)})
	api := map[string]string{"name": "api"}
	a := startReporter(t, s1.addr, domain, api, 100, 100*time.Millisecond)
	b := startReporter(t, s2.addr, domain, api, 100, 100*time.Millisecond)
	c := startReporter(t, s2.addr, domain, api, 200, 100*time.Millisecond)
	waitShares(t, 3*time.Second, []float64{25, 25, 50}, a, b, c)
	a.perSec.Store(600)
	waitShares(t, 3*time.Second, []float64{66.7, 11.1, 22.2}, a, b, c)
}

// With Redis down, assignments keep the last known split for LastKnown,
// then follow FAILURE_MODE; when Redis is back, shares again.
func TestRedisDown(t *testing.T) {
	for _, mode := range []algorithms.FailureMode{algorithms.FailOpen, algorithms.FailClosed, algorithms.FailLocal} {
		t.Run(string(mode), func(t *testing.T) {
			rs := redistest.Start(t)
			domain, cfg := uniqueDomain(t)
			s1 := startServer(t, quotasvc.Options{Descriptors: cfg, Redis: newRedis(t, rs.URL()), FailureMode: mode, LastKnown: time.Second})
			s2 := startServer(t, quotasvc.Options{Descriptors: cfg, Redis: newRedis(t, rs.URL()), FailureMode: mode, LastKnown: time.Second})
			api := map[string]string{"name": "api"}
			a := startReporter(t, s1.addr, domain, api, 300, 100*time.Millisecond)
			b := startReporter(t, s2.addr, domain, api, 100, 100*time.Millisecond)
			waitShares(t, 3*time.Second, []float64{75, 25}, a, b)
			rs.Stop()
			down := time.Now()
			// The last known split holds for LastKnown…
			time.Sleep(600 * time.Millisecond)
			waitShares(t, 10*time.Millisecond, []float64{75, 25}, a, b)
			// … then FAILURE_MODE decides.
			want := map[algorithms.FailureMode]string{algorithms.FailOpen: "ALLOW_ALL", algorithms.FailClosed: "DENY_ALL", algorithms.FailLocal: "token_bucket 100/1s"}[mode]
			deadline := time.Now().Add(3 * time.Second)
			for !strings.HasPrefix(describe(a.lastAction()), want) {
				if time.Now().After(deadline) {
					t.Fatalf("%v after Redis stopped: %s, want %s", time.Since(down), describe(a.lastAction()), want)
				}
				time.Sleep(20 * time.Millisecond)
			}
			if took := time.Since(down); took < time.Second {
				t.Errorf("FAILURE_MODE after %v, before LastKnown (1s)", took)
			}
			if got := s1.metric(t, "throttle_rlqs_degraded_allocations_total", "mode", string(mode)); got == 0 {
				t.Errorf("degraded_allocations_total{mode=%q} = 0", mode)
			}
			rs.Restart()
			waitShares(t, 5*time.Second, []float64{75, 25}, a, b)
		})
	}
}

func (rp *reporter) lastAction() *rlqsv3.RateLimitQuotaResponse_BucketAction {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	return rp.last
}

// A bucket whose limit goes away with a configuration change is abandoned;
// one that matches another limit moves to it; an idle one is abandoned.
func TestAbandon(t *testing.T) {
	var cur atomic.Pointer[descriptors.Config]
	cur.Store(mustConfig(t, quotaYAML))
	s := startServer(t, quotasvc.Options{Descriptors: cur.Load, IdleAbandon: 600 * time.Millisecond})
	r := dialStream(t, s.addr)
	api, user := map[string]string{"name": "api"}, map[string]string{"user": "bob"}
	r.send("quota", usage{bucket: api, allowed: 1}, usage{bucket: user, allowed: 1})
	r.actionFor(api, time.Second)
	// name=api goes, user doubles.
	cur.Store(mustConfig(t, `domain: quota
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 20}
`))
	seen := map[string]string{}
	deadline := time.Now().Add(2 * time.Second)
	for seen["api"] != "abandon" || !strings.HasPrefix(seen["user"], "token_bucket 20/1s") {
		if time.Now().After(deadline) {
			t.Fatalf("after the reload: %v, want api abandoned and user at 20/s", seen)
		}
		r.send("quota", usage{bucket: user, allowed: 5}) // keeps user busy
		resp := r.next(time.Second)
		for _, a := range resp.GetBucketAction() {
			if a.GetBucketId().GetBucket()["user"] != "" {
				seen["user"] = describe(a)
			} else {
				seen["api"] = describe(a)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	// user, reported idle, is abandoned after IdleAbandon.
	start := time.Now()
	for {
		r.send("quota", usage{bucket: user})
		if describe(r.actionFor(user, time.Second)) == "abandon" {
			break
		}
		if time.Since(start) > 3*time.Second {
			t.Fatal("idle bucket not abandoned")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if took := time.Since(start); took < 500*time.Millisecond {
		t.Errorf("idle bucket abandoned after %v, before IdleAbandon", took)
	}
	if got := s.metric(t, "throttle_rlqs_buckets"); got != 0 {
		t.Errorf("throttle_rlqs_buckets = %v after both abandoned, want 0", got)
	}
}

// Stop ends every stream with UNAVAILABLE, so that a gRPC server's
// GracefulStop returns; new streams are refused.
func TestStopEndsStreams(t *testing.T) {
	s := startServer(t, quotasvc.Options{})
	var rs []*rawStream
	for range 5 {
		r := dialStream(t, s.addr)
		r.send("quota", usage{bucket: map[string]string{"name": "api"}, allowed: 1})
		r.next(time.Second)
		rs = append(rs, r)
	}
	idle := dialStream(t, s.addr) // never sends: still ends
	start := time.Now()
	go s.stop()
	for _, r := range append(rs, idle) {
		if err := r.endErr(3 * time.Second); status.Code(err) != codes.Unavailable {
			t.Errorf("stream ended with %v, want UNAVAILABLE", err)
		}
	}
	select {
	case <-s.stopped:
	case <-time.After(3 * time.Second):
		t.Fatal("GracefulStop did not return")
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("shutdown took %v", took)
	}
	if got := s.metric(t, "throttle_rlqs_streams"); got != 0 {
		t.Errorf("throttle_rlqs_streams = %v after Stop, want 0", got)
	}
}

// When Throttle is gone, an instance's assignment runs out after its time
// to live (three intervals, whole seconds: 1 s for 200 ms), and the filter's
// expired_assignment_behavior takes over, then its no_assignment_behavior.
func TestAssignmentsRunOutWithoutThrottle(t *testing.T) {
	s := startServer(t, quotasvc.Options{})
	d := newDataPlane(t, "quota", 100*time.Millisecond, s.addr)
	d.noAssignment = &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_DENY_ALL}}
	d.reuseLast, d.expiredTimeout = true, 500*time.Millisecond
	api := map[string]string{"name": "api"}
	step := func() (time.Time, string) {
		now := time.Now()
		d.advance(now)
		d.request(api, now)
		time.Sleep(10 * time.Millisecond)
		return now, d.state(api, now)
	}
	deadline := time.Now().Add(2 * time.Second)
	for _, st := step(); st != "assigned"; _, st = step() {
		if time.Now().After(deadline) {
			t.Fatalf("no assignment in 2s (state %q)", st)
		}
	}
	// A few reassignments, then Throttle goes.
	for end := time.Now().Add(500 * time.Millisecond); time.Now().Before(end); {
		step()
	}
	s.stop()
	stopped := time.Now()
	seen := map[string]time.Duration{}
	for time.Since(stopped) < 2500*time.Millisecond {
		now, st := step()
		if _, ok := seen[st]; !ok {
			seen[st] = now.Sub(stopped)
		}
	}
	// The last assignment came at most half a time to live before the stop
	// (renewals), so it runs out 0.5-1 s after it (seen up to a slow
	// loop's step later); the last one is reused for 0.5 s; then requests
	// are denied, as no_assignment_behavior says.
	if at, ok := seen["expired"]; !ok || at < 400*time.Millisecond || at > 1500*time.Millisecond {
		t.Errorf("assignment ran out %v after Throttle stopped (seen %v), want 0.5-1 s", at, seen)
	}
	if at, ok := seen["none"]; !ok || at-seen["expired"] < 450*time.Millisecond || at-seen["expired"] > time.Second {
		t.Errorf("no_assignment_behavior %v after Throttle stopped (seen %v), want 0.5 s after the expiry", at, seen)
	}
	if d.request(api, time.Now()) {
		t.Error("a request passed with no assignment and DENY_ALL as no_assignment_behavior")
	}
}
