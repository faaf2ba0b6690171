// Package ratelimitsvc is Envoy's rate-limit service,
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit, over the
// descriptor configuration (YAML, package descriptors) and the descriptor
// rules clients make through the REST API, deciding through the engine
// (package algorithms). Proto types stay in this package.
package ratelimitsvc

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"strconv"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/descriptors"
	"github.com/throttle-rl/throttle/internal/ratelimitheader"
	"github.com/throttle-rl/throttle/internal/ruledomain"
)

// Options configures a Server.
type Options struct {
	// Limiter decides; required. Usually an algorithms.Guard over Redis, or
	// a MemoryStore.
	Limiter algorithms.Store
	// Descriptors returns the current YAML configuration; optional (nil
	// means no YAML domains). When set, a nil Config means it has not loaded
	// yet (FORCE_START_WITHOUT_INITIAL_CONFIG): as the reference service
	// before its first configuration, a request for a domain no REST client
	// owns fails with UNAVAILABLE "no rate limit configuration loaded".
	Descriptors func() *descriptors.Config
	// Rules gives the REST clients' descriptor rules; optional.
	Rules ruleSource
	// ResponseHeaders adds rate-limit headers to every response with a
	// limit, for Envoy to add to its reply (setting
	// RATE_LIMIT_RESPONSE_HEADERS): the sets HeaderSets chooses, and
	// Retry-After when the overall code is OVER_LIMIT (see responseHeaders).
	ResponseHeaders bool
	// HeaderSets chooses the sets ResponseHeaders adds (setting
	// RATE_LIMIT_HEADERS): X-RateLimit-*, the IETF draft's RateLimit-Policy
	// and RateLimit, or both (the zero value).
	HeaderSets ratelimitheader.Sets
	// ShadowMode is the reference service's global SHADOW_MODE: every
	// descriptor is decided, counted and reported as usual, but an overall
	// OVER_LIMIT is answered as OK (and counted in
	// throttle_ratelimit_global_shadow_mode_total).
	ShadowMode bool
	// DynamicMetadata sets the response's dynamic_metadata as the
	// reference service's RESPONSE_DYNAMIC_METADATA does (see
	// dynamicMetadata).
	DynamicMetadata bool
	// MaxValueStatsKeys caps the distinct metric keys that carry request
	// values (detailed_metric, value_to_metric, limit overrides); beyond it
	// a decision is counted under the descriptor's configured key. 0 means
	// the default, 1000; negative means none are kept.
	MaxValueStatsKeys int
	// NearLimitRatio is the share of a limit above which a request within the
	// limit counts as near_limit. Default 0.8, as the reference service.
	NearLimitRatio float64
	// Now is the clock for limits the engine does not decide (a limit of 0).
	// Default time.Now.
	Now func() time.Time
	// Log is required.
	Log *slog.Logger
	// Registerer receives the service's metrics; optional.
	Registerer prometheus.Registerer
	// TracerProvider, when set, traces the calls NewGRPCServer serves with
	// OpenTelemetry (see trace.go). Default nil, and the no-op provider
	// alike: no spans, no cost.
	TracerProvider trace.TracerProvider
	// Propagator reads the caller's trace context from the call's metadata.
	// Default: W3C Trace Context (traceparent, tracestate).
	Propagator propagation.TextMapPropagator
}

// Server implements RateLimitService.
type Server struct {
	rlsv3.UnimplementedRateLimitServiceServer

	opts    Options
	metrics *metrics
	tracing *tracing // nil: tracing off

	rules *ruledomain.Cache // domains built from REST clients' descriptor rules
}

