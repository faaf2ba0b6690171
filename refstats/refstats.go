// Package refstats emits the stats of Envoy's reference rate-limit service
// (envoyproxy/ratelimit) under its names, so that dashboards and alerts made
// for it, and Envoy Gateway's statsd-exporter sidecar, keep working with
// Throttle in its place. As the reference does, it counts in a
// github.com/lyft/gostats store and flushes the store every interval to one
// sink: statsd (gostats' own), DogStatsD (tags and mogrifiers) or Prometheus
// (statsd_exporter's mapper, on a listener of its own).
//
// The stats, with EXTRA_TAGS on every one:
//
//	ratelimit.service.rate_limit.DOMAIN.KEY.{total_hits,over_limit,near_limit,within_limit,shadow_mode,over_limit_with_local_cache}
//	ratelimit.service.rate_limit.DOMAIN.domain_not_found
//	ratelimit.service.call.should_rate_limit.{redis_error,service_error}
//	ratelimit.service.{config_load_success,config_load_error,global_shadow_mode}
//	ratelimit_server.METHOD.{total_requests,response_time}
//	ratelimit.go.* (Go runtime gauges and counters, at every flush)
//
// Stats feeds them: ratelimitsvc calls it through its ReferenceStats
// interface, the descriptors reloader through ConfigLoad.
package refstats

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	gostats "github.com/lyft/gostats"
)

// Sink is where the stats go at every flush: NewStatsdSink,
// NewDogStatsdSink or NewPrometheusSink.
type Sink interface {
	gostats.FlushableSink
	// close sends what the sink holds and stops its work.
	close() error
}

// Options configures Stats.
type Options struct {
	// ExtraTags are tags of every stat (setting EXTRA_TAGS). On statsd they
	// are written into the name (NAME.__KEY=VALUE, gostats' way), on
	// DogStatsD as tags; values have '.', ':' and '|' replaced by '_'.
	ExtraTags map[string]string
	// MaxDomains caps the distinct domains domain_not_found is counted
	// for: a request names any domain it likes. Beyond it, a new unknown
	// domain is not counted here (Throttle's own
	// throttle_ratelimit_domain_not_found_total counts every one). 0 means
	// 1000; negative, none.
	MaxDomains int
	// MaxKeys caps the distinct descriptor keys (domain and key) stats are
	// named for; beyond it, a new key's stats count under
	// DOMAIN.stats_overflow.STAT (ratelimitsvc already folds a per-value
	// key into its configured one past STATS_MAX_VALUE_KEYS: this bounds
	// the names whatever calls). 0 means 10,000; negative, none.
	MaxKeys int
}

// overflowKey is the key of the stats of descriptor keys past MaxKeys.
const overflowKey = "stats_overflow"

// Stats holds the reference's stats, counted in memory and sent to a Sink
// at every Flush. Its methods are safe for concurrent use.
type Stats struct {
	store     gostats.Store
	sink      Sink
	rateLimit gostats.Scope // ratelimit.service.rate_limit
	server    gostats.Scope // ratelimit_server

	redisError, serviceError           gostats.Counter
	configLoadSuccess, configLoadError gostats.Counter
	globalShadowMode                   gostats.Counter
	methods                            sync.Map // full method → *methodStats
	domains                            sync.Map // domain → gostats.Counter
	domainCount                        atomic.Int64
	maxDomains                         int64
	keys                               sync.Map // domain and key → struct{}
	keyCount                           atomic.Int64
	maxKeys                            int64
	idle                               chan struct{} // holds a token while no flush is in progress
	closeOnce                          sync.Once
	closeErr                           error
}

// methodStats are the stats of one gRPC method.
type methodStats struct {
	totalRequests gostats.Counter
	responseTime  gostats.Timer
}

// New returns Stats that go to sink.
func New(sink Sink, opts Options) *Stats {
	switch {
	case opts.MaxDomains == 0:
		opts.MaxDomains = 1000
	case opts.MaxDomains < 0:
		opts.MaxDomains = 0
	}
	switch {
	case opts.MaxKeys == 0:
		opts.MaxKeys = 10_000
	case opts.MaxKeys < 0:
		opts.MaxKeys = 0
	}
	store := gostats.NewStore(sink, false)
	idle := make(chan struct{}, 1)
	idle <- struct{}{}
	root := store.ScopeWithTags("ratelimit", opts.ExtraTags)
	service := root.Scope("service")
	call := service.Scope("call.should_rate_limit")
	store.AddStatGenerator(gostats.NewRuntimeStats(root.Scope("go")))
	return &Stats{
		store:             store,
		sink:              sink,
		rateLimit:         service.Scope("rate_limit"),
		server:            store.ScopeWithTags("ratelimit_server", opts.ExtraTags),
		redisError:        call.NewCounter("redis_error"),
		serviceError:      call.NewCounter("service_error"),
		configLoadSuccess: service.NewCounter("config_load_success"),
		configLoadError:   service.NewCounter("config_load_error"),
		globalShadowMode:  service.NewCounter("global_shadow_mode"),
		maxDomains:        int64(opts.MaxDomains),
		maxKeys:           int64(opts.MaxKeys),
		idle:              idle,
	}
}

