// Package ratelimitsvc is Envoy's rate-limit service,
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit, over the
// descriptor configuration (YAML, package descriptors) and the descriptor
// rules clients make through the REST API, deciding through the engine
// (package algorithms). Proto types stay in this package.
package ratelimitsvc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/descriptors"
	"github.com/throttle-rl/throttle/internal/envoycounters"
	"github.com/throttle-rl/throttle/internal/inputsize"
	"github.com/throttle-rl/throttle/internal/ratelimitheader"
	"github.com/throttle-rl/throttle/internal/ruledomain"
)

// Options configures a Server.
type Options struct {
	// Limiter decides; required. Usually a redisstore.Guard over Redis, or
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
	// Retry-After when the overall code is OVER_LIMIT (see headerSets).
	ResponseHeaders bool
	// HeaderSets chooses the sets ResponseHeaders adds (setting
	// RATE_LIMIT_HEADERS): X-RateLimit-*, the IETF draft's RateLimit-Policy
	// and RateLimit, or both (the zero value).
	HeaderSets ratelimitheader.Sets
	// LimitHeaders, when set, adds the reference service's three headers
	// of the descriptor closest to its limit to every response with a
	// limit (LIMIT_RESPONSE_HEADERS_ENABLED; see limitHeaders), beside
	// or instead of ResponseHeaders' sets.
	LimitHeaders *LimitHeaders
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
	// MaxDescriptors caps the descriptors of one request (setting
	// MAX_DESCRIPTORS_PER_REQUEST), MaxDescriptorEntries the entries of
	// one descriptor (MAX_DESCRIPTOR_ENTRIES), and MaxOverrideWindow the
	// window of a limit override (MAX_OVERRIDE_WINDOW, at most
	// algorithms.MaxWindow): a request over one of them, or over the fixed
	// caps of package inputsize (the bytes of a domain, key, value and
	// descriptor), is refused with INVALID_ARGUMENT naming the part before
	// anything is matched or counted, so one cheap request cannot cost the
	// counter backend thousands of decisions nor the stats a huge name. 0
	// means the defaults, inputsize.DefaultDescriptors, DefaultEntries and
	// DefaultOverrideWindow.
	MaxDescriptors, MaxDescriptorEntries int
	MaxOverrideWindow                    time.Duration
	// CountRejectedHits counts every hit of every descriptor, admitted or
	// not, as the reference service does by default (setting
	// COUNT_REJECTED_HITS, for exact drop-in parity): each limit counts its
	// hits even past the limit (algorithms.Request.AlwaysCount), decided on
	// its own. By default a rejected request consumes nothing, from any of
	// its descriptors (see decide.go).
	CountRejectedHits bool
	// NearLimitRatio is the share of a limit above which a request within the
	// limit counts as near_limit. Default 0.8, as the reference service.
	NearLimitRatio float64
	// MaxConnectionAge asks a gRPC connection to close (GOAWAY) after about
	// this long (±10 %), and MaxConnectionAgeGrace is how long its calls in
	// flight then have (the reference's GRPC_MAX_CONNECTION_AGE and
	// _GRACE). 0: never.
	MaxConnectionAge, MaxConnectionAgeGrace time.Duration
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
	// ReferenceStats receives the reference service's stats
	// (referencestats.go); optional.
	ReferenceStats ReferenceStats
}

// The defaults of Options.MaxDescriptors, MaxDescriptorEntries and
// MaxOverrideWindow: inputsize's.
const (
	DefaultMaxDescriptors       = inputsize.DefaultDescriptors
	DefaultMaxDescriptorEntries = inputsize.DefaultEntries
	DefaultMaxOverrideWindow    = inputsize.DefaultOverrideWindow
)