// New returns a Server.
func New(opts Options) (*Server, error) {
	if opts.Limiter == nil || opts.Log == nil {
		return nil, errors.New("ratelimitsvc: Limiter and Log are required")
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.NearLimitRatio <= 0 || opts.NearLimitRatio > 1 {
		opts.NearLimitRatio = 0.8
	}
	if opts.MaxValueStatsKeys == 0 {
		opts.MaxValueStatsKeys = 1000
	}
	m, err := newMetrics(opts.Registerer, max(opts.MaxValueStatsKeys, 0))
	if err != nil {
		return nil, err
	}
	tr := newTracing(opts.TracerProvider, opts.Propagator)
	if tr != nil {
		opts.Limiter = tracedLimiter{opts.Limiter}
	}
	return &Server{opts: opts, metrics: m, tracing: tr, rules: ruledomain.New(opts.Rules, opts.Log)}, nil
}

// limited is one request descriptor's limit, ready for the engine.
type limited struct {
	index    int // descriptor position
	limit    descriptors.RateLimit
	unit     rlsv3.RateLimitResponse_RateLimit_Unit
	shadow   bool
	quota    bool           // quota_mode: over the limit fails the request only with every other quota
	statsKey string         // metric label: the reference service's stats key without the domain
	rollup   string         // statsKey without request values, for when value keys are capped
	metadata map[string]any // the descriptor's metadata, for dynamic metadata
	key      algorithms.Key
	engine   algorithms.Limit
	hits     int64
	retry    time.Duration // the decision's RetryAfter, for the response headers
}

// ShouldRateLimit decides every descriptor of req in one engine batch.
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if err := validate(req); err != nil {
		return nil, err
	}
	requestHits := int64(req.GetHitsAddend())
	if requestHits == 0 {
		requestHits = 1
	}
	domain := req.GetDomain()
	if err := s.configPending(domain); err != nil {
		return nil, err
	}
	matches, known := s.match(domain, req.GetDescriptors())
	prepared := make([]*limited, len(req.GetDescriptors()))

	resp := &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses:    make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(req.GetDescriptors())),
	}
	todo := make([]*limited, 0, len(req.GetDescriptors()))
	for i, d := range req.GetDescriptors() {
		hits := requestHits
		if h := d.GetHitsAddend(); h != nil {
			hits = int64(min(h.GetValue(), algorithms.MaxLimit))
		}
		st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
		resp.Statuses[i] = st
		l, ok := s.prepare(domain, known, d, matches[i], i, hits)
		if !ok {
			continue // no limit applies
		}
		prepared[i] = &l
		switch {
		case l.limit.Unlimited:
			st.LimitRemaining = math.MaxUint32
		case l.limit.AlwaysOverLimit():
			s.metrics.observe(domain, l.statsKey, l.rollup, hits, over, l.shadow, false)
			st.CurrentLimit = currentLimit(&l)
			st.DurationUntilReset = durationpb.New(untilUnitEnds(l.limit.WindowLength(), s.opts.Now()))
			if !l.shadow {
				st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			}
		default:
			todo = append(todo, &l)
		}
	}

	if len(todo) > 0 {
		reqs := make([]algorithms.Request, len(todo))
		for i, l := range todo {
			// Domain-scoped counters: no API resets them, so Redis keeps
			// no index for them.
			reqs[i] = algorithms.Request{Key: l.key, Limit: l.engine, Hits: l.hits, Unindexed: true}
		}
		decisions, err := s.opts.Limiter.Check(ctx, reqs)
		if err != nil {
			if errors.Is(err, algorithms.ErrInvalid) {
				return nil, status.Errorf(codes.InvalidArgument, "%v", err)
			}
			if ctx.Err() != nil {
				return nil, status.FromContextError(ctx.Err()).Err()
			}
			if errors.Is(err, algorithms.ErrOverloaded) {
				// No decision within the deadline although Redis answers:
				// Envoy applies its own failure_mode_deny.
				return nil, status.Error(codes.Unavailable, "rate limit service overloaded: no decision within the deadline")
			}
			s.opts.Log.ErrorContext(ctx, "rate limit backend failed", "domain", domain, "err", err)
			return nil, status.Error(codes.Unavailable, "rate limit backend unavailable")
		}
		for i, d := range decisions {
			l := todo[i]
			l.retry = d.RetryAfter
			st := resp.Statuses[l.index]
			st.CurrentLimit = currentLimit(l)
			st.LimitRemaining = uint32(min(d.Remaining, math.MaxUint32))
			st.DurationUntilReset = durationpb.New(d.ResetAfter.Round(time.Second))
			outcome := within
			if !d.Allowed {
				outcome = over
				if !l.shadow {
					st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
				}
			} else if used := d.Limit - d.Remaining; float64(used) > s.opts.NearLimitRatio*float64(d.Limit) {
				outcome = near
			}
			s.metrics.observe(domain, l.statsKey, l.rollup, l.hits, outcome, l.shadow, d.Cached)
		}
	}

	s.finish(ctx, req, resp, prepared)
	return resp, nil
}

// validate refuses what Envoy would never send: an empty domain, no
// descriptors, a descriptor without entries, an entry without a key.
func validate(req *rlsv3.RateLimitRequest) error {
	if req.GetDomain() == "" {
		return status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	}
	if len(req.GetDescriptors()) == 0 {
		return status.Error(codes.InvalidArgument, "rate limit descriptor list must not be empty")
	}
	for i, d := range req.GetDescriptors() {
		if d == nil || len(d.GetEntries()) == 0 {
			return status.Errorf(codes.InvalidArgument, "descriptor %d has no entries", i)
		}
		for j, e := range d.GetEntries() {
			if e.GetKey() == "" {
				return status.Errorf(codes.InvalidArgument, "descriptor %d entry %d has an empty key", i, j)
			}
		}
	}
	return nil
}

// match finds each descriptor's limit: in the YAML configuration when it has
// the domain, else in the rules of the client that owns the domain. Limits
// named in another match's replaces are dropped. It reports whether the
// domain is configured at all, looked up once.
func (s *Server) match(domain string, ds []*rlcommon.RateLimitDescriptor) ([]*descriptors.Match, bool) {
	var dom *descriptors.Domain
	if s.opts.Descriptors != nil {
		if cfg := s.opts.Descriptors(); cfg != nil {
			dom = cfg.Domain(domain)
		}
	}
	if dom == nil {
		dom = s.ruleDomain(domain)
	}
	out := make([]*descriptors.Match, len(ds))
	if dom == nil {
		s.metrics.domainNotFound.Inc()
		return out, false
	}
	for i, d := range ds {
		out[i] = dom.Match(entries(d))
	}
	return descriptors.ApplyReplaces(out), true
}