// DescriptorCounter returns the counter of stat (TotalHits, OverLimit, …)
// of the descriptor key (domain, key), key being the reference's stats key
// without its domain: ratelimit.service.rate_limit.DOMAIN.KEY.STAT, the
// whole key sanitized as the reference does (and made safe and short: see
// sanitize); past MaxKeys distinct keys, key is stats_overflow. Look it up
// once per key: the counter itself only adds.
func (s *Stats) DescriptorCounter(domain, key, stat string) interface{ Add(uint64) } {
	if !s.keep(domain, key) {
		key = overflowKey
	}
	return s.rateLimit.NewCounter(descriptorStat(domain, key, stat))
}

// keep reports whether the stats of (domain, key) have names of their own:
// it was kept before, or fewer than MaxKeys are.
func (s *Stats) keep(domain, key string) bool {
	k := domain + "\x00" + key
	if _, ok := s.keys.Load(k); ok {
		return true
	}
	if s.keyCount.Add(1) > s.maxKeys {
		s.keyCount.Add(-1)
		return false
	}
	if _, loaded := s.keys.LoadOrStore(k, struct{}{}); loaded {
		s.keyCount.Add(-1)
	}
	return true
}

// DomainNotFound counts n descriptors of a request for a domain no
// configuration has: ratelimit.service.rate_limit.DOMAIN.domain_not_found,
// counted per descriptor as the reference does, DOMAIN sanitized (safe and
// short: see sanitize), for at most MaxDomains domains.
func (s *Stats) DomainNotFound(domain string, n int) {
	if c, ok := s.domains.Load(domain); ok {
		c.(gostats.Counter).Add(uint64(n))
		return
	}
	if s.domainCount.Add(1) > s.maxDomains {
		s.domainCount.Add(-1)
		return
	}
	c, loaded := s.domains.LoadOrStore(domain, s.rateLimit.NewCounter(sanitize(domain)+".domain_not_found"))
	if loaded {
		s.domainCount.Add(-1)
	}
	c.(gostats.Counter).Add(uint64(n))
}

// RedisError counts a ShouldRateLimit call the counter backend failed:
// ratelimit.service.call.should_rate_limit.redis_error.
func (s *Stats) RedisError() { s.redisError.Inc() }

// ServiceError counts a ShouldRateLimit call refused as the reference
// refuses with a service error (an empty domain, no descriptors, no
// configuration loaded): ratelimit.service.call.should_rate_limit.service_error.
func (s *Stats) ServiceError() { s.serviceError.Inc() }

// GlobalShadowMode counts a call SHADOW_MODE answered OK although it was
// over a limit: ratelimit.service.global_shadow_mode.
func (s *Stats) GlobalShadowMode() { s.globalShadowMode.Inc() }

// ConfigLoad counts a configuration load: config_load_success when err is
// nil, else config_load_error (ratelimit.service.config_load_*).
func (s *Stats) ConfigLoad(err error) {
	if err != nil {
		s.configLoadError.Inc()
		return
	}
	s.configLoadSuccess.Inc()
}

// UnaryCall counts one unary gRPC call of fullMethod, and its response time
// in whole milliseconds as the reference times it:
// ratelimit_server.METHOD.total_requests and .response_time. A timer goes
// to the sink at once, not at the next flush.
func (s *Stats) UnaryCall(fullMethod string, took time.Duration) {
	m, ok := s.methods.Load(fullMethod)
	if !ok {
		// Bounded: the server's methods (an unknown one never reaches a
		// handler).
		name := methodName(fullMethod)
		m, _ = s.methods.LoadOrStore(fullMethod, &methodStats{
			totalRequests: s.server.NewCounter(name + ".total_requests"),
			responseTime:  s.server.NewTimer(name + ".response_time"),
		})
	}
	ms := m.(*methodStats)
	ms.totalRequests.Inc()
	ms.responseTime.AddValue(float64(took.Milliseconds()))
}

// errFlushing says a flush is still in progress.
var errFlushing = errors.New("the previous flush is still in progress")

// Flush sends what was counted since the last flush to the sink, and
// returns when it is sent or ctx ends. One flush runs at a time: while one
// is in progress (an unreachable statsd over TCP holds one for seconds:
// gostats waits for its connection), Flush returns errFlushing at once.
func (s *Stats) Flush(ctx context.Context) error {
	select {
	case <-s.idle:
	default:
		return errFlushing
	}
	return s.flush(ctx)
}

// flush flushes the store, the idle token taken, and gives the token back
// when the store is flushed, which may be after ctx ended.
func (s *Stats) flush(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		s.store.Flush()
		s.idle <- struct{}{} // first: a Flush right after this one returns finds it idle
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("flush stats: %w", ctx.Err())
	}
}

// Run flushes every interval until ctx ends, then flushes a last time
// within final and closes the sink.
func (s *Stats) Run(ctx context.Context, every, final time.Duration) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.Background(), final)
			defer cancel()
			return s.Close(fctx)
		case <-t.C:
			_ = s.Flush(ctx) // a flush in progress: the next tick tries again
		}
	}
}

// Close waits for a flush in progress, flushes a last time and closes the
// sink, all within ctx. Counting after Close is harmless and sends nothing.
func (s *Stats) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		select {
		case <-s.idle:
		case <-ctx.Done():
			s.closeErr = fmt.Errorf("flush stats: %w", ctx.Err())
			return
		}
		s.closeErr = errors.Join(s.flush(ctx), s.sink.close())
	})
	return s.closeErr
}
