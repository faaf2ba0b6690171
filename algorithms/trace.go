package algorithms

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// OpenTelemetry spans of the Redis store (RedisOptions.TracerProvider).
//
// A Redis call gets a span only under a recording span of its caller (the
// front door's decision span): with tracing off, or for a request the
// sampler dropped, the store makes none and allocates nothing for tracing.
//
// Without coalescing, "redis.check" (kind client) is the round trip itself.
//
// With coalescing one round trip decides the batches of many callers, each
// in a trace of its own, so it cannot be the child of all of them. What is
// chosen here:
//   - every caller gets its own "redis.check" (kind internal), the child of
//     its decision span, covering its whole wait: the queue, then the merged
//     call. Its attributes say it was coalesced, with how many callers and
//     requests; its event "sent" marks when a worker took it;
//   - the merged call is one "redis.batch" span (kind client), the child of
//     the first caller's "redis.check" (so it sits inside one real trace and
//     follows that trace's sampling decision), with a link to every other
//     caller's "redis.check", and each of those gets a link back to it.
//
// So every trace shows how long its caller waited and why; the round trip
// shows once, linked from all the traces it served.

const tracerName = "github.com/throttle-rl/throttle/algorithms"

// Span names and attribute keys of the store's spans.
const (
	spanRedisCheck = "redis.check"
	spanRedisBatch = "redis.batch"

	attrBatchSize        = attribute.Key("throttle.batch.size")
	attrCoalesced        = attribute.Key("throttle.coalesced")
	attrCoalescedSize    = attribute.Key("throttle.coalesced.size")
	attrCoalescedCallers = attribute.Key("throttle.coalesced.callers")
)

// Tracer returns tp's tracer called name, or nil when tp does not trace
// (nil, or OpenTelemetry's no-op provider): nil means no span is ever
// started. The engine and both front doors (restapi, ratelimitsvc) decide
// "is tracing on" with it.
func Tracer(tp trace.TracerProvider, name string) trace.Tracer {
	if tp == nil {
		return nil
	}
	if _, ok := tp.(noop.TracerProvider); ok {
		return nil
	}
	return tp.Tracer(name)
}

// The attributes of a decision span (throttle.decide), the same on REST and
// gRPC.
const (
	AttrAPI       = attribute.Key("throttle.api")
	AttrAlgorithm = attribute.Key("throttle.algorithm")
	AttrHits      = attribute.Key("throttle.hits")
	AttrAllowed   = attribute.Key("throttle.allowed")
	AttrDegraded  = attribute.Key("throttle.degraded")
)

// tracedCheck is onShard for a store with a tracer: reqs are validated and
// not empty.
func (s *RedisStore) tracedCheck(ctx context.Context, sh *shard, reqs []Request) ([]Decision, error) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		if sh.merge != nil {
			return sh.merge.check(ctx, reqs)
		}
		return s.decide(ctx, sh, reqs, nil)
	}
	coalesced := sh.merge != nil
	kind := trace.SpanKindClient
	if coalesced {
		kind = trace.SpanKindInternal // the round trip is redis.batch
	}
	ctx, span := s.tracer.Start(ctx, spanRedisCheck, trace.WithSpanKind(kind))
	defer span.End()
	span.SetAttributes(semconv.DBSystemNameRedis, attrBatchSize.Int(len(reqs)), attrCoalesced.Bool(coalesced))
	var ds []Decision
	var err error
	if coalesced {
		ds, err = sh.merge.check(ctx, reqs)
	} else {
		ds, err = s.decide(ctx, sh, reqs, nil)
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return ds, err
}

// endNothing ends no span.
func endNothing(error) {}

// traceBatch starts the span of a merged call for the callers of group
// (see the top of this file) and returns the context for the call and the
// function that ends the span with the call's error.
func (c *coalescer) traceBatch(ctx context.Context, group []*waiting, n int) (context.Context, func(error)) {
	if c.tracer == nil {
		return ctx, endNothing
	}
	var parent trace.Span
	var callers []trace.Span
	for _, w := range group {
		if sp := trace.SpanFromContext(w.ctx); sp.IsRecording() {
			if parent == nil {
				parent = sp
			}
			callers = append(callers, sp)
		}
	}
	if parent == nil {
		return ctx, endNothing
	}
	links := make([]trace.Link, 0, len(callers)-1)
	for _, sp := range callers[1:] {
		links = append(links, trace.Link{SpanContext: sp.SpanContext()})
	}
	ctx, span := c.tracer.Start(trace.ContextWithSpan(ctx, parent), spanRedisBatch,
		trace.WithSpanKind(trace.SpanKindClient), trace.WithLinks(links...))
	span.SetAttributes(semconv.DBSystemNameRedis, attrBatchSize.Int(n), attrCoalescedCallers.Int(len(group)))
	back := trace.Link{SpanContext: span.SpanContext()}
	for i, sp := range callers {
		sp.AddEvent("sent")
		sp.SetAttributes(attrCoalescedSize.Int(n), attrCoalescedCallers.Int(len(group)))
		if i > 0 {
			sp.AddLink(back)
		}
	}
	return ctx, func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}
