package redisstore

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/throttle-rl/throttle/algorithms"
)

// newRecorder returns a tracer provider that keeps every span in memory.
func newRecorder(t *testing.T) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return tp, rec
}

// spansNamed returns the ended spans called name, in the order they ended.
func spansNamed(rec *tracetest.SpanRecorder, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// attrs is a span's attributes by key.
func attrs(s sdktrace.ReadOnlySpan) map[string]any {
	m := map[string]any{}
	for _, kv := range s.Attributes() {
		m[string(kv.Key)] = kv.Value.AsInterface()
	}
	return m
}

func linked(s sdktrace.ReadOnlySpan) []trace.SpanID {
	var ids []trace.SpanID
	for _, l := range s.Links() {
		ids = append(ids, l.SpanContext.SpanID())
	}
	return ids
}

// testTracerName is the tracer the store gets, as cmd/throttle names it.
const testTracerName = "github.com/throttle-rl/throttle/algorithms"

func traceRequest(t *testing.T) []algorithms.Request {
	return []algorithms.Request{{Key: algorithms.Key{Scope: uniqueScope(t), Identifier: "u"}, Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 10, Window: time.Minute}, Hits: 1}}
}

func TestRedisSpanIsChildOfTheDecision(t *testing.T) {
	tp, rec := newRecorder(t)
	s := New(newRedisClient(t, 0), Options{Tracer: tp.Tracer(testTracerName)})
	ctx, decide := tp.Tracer("test").Start(context.Background(), "throttle.decide")
	reqs := append(traceRequest(t), traceRequest(t)...)
	if _, err := s.Check(ctx, reqs); err != nil {
		t.Fatal(err)
	}
	decide.End()

	got := spansNamed(rec, "redis.check")
	if len(got) != 1 {
		t.Fatalf("%d redis.check spans, want 1", len(got))
	}
	sp := got[0]
	if sp.Parent().SpanID() != decide.SpanContext().SpanID() || sp.SpanContext().TraceID() != decide.SpanContext().TraceID() {
		t.Errorf("redis.check parent = %v, want the decision span %v", sp.Parent().SpanID(), decide.SpanContext().SpanID())
	}
	if sp.SpanKind() != trace.SpanKindClient {
		t.Errorf("kind = %v, want client", sp.SpanKind())
	}
	want := map[string]any{"db.system.name": "redis", "throttle.batch.size": int64(2), "throttle.coalesced": false}
	if diff := cmp.Diff(want, attrs(sp)); diff != "" {
		t.Errorf("attributes (-want +got):\n%s", diff)
	}
	if sp.Status().Code != codes.Unset {
		t.Errorf("status = %v, want unset", sp.Status())
	}
	if n := len(spansNamed(rec, "redis.batch")); n != 0 {
		t.Errorf("%d redis.batch spans without coalescing, want 0", n)
	}
}

func TestRedisSpanNeedsARecordingParent(t *testing.T) {
	tp, rec := newRecorder(t)
	s := New(newRedisClient(t, 0), Options{Tracer: tp.Tracer(testTracerName), Coalesce: 1})
	t.Cleanup(s.Close)
	unsampled := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	ctx, sp := unsampled.Tracer("test").Start(context.Background(), "dropped")
	defer sp.End()
	for _, ctx := range []context.Context{context.Background(), ctx} {
		if _, err := s.Check(ctx, traceRequest(t)); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(rec.Ended()) + len(rec.Started()); n != 0 {
		t.Errorf("%d spans without a recording parent, want none", n)
	}
}

func TestNoTracerIsOff(t *testing.T) {
	s := New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), Options{Coalesce: 1})
	if s.tracer != nil || singleMaster(s).merge.tracer != nil {
		t.Error("the store has a tracer")
	}
	s.Close()
}

func TestRedisSpanRecordsTheError(t *testing.T) {
	tp, rec := newRecorder(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { rdb.Close() })
	s := New(rdb, Options{Tracer: tp.Tracer(testTracerName)})
	ctx, decide := tp.Tracer("test").Start(context.Background(), "throttle.decide")
	_, err = s.Check(ctx, traceRequest(t))
	decide.End()
	if err == nil {
		t.Fatal("Check succeeded on a closed port")
	}
	got := spansNamed(rec, "redis.check")
	if len(got) != 1 {
		t.Fatalf("%d redis.check spans, want 1", len(got))
	}
	if st := got[0].Status(); st.Code != codes.Error || st.Description != err.Error() {
		t.Errorf("status = %+v, want Error %q", st, err.Error())
	}
	if ev := got[0].Events(); len(ev) != 1 || ev[0].Name != "exception" {
		t.Errorf("events = %v, want one exception", ev)
	}
}

// gate holds the first script call to Redis until opened, so that a test
// can line callers up behind a busy worker.
type gate struct {
	once    sync.Once
	open    chan struct{}
	entered chan struct{}
}

func newGate() *gate { return &gate{open: make(chan struct{}), entered: make(chan struct{})} }