func entries(d *rlcommon.RateLimitDescriptor) []descriptors.Entry {
	es := make([]descriptors.Entry, len(d.GetEntries()))
	for i, e := range d.GetEntries() {
		es[i] = descriptors.Entry{Key: e.GetKey(), Value: e.GetValue()}
	}
	return es
}

// prepare turns a descriptor and its match (or its limit override) into
// what the engine decides. ok is false when no limit applies.
func (s *Server) prepare(domain string, known bool, d *rlcommon.RateLimitDescriptor, m *descriptors.Match, index int, hits int64) (limited, bool) {
	if o := d.GetLimit(); o != nil {
		// The override wins over the configuration, in a known domain only
		// (as the reference service). It never runs in shadow mode.
		if !known {
			return limited{}, false
		}
		window := descriptors.Unit(o.GetUnit()).Window()
		if mult := o.GetUnitMultiplier(); mult != nil && mult.GetValue() > 0 {
			window *= time.Duration(mult.GetValue())
		}
		rl := descriptors.RateLimit{RequestsPerUnit: o.GetRequestsPerUnit(), Unit: descriptors.Unit(o.GetUnit()), Window: window}
		l := limited{index: index, limit: rl, unit: rlsv3.RateLimitResponse_RateLimit_Unit(o.GetUnit()), statsKey: fullKey(d), rollup: keysOnly(d), hits: hits,
			key: algorithms.Key{Scope: domain, Identifier: overrideCounter(d)}}
		if rl.Unlimited || rl.AlwaysOverLimit() {
			return l, true
		}
		if window <= 0 {
			return limited{}, false // an override with no usable unit: nothing to enforce
		}
		l.engine = algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: int64(rl.RequestsPerUnit), Window: window}
		return l, true
	}
	if m == nil {
		return limited{}, false
	}
	l := limited{index: index, limit: m.Limit, unit: rlsv3.RateLimitResponse_RateLimit_Unit(m.Limit.Unit), shadow: m.ShadowMode,
		quota: m.QuotaMode && !m.Limit.Unlimited, statsKey: withoutDomain(m.StatsKey, m.Domain), rollup: withoutDomain(m.ConfigKey, m.Domain),
		metadata: m.Metadata, key: m.Key(), hits: hits}
	if m.Limit.Unlimited || m.Limit.AlwaysOverLimit() {
		return l, true
	}
	el, err := m.Limit.EngineLimit()
	if err != nil {
		// Validated when loaded; a limit the engine cannot take is a bug
		// in the configuration check, not the caller's fault.
		s.opts.Log.Error("descriptor limit not enforceable", "domain", domain, "stats_key", m.StatsKey, "err", err)
		return limited{}, false
	}
	l.engine = el
	return l, true
}

// withoutDomain is a stats key without its leading domain: the metric
// label key (the domain is a label of its own).
func withoutDomain(k, domain string) string {
	if len(k) > len(domain) && k[:len(domain)] == domain && k[len(domain)] == '.' {
		return k[len(domain)+1:]
	}
	return k
}

// fullKey is the reference service's descriptor key: key_value parts joined
// with '.', used as the metric label of overrides.
func fullKey(d *rlcommon.RateLimitDescriptor) string { return joinEntries(d, true) }

// joinEntries joins a descriptor's keys with '.', each with "_value" when
// withValues and it has one.
func joinEntries(d *rlcommon.RateLimitDescriptor, withValues bool) string {
	var b []byte
	for i, e := range d.GetEntries() {
		if i > 0 {
			b = append(b, '.')
		}
		b = append(b, e.GetKey()...)
		if withValues && e.GetValue() != "" {
			b = append(b, '_')
			b = append(b, e.GetValue()...)
		}
	}
	return string(b)
}

// overrideCounter identifies an override's state: every key and value,
// length-prefixed so no two descriptors share it.
func overrideCounter(d *rlcommon.RateLimitDescriptor) string {
	b := []byte("override")
	for _, e := range d.GetEntries() {
		b = append(b, '|')
		b = strconv.AppendInt(b, int64(len(e.GetKey())), 10)
		b = append(b, ':')
		b = append(b, e.GetKey()...)
		b = strconv.AppendInt(b, int64(len(e.GetValue())), 10)
		b = append(b, ':')
		b = append(b, e.GetValue()...)
	}
	return string(b)
}

func currentLimit(l *limited) *rlsv3.RateLimitResponse_RateLimit {
	return &rlsv3.RateLimitResponse_RateLimit{Name: l.limit.Name, RequestsPerUnit: l.limit.RequestsPerUnit, Unit: l.unit}
}

// untilUnitEnds is how long until the current window of length w ends,
// windows aligned to the Unix epoch (the reference service's reset).
func untilUnitEnds(w time.Duration, now time.Time) time.Duration {
	if w <= 0 {
		return 0
	}
	return (w - time.Duration(now.UnixNano())%w).Round(time.Second)
}