// Server implements RateLimitService.
type Server struct {
	rlsv3.UnimplementedRateLimitServiceServer

	opts    Options
	limits  inputsize.Limits // the caps on a request's size
	metrics *metrics
	tracing *tracing // nil: tracing off

	rules   *ruledomain.Cache // domains built from REST clients' descriptor rules
	headers []headerSet       // the response headers' sets (headers.go)
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
	limits := inputsize.Limits{Descriptors: opts.MaxDescriptors, Entries: opts.MaxDescriptorEntries,
		OverrideWindow: min(opts.MaxOverrideWindow, algorithms.MaxWindow)}.WithDefaults()
	m, err := newMetrics(opts.Registerer, max(opts.MaxValueStatsKeys, 0), opts.ReferenceStats)
	if err != nil {
		return nil, err
	}
	tr := newTracing(opts.TracerProvider, opts.Propagator)
	return &Server{opts: opts, limits: limits, metrics: m, tracing: tr, rules: ruledomain.New(opts.Rules, opts.Log),
		headers: headerSets(&opts)}, nil
}

// ShouldRateLimit decides every descriptor of req in one engine batch (see
// decide.go for how several descriptors and several limits combine).
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if err := s.validate(req); err != nil {
		s.metrics.serviceError()
		return nil, err
	}
	domain := req.GetDomain()
	if err := s.configPending(domain); err != nil {
		s.metrics.serviceError()
		return nil, err
	}
	prepared := s.prepareAll(domain, req.GetDescriptors(), requestHits(req))

	resp := &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses:    make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(req.GetDescriptors())),
	}
	todo := make([]*limited, 0, len(prepared))
	for i, l := range prepared {
		st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
		resp.Statuses[i] = st
		switch {
		case l == nil: // no limit applies
		case l.unlimited():
			st.LimitRemaining = math.MaxUint32
		default:
			todo = append(todo, l)
		}
	}
	if err := s.decide(ctx, todo); err != nil {
		return nil, s.backendError(ctx, domain, err)
	}
	if s.metrics.ref != nil && degraded(todo) {
		s.metrics.redisError()
	}
	for _, l := range todo {
		ls := l.decisive()
		st := resp.Statuses[l.index]
		st.CurrentLimit = currentLimit(ls)
		st.LimitRemaining = uint32(min(ls.remaining, math.MaxUint32))
		st.DurationUntilReset = durationpb.New(ls.reset.Round(time.Second))
		if ls.over && !l.shadow {
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		s.metrics.observe(domain, l.statsKey, l.rollup, l.hits, s.outcome(ls), l.shadow, ls.cached)
	}

	s.finish(ctx, req, resp, prepared)
	return resp, nil
}

// requestHits is the request's hits_addend, 0 meaning 1 (the API's rule).
func requestHits(req *rlsv3.RateLimitRequest) int64 {
	if h := int64(req.GetHitsAddend()); h > 0 {
		return h
	}
	return 1
}

// outcome is how a descriptor whose status reports ls counts in the metrics.
func (s *Server) outcome(ls *limitState) outcome {
	switch {
	case ls.over:
		return over
	case ls.engine.Algorithm != "" && float64(ls.engine.Limit-ls.remaining) > s.opts.NearLimitRatio*float64(ls.engine.Limit):
		return near
	}
	return within
}

// backendError is the gRPC error for a failed engine call: counted as the
// reference's service_error when the request was invalid, as its
// redis_error when the backend failed or was too slow, not at all when the
// caller went away.
func (s *Server) backendError(ctx context.Context, domain string, err error) error {
	if errors.Is(err, algorithms.ErrInvalid) {
		s.metrics.serviceError()
		return status.Errorf(codes.InvalidArgument, "%v", err)
	}
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	s.metrics.redisError()
	if errors.Is(err, algorithms.ErrOverloaded) {
		// No decision within the deadline although Redis answers:
		// Envoy applies its own failure_mode_deny.
		return status.Error(codes.Unavailable, "rate limit service overloaded: no decision within the deadline")
	}
	s.opts.Log.ErrorContext(ctx, "rate limit backend failed", "domain", domain, "err", err)
	return status.Error(codes.Unavailable, "rate limit backend unavailable")
}

