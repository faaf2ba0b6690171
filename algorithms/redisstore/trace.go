package redisstore

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/throttle-rl/throttle/algorithms"
)

// OpenTelemetry spans of the Redis store (Options.Tracer).
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

// Span names and attribute keys of the store's spans.
const (
	spanRedisCheck = "redis.check"
	spanRedisBatch = "redis.batch"

	attrBatchSize        = attribute.Key("throttle.batch.size")
	attrCoalesced        = attribute.Key("throttle.coalesced")
	attrCoalescedSize    = attribute.Key("throttle.coalesced.size")
	attrCoalescedCallers = attribute.Key("throttle.coalesced.callers")
)

// traceCheck starts a call's "redis.check" span, under its caller's span
// when that one records; it returns the call's context and what ends the
// span with the call's error. Without a recording span it starts nothing.
func (s *Store) traceCheck(ctx context.Context, sh *master, reqs []algorithms.Request) (context.Context, func(error)) {
	if s.tracer == nil || !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, endNothing
	}
	coalesced := sh.merge != nil
	kind := trace.SpanKindClient
	if coalesced {
		kind = trace.SpanKindInternal // the round trip is redis.batch
	}
	ctx, span := s.tracer.Start(ctx, spanRedisCheck, trace.WithSpanKind(kind))
	span.SetAttributes(semconv.DBSystemNameRedis, attrBatchSize.Int(len(reqs)), attrCoalesced.Bool(coalesced))
	return ctx, func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
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