func (g *gate) wait() {
	g.once.Do(func() {
		close(g.entered)
		<-g.open
	})
}

func (g *gate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if strings.HasPrefix(cmd.Name(), "eval") || cmd.Name() == "fcall" {
			g.wait()
		}
		return next(ctx, cmd)
	}
}

func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		g.wait()
		return next(ctx, cmds)
	}
}

// TestCoalescedSpans lines up callers A (sent alone), then B, C, D (merged
// into one call while A's is under way), and checks the span design of
// trace.go: a redis.check per caller under its decision, and per merged
// call a redis.batch under its first caller's redis.check, linked both ways
// with the others.
func TestCoalescedSpans(t *testing.T) {
	tp, rec := newRecorder(t)
	rdb := newRedisClient(t, 0)
	g := newGate()
	rdb.AddHook(g)
	s := New(rdb, Options{Tracer: tp.Tracer(testTracerName), Coalesce: 1})
	t.Cleanup(s.Close)
	tracer := tp.Tracer("test")

	names := []string{"A", "B", "C", "D"}
	decisions := map[string]trace.SpanContext{}
	var wg sync.WaitGroup
	errs := make(chan error, len(names))
	for i, name := range names {
		ctx, sp := tracer.Start(context.Background(), "decide "+name)
		decisions[name] = sp.SpanContext()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer sp.End()
			if _, err := s.Check(ctx, traceRequest(t)); err != nil {
				errs <- err
			}
		}()
		if i == 0 {
			<-g.entered // the worker holds A's call
			continue
		}
		for deadline := time.Now().Add(10 * time.Second); len(singleMaster(s).merge.queue) < i; {
			if time.Now().After(deadline) {
				t.Fatalf("caller %s never queued", name)
			}
			time.Sleep(time.Millisecond)
		}
	}
	close(g.open)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	checks := map[string]sdktrace.ReadOnlySpan{} // caller → its redis.check
	for _, sp := range spansNamed(rec, "redis.check") {
		for name, d := range decisions {
			if sp.Parent().SpanID() == d.SpanID() && sp.SpanContext().TraceID() == d.TraceID() {
				checks[name] = sp
			}
		}
	}
	if len(checks) != len(names) {
		t.Fatalf("redis.check spans under %d of the %d decisions", len(checks), len(names))
	}
	batches := spansNamed(rec, "redis.batch")
	if len(batches) != 2 {
		t.Fatalf("%d redis.batch spans, want 2 (A alone, then B+C+D)", len(batches))
	}
	id := func(name string) trace.SpanID { return checks[name].SpanContext().SpanID() }
	for _, tt := range []struct {
		batch   sdktrace.ReadOnlySpan
		parent  string
		links   []trace.SpanID
		size    int64
		callers int64
	}{
		{batches[0], "A", nil, 1, 1},
		{batches[1], "B", []trace.SpanID{id("C"), id("D")}, 3, 3},
	} {
		if got := tt.batch.Parent().SpanID(); got != id(tt.parent) {
			t.Errorf("batch of %d: parent %v, want %s's redis.check %v", tt.size, got, tt.parent, id(tt.parent))
		}
		if diff := cmp.Diff(tt.links, linked(tt.batch)); diff != "" {
			t.Errorf("batch of %d: links (-want +got):\n%s", tt.size, diff)
		}
		want := map[string]any{"db.system.name": "redis", "throttle.batch.size": tt.size, "throttle.coalesced.callers": tt.callers}
		if diff := cmp.Diff(want, attrs(tt.batch)); diff != "" {
			t.Errorf("batch of %d: attributes (-want +got):\n%s", tt.size, diff)
		}
		if tt.batch.SpanKind() != trace.SpanKindClient {
			t.Errorf("batch of %d: kind %v, want client", tt.size, tt.batch.SpanKind())
		}
	}
	for _, name := range names {
		sp := checks[name]
		size := int64(3)
		if name == "A" {
			size = 1
		}
		want := map[string]any{
			"db.system.name": "redis", "throttle.batch.size": int64(1), "throttle.coalesced": true,
			"throttle.coalesced.size": size, "throttle.coalesced.callers": size,
		}
		if diff := cmp.Diff(want, attrs(sp)); diff != "" {
			t.Errorf("%s's redis.check attributes (-want +got):\n%s", name, diff)
		}
		var wantLinks []trace.SpanID
		if name == "C" || name == "D" {
			wantLinks = []trace.SpanID{batches[1].SpanContext().SpanID()}
		}
		if diff := cmp.Diff(wantLinks, linked(sp)); diff != "" {
			t.Errorf("%s's redis.check links (-want +got):\n%s", name, diff)
		}
		if ev := sp.Events(); len(ev) != 1 || ev[0].Name != "sent" {
			t.Errorf("%s's redis.check events = %v, want one \"sent\"", name, ev)
		}
		if sp.SpanKind() != trace.SpanKindInternal {
			t.Errorf("%s's redis.check kind %v, want internal", name, sp.SpanKind())
		}
	}
}