// validate refuses what Envoy would never send: an empty domain, no
// descriptors, a descriptor without entries, an entry without a key; and a
// request over a cap of inputsize (descriptors, entries, the bytes of the
// domain, a key, a value or a descriptor, an override's window), counted
// in throttle_ratelimit_oversized_requests_total by reason. It reads no
// further than the caps: past gRPC's decoding of the message, refusing an
// oversized request costs no more than checking an allowed one.
func (s *Server) validate(req *rlsv3.RateLimitRequest) error {
	if req.GetDomain() == "" {
		return status.Error(codes.InvalidArgument, "rate limit domain must not be empty")
	}
	msg, oversized := s.refuse(req.GetDomain(), req.GetDescriptors())
	if oversized != "" {
		s.metrics.oversized.WithLabelValues(oversized).Inc()
	}
	if msg != "" {
		return status.Error(codes.InvalidArgument, msg)
	}
	return nil
}

// refuse says why the descriptors of a request on domain cannot be decided
// ("" when they can), and, for a request over a cap, which one (a reason of
// throttle_ratelimit_oversized_requests_total). See validate.
func (s *Server) refuse(domain string, ds []*rlcommon.RateLimitDescriptor) (msg, oversized string) {
	if len(ds) == 0 {
		return "rate limit descriptor list must not be empty", ""
	}
	if err := s.limits.Request(domain, len(ds), func(i int) inputsize.Descriptor { return (*sized)(ds[i]) }); err != nil {
		var e *inputsize.Error
		errors.As(err, &e)
		return err.Error(), e.Reason
	}
	for i, d := range ds {
		es := d.GetEntries()
		if len(es) == 0 {
			return fmt.Sprintf("descriptor %d has no entries", i), ""
		}
		for j, e := range es {
			if e.GetKey() == "" {
				return fmt.Sprintf("descriptor %d entry %d has an empty key", i, j), ""
			}
		}
	}
	return "", ""
}

// sized is a request's descriptor as inputsize reads it.
type sized rlcommon.RateLimitDescriptor

func (d *sized) Len() int { return len((*rlcommon.RateLimitDescriptor)(d).GetEntries()) }

func (d *sized) Entry(j int) (string, string) {
	e := (*rlcommon.RateLimitDescriptor)(d).GetEntries()[j]
	return e.GetKey(), e.GetValue()
}

func (d *sized) OverrideWindow() time.Duration {
	o := (*rlcommon.RateLimitDescriptor)(d).GetLimit()
	if o == nil {
		return 0
	}
	return descriptors.RateLimit{Unit: descriptors.Unit(o.GetUnit()), UnitMultiplier: o.GetUnitMultiplier().GetValue()}.WindowLength()
}

// domain returns the limits of the domain named name and where they come
// from: the YAML configuration when it has the domain, else the rules of
// the client that owns it; nil when neither does.
func (s *Server) domain(name string) (*descriptors.Domain, envoycounters.Source) {
	if s.opts.Descriptors != nil {
		if cfg := s.opts.Descriptors(); cfg != nil {
			if d := cfg.Domain(name); d != nil {
				return d, envoycounters.YAML
			}
		}
	}
	if d := s.ruleDomain(name); d != nil {
		return d, envoycounters.Rules
	}
	return nil, envoycounters.NoLimits
}

// currentLimit is a status's current_limit: the limit ls, with its
// unit_multiplier when it has one above 1.
func currentLimit(ls *limitState) *rlsv3.RateLimitResponse_RateLimit {
	cl := &rlsv3.RateLimitResponse_RateLimit{Name: ls.limit.Name, RequestsPerUnit: ls.limit.RequestsPerUnit, Unit: ls.unit}
	if m := ls.limit.Multiplier(); m > 1 && ls.unit != rlsv3.RateLimitResponse_RateLimit_UNKNOWN {
		cl.UnitMultiplier = wrapperspb.UInt32(m)
	}
	return cl
}

// untilUnitEnds is how long until the current window of length w ends,
// windows aligned to the Unix epoch (the reference service's reset).
func untilUnitEnds(w time.Duration, now time.Time) time.Duration {
	if w <= 0 {
		return 0
	}
	return (w - time.Duration(now.UnixNano())%w).Round(time.Second)
}
