package refstats

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// recorder is a Sink that keeps what it is sent, by name (counters and
// gauges summed, timers as their values).
type recorder struct {
	mu       sync.Mutex
	counters map[string]uint64
	timers   map[string][]float64
	flushes  int
	closed   bool
}

func newRecorder() *recorder {
	return &recorder{counters: map[string]uint64{}, timers: map[string][]float64{}}
}

func (r *recorder) FlushCounter(name string, v uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counters[name] += v
}

func (r *recorder) FlushGauge(string, uint64) {}

func (r *recorder) FlushTimer(name string, v float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.timers[name] = append(r.timers[name], v)
}

func (r *recorder) Flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.flushes++
}

func (r *recorder) close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	return nil
}

// ratelimitCounters are the counters sent, but the Go runtime's.
func (r *recorder) ratelimitCounters() map[string]uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]uint64{}
	for k, v := range r.counters {
		if !strings.HasPrefix(k, "ratelimit.go.") {
			out[k] = v
		}
	}
	return out
}

// TestStatsNames: every stat under the reference's name, with EXTRA_TAGS
// written into it as gostats writes tags (sorted by key; '.' in a value
// becomes '_'), and only what moved since the last flush.
func TestStatsNames(t *testing.T) {
	r := newRecorder()
	s := New(r, Options{ExtraTags: map[string]string{"zone": "eu.1", "app": "rl"}})
	const tags = ".__app=rl.__zone=eu_1"
	for _, stat := range []string{TotalHits, TotalHits, WithinLimit, OverLimit, NearLimit, ShadowMode, OverLimitWithLocalCache} {
		s.DescriptorCounter("edge", "path_/a:b", stat).Add(2)
	}
	s.DomainNotFound("nope", 3)
	s.RedisError()
	s.ServiceError()
	s.ServiceError()
	s.GlobalShadowMode()
	s.ConfigLoad(nil)
	s.ConfigLoad(errors.New("bad"))
	s.UnaryCall("/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", 2500*time.Microsecond)
	s.UnaryCall("/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", 900*time.Microsecond)
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{
		"ratelimit.service.rate_limit.edge.path_/a_b.total_hits" + tags:                  4,
		"ratelimit.service.rate_limit.edge.path_/a_b.within_limit" + tags:                2,
		"ratelimit.service.rate_limit.edge.path_/a_b.over_limit" + tags:                  2,
		"ratelimit.service.rate_limit.edge.path_/a_b.near_limit" + tags:                  2,
		"ratelimit.service.rate_limit.edge.path_/a_b.shadow_mode" + tags:                 2,
		"ratelimit.service.rate_limit.edge.path_/a_b.over_limit_with_local_cache" + tags: 2,
		"ratelimit.service.rate_limit.nope.domain_not_found" + tags:                      3,
		"ratelimit.service.call.should_rate_limit.redis_error" + tags:                    1,
		"ratelimit.service.call.should_rate_limit.service_error" + tags:                  2,
		"ratelimit.service.global_shadow_mode" + tags:                                    1,
		"ratelimit.service.config_load_success" + tags:                                   1,
		"ratelimit.service.config_load_error" + tags:                                     1,
		"ratelimit_server.ShouldRateLimit.total_requests" + tags:                         2,
	}
	if diff := cmp.Diff(want, r.ratelimitCounters()); diff != "" {
		t.Errorf("counters (-want +got):\n%s", diff)
	}
	if got, want := r.timers["ratelimit_server.ShouldRateLimit.response_time"+tags], []float64{2, 0}; !cmp.Equal(got, want) {
		t.Errorf("response_time = %v, want %v (whole milliseconds)", got, want)
	}
	if r.counters["ratelimit.go.numGC"+tags] == 0 && r.counters["ratelimit.go.mallocs"+tags] == 0 {
		t.Errorf("no Go runtime stats among %v", r.counters)
	}

	// A second flush sends what moved since the first, only.
	s.ServiceError()
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := r.ratelimitCounters()["ratelimit.service.call.should_rate_limit.service_error"+tags]; got != 3 {
		t.Errorf("service_error after the second flush: %d sent in all, want 3", got)
	}
	if err := s.Close(context.Background()); err != nil || !r.closed {
		t.Errorf("Close: %v, sink closed %v", err, r.closed)
	}
}

// TestDomainNotFoundCapped: unknown domains are kept up to MaxDomains.
func TestDomainNotFoundCapped(t *testing.T) {
	r := newRecorder()
	s := New(r, Options{MaxDomains: 2})
	for i := range 5 {
		s.DomainNotFound(fmt.Sprintf("d%d", i), 1)
	}
	s.DomainNotFound("d0", 1)
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{
		"ratelimit.service.rate_limit.d0.domain_not_found": 2,
		"ratelimit.service.rate_limit.d1.domain_not_found": 1,
	}
	if diff := cmp.Diff(want, r.ratelimitCounters()); diff != "" {
		t.Errorf("counters (-want +got):\n%s", diff)
	}
}

// blockingSink holds every flush until released.
type blockingSink struct {
	*recorder
	release chan struct{}
}

func (b blockingSink) Flush() { <-b.release }

// TestFlushDeadline: a flush that does not finish returns at its deadline,
// and the next one is refused while it lasts.
func TestFlushDeadline(t *testing.T) {
	b := blockingSink{newRecorder(), make(chan struct{})}
	s := New(b, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := s.Flush(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Flush of a stuck sink: %v, want DeadlineExceeded", err)
	}
	if err := s.Flush(context.Background()); !errors.Is(err, errFlushing) {
		t.Errorf("Flush while one is in progress: %v, want errFlushing", err)
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer ccancel()
	if err := s.Close(cctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close while the flush is stuck: %v, want DeadlineExceeded", err)
	}
	close(b.release)
}

// TestDescriptorKeysCapped: past MaxKeys distinct descriptor keys, a new
// key's stats count under DOMAIN.stats_overflow; a kept key keeps its name.
func TestDescriptorKeysCapped(t *testing.T) {
	r := newRecorder()
	s := New(r, Options{MaxKeys: 2})
	for i := range 5 {
		s.DescriptorCounter("edge", fmt.Sprintf("user_%d", i), TotalHits).Add(1)
	}
	s.DescriptorCounter("edge", "user_0", OverLimit).Add(1)
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{
		"ratelimit.service.rate_limit.edge.user_0.total_hits":         1,
		"ratelimit.service.rate_limit.edge.user_0.over_limit":         1,
		"ratelimit.service.rate_limit.edge.user_1.total_hits":         1,
		"ratelimit.service.rate_limit.edge.stats_overflow.total_hits": 3,
	}
	if diff := cmp.Diff(want, r.ratelimitCounters()); diff != "" {
		t.Errorf("counters (-want +got):\n%s", diff)
	}
}
