package quotasvc

import (
	"context"
	"errors"
	"io"
	"maps"
	"math"
	"runtime/debug"
	"sort"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/throttle-rl/throttle/descriptors"
)

type (
	reports     = rlqsv3.RateLimitQuotaUsageReports
	response    = rlqsv3.RateLimitQuotaResponse
	action      = rlqsv3.RateLimitQuotaResponse_BucketAction
	quotaStream = rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer
)

// stream is one connected instance: an Envoy's RLQS stream, of one domain.
type stream struct {
	domain string
	// dom is the domain's descriptors the buckets were matched against;
	// when the configuration gives another, they are matched again.
	dom  *descriptors.Domain
	subs map[string]*sub // bucket key → bucket
	// pending holds the actions not sent yet, latest per bucket; wake tells
	// the stream's handler.
	pending map[string]*action
	wake    chan struct{}
}

// sub is one bucket an instance subscribed to.
type sub struct {
	st       *stream
	key      string
	instance string // its id in the split of its limit
	id       *rlqsv3.BucketId
	entries  []descriptors.Entry
	kind     string // what it maps to: shared, no_limit, unlimited, shadow, deny
	group    *group // the limit it shares; nil unless kind is shared

	// The demand: requests (allowed and denied) per second (see observe);
	// negative until known.
	rate       float64
	moved      bool          // the last estimate was a move
	lastReport time.Time     // when the last report came
	period     time.Duration // the instance's reporting interval, as seen; 0: not yet
	lastUse    time.Time     // last report counting a request

	sent    *typev3.RateLimitStrategy // the strategy last sent
	sentAt  time.Time
	created time.Time
}

// StreamRateLimitQuotas serves one instance: its reports in, its
// assignments out, until it closes the stream, breaks the protocol, or the
// server stops.
func (s *Server) StreamRateLimitQuotas(ss quotaStream) (err error) {
	defer func() {
		if r := recover(); r != nil {
			s.opts.Log.Error("panic in RLQS stream", "panic", r, "stack", string(debug.Stack()))
			err = status.Error(codes.Internal, "internal error")
		}
	}()
	ctx := ss.Context()
	done := make(chan struct{})
	defer close(done)
	msgs, recvErr := receive(ss, done)

	var st *stream
	defer func() {
		if st != nil {
			s.close(st)
		}
	}()
	var wake chan struct{} // nil until the first report opens the stream
	for {
		select {
		case m := <-msgs:
			if st == nil {
				if st, err = s.open(m.GetDomain()); err != nil {
					return err
				}
				wake = st.wake
			} else if d := m.GetDomain(); d != "" && d != st.domain {
				s.metrics.refused.WithLabelValues("domain_changed").Inc()
				return status.Errorf(codes.InvalidArgument, "domain %q differs from the stream's first report (%q): open a new stream for another domain", d, st.domain)
			}
			s.report(ctx, st, m)
		case <-wake:
			if resp := s.takePending(st); resp != nil {
				if err := ss.Send(resp); err != nil {
					return err
				}
			}
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case <-s.stopping:
			s.metrics.refused.WithLabelValues("shutting_down").Inc()
			return status.Error(codes.Unavailable, "throttle is shutting down: reconnect")
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
	}
}

// receive reads ss's reports into msgs, and the error that ends it into
// recvErr. Recv blocks until the instance sends or the stream ends, so it
// runs apart: the handler can end the stream when Stop is called. It ends
// with the stream (gRPC cancels it when the handler returns) or when done
// closes.
func receive(ss quotaStream, done <-chan struct{}) (msgs <-chan *reports, recvErr <-chan error) {
	m := make(chan *reports)
	e := make(chan error, 1)
	go func() {
		for {
			r, err := ss.Recv()
			if err != nil {
				e <- err
				return
			}
			select {
			case m <- r:
			case <-done:
				return
			}
		}
	}()
	return m, e
}

// open starts the stream of an instance of domain, which must be
// configured.
func (s *Server) open(domain string) (*stream, error) {
	select {
	case <-s.stopping:
		s.metrics.refused.WithLabelValues("shutting_down").Inc()
		return nil, status.Error(codes.Unavailable, "throttle is shutting down: reconnect")
	default:
	}
	if domain == "" {
		s.metrics.refused.WithLabelValues("no_domain").Inc()
		return nil, status.Error(codes.InvalidArgument, "the first report must name the domain")
	}
	dom, known, err := s.resolve(domain)
	if err != nil {
		s.metrics.refused.WithLabelValues("config_pending").Inc()
		return nil, err
	}
	if !known {
		s.metrics.refused.WithLabelValues("unknown_domain").Inc()
		return nil, status.Errorf(codes.NotFound, "domain %q is not configured (no descriptor file and no REST client names it)", domain)
	}
	st := &stream{domain: domain, dom: dom, subs: map[string]*sub{}, pending: map[string]*action{}, wake: make(chan struct{}, 1)}
	s.mu.Lock()
	s.streams[st] = struct{}{}
	s.mu.Unlock()
	s.metrics.streams.Inc()
	return st, nil
}

// resolve returns domain's descriptors (YAML first, then the REST rules of
// the client owning it, as ShouldRateLimit) and whether the domain is
// configured at all. It fails while the YAML configuration has not loaded
// (FORCE_START_WITHOUT_INITIAL_CONFIG) for a domain no REST client owns.
func (s *Server) resolve(domain string) (*descriptors.Domain, bool, error) {
	if s.opts.Descriptors != nil {
		cfg := s.opts.Descriptors()
		if cfg == nil && !s.rules.Owned(domain) {
			return nil, false, status.Error(codes.Unavailable, "no rate limit configuration loaded")
		}
		if d := cfg.Domain(domain); d != nil {
			return d, true, nil
		}
	}
	if d := s.rules.Domain(domain); d != nil {
		return d, true, nil
	}
	return nil, s.rules.Owned(domain), nil
}

// close forgets a stream that ended. Its demands stay in the split until
// they expire, as long as its last assignments may be in force.
func (s *Server) close(st *stream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range st.subs {
		s.leave(b)
	}
	s.metrics.buckets.Sub(float64(len(st.subs)))
	delete(s.streams, st)
	s.metrics.streams.Dec()
}

// report takes one usage report: bucket by bucket, in order, a bucket's
// first report subscribes it (and its first assignment is sent at once);
// every report updates its demand. A new bucket and a moved demand go to
// the usage store at once, for the next reassignment on every replica to
// count; the rest goes with this replica's next reassignment.
func (s *Server) report(ctx context.Context, st *stream, m *reports) {
	now := s.opts.Now()
	s.metrics.reports.Inc()
	var writes []demandWrite
	s.mu.Lock()
	for _, u := range m.GetBucketQuotaUsages() {
		id := u.GetBucketId().GetBucket()
		if reason := checkBucket(id); reason != "" {
			s.metrics.ignored.WithLabelValues(reason).Inc()
			continue
		}
		allowed, denied := u.GetNumRequestsAllowed(), u.GetNumRequestsDenied()
		if allowed > maxReportCount || denied > maxReportCount {
			s.metrics.ignored.WithLabelValues("absurd_count").Inc()
			continue
		}
		es := bucketEntries(id)
		key := bucketKey(es)
		b := st.subs[key]
		updated := false
		switch {
		case b != nil:
			updated = b.observe(allowed+denied, now, s.opts.Interval)
		case len(st.subs) >= maxBucketsPerStream:
			s.metrics.ignored.WithLabelValues("too_many_buckets").Inc()
			continue
		default:
			b = s.subscribe(st, key, id, es, now)
			b.first(allowed+denied, u.GetTimeElapsed().AsDuration(), now)
			updated = true // the next allocation counts it, on every replica
		}
		s.metrics.reported.WithLabelValues(st.domain, "allowed").Add(float64(allowed))
		s.metrics.reported.WithLabelValues(st.domain, "denied").Add(float64(denied))
		if updated && b.group != nil {
			writes = append(writes, demandWrite{group: b.group.key, demand: demand{instance: b.instance, rate: b.rate}})
		}
	}
	s.mu.Unlock()
	if len(writes) == 0 || s.degraded.Load() {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if err := s.usage.write(wctx, writes, 0); err != nil && ctx.Err() == nil {
		s.metrics.storeErrors.WithLabelValues("write").Inc()
	}
}

// subscribe adds an instance's new bucket, maps it to its limit, and queues
// its first assignment. s.mu is held.
func (s *Server) subscribe(st *stream, key string, id map[string]string, es []descriptors.Entry, now time.Time) *sub {
	b := &sub{
		st: st, key: key, instance: s.newInstanceID(), id: &rlqsv3.BucketId{Bucket: maps.Clone(id)}, entries: es,
		rate: -1, lastReport: now, lastUse: now, created: now,
	}
	st.subs[key] = b
	s.plan(b, st.dom.Match(es))
	s.metrics.buckets.Inc()
	s.metrics.subscribed.WithLabelValues(st.domain, b.kind).Inc()
	s.queue(b, s.firstStrategy(b), now)
	return b
}

// first takes a bucket's first report: its counts give a rate only when
// the instance says over how long (a stream restarted by an Envoy that kept
// its buckets); a new bucket's first report counts just its first request.
func (b *sub) first(count uint64, elapsed time.Duration, now time.Time) {
	b.lastReport = now
	if count > 0 {
		b.lastUse = now
	}
	if elapsed >= time.Second {
		b.rate = float64(count) / elapsed.Seconds()
	}
}

// observe takes one report of count requests, arriving at now, into the
// demand, and reports whether the usage store should have the new demand at
// once (see estimate).
//
// An instance reports every bucket on one timer, and each report counts the
// requests since the last: it covers one period of that timer. When a
// report arrives moves with the network and the schedulers, so the gap
// since the last one is not what it covers: a report delivered late makes
// one gap long and the next short, with the same counts. So a report covers
// the period (the gaps, smoothed), unless its gap is half as long again:
// then the instance's timer ran late or a report was lost, and the counts
// do cover the gap.
func (b *sub) observe(count uint64, now time.Time, interval time.Duration) bool {
	gap := now.Sub(b.lastReport)
	b.lastReport = now
	if count > 0 {
		b.lastUse = now
	}
	cover := gap
	switch {
	case b.period == 0 && gap < interval/8:
		// The periodic report right after the subscribing one: too short
		// to tell a rate (its request or two go uncounted).
		return false
	case b.period == 0:
		b.period = gap // the first period is often partial: it adapts below
	case gap > b.period*3/2:
		b.period += (min(gap, 2*b.period) - b.period) / 5
	case gap < b.period/2:
		b.period += (b.period/2 - b.period) / 5 // a shorter timer, or one report late
		cover = b.period
	default:
		b.period += (gap - b.period) / 5
		cover = b.period
	}
	return b.estimate(float64(count) / cover.Seconds())
}

// estimate folds a measured rate r into the demand: a change of more than
// a quarter is a move, taken as it is, so shares follow within a report; a
// smaller one is drift or noise, smoothed, except just after a move: the
// report that straddled it counted part old, part new demand, and the next
// one, all new, is taken as it is too. It reports whether it took r as it
// is (the usage store should have it at once).
func (b *sub) estimate(r float64) bool {
	after := b.moved
	b.moved = b.rate < 0 || math.Abs(r-b.rate) > 0.25*max(r, b.rate)
	if b.moved || after {
		b.rate = r
		return true
	}
	b.rate += 0.3 * (r - b.rate)
	return false
}

// queue sets a bucket's next action to an assignment of strategy, unless
// it is the one in force and not due for renewal (its time to live half
// gone). A bucket subscribed in the last two intervals gets it anyway: its
// first report may have crossed an abandon on the way, and the instance,
// having forgotten the bucket, ignored the answer. Under ShadowMode the
// assignment is allow-all whatever strategy says. s.mu is held.
func (s *Server) queue(b *sub, strategy *typev3.RateLimitStrategy, now time.Time) {
	shadowed := false
	if s.opts.ShadowMode && strategyName(strategy) != "allow_all" {
		strategy, shadowed = blanketFor("shadow"), true
	}
	if b.sent != nil && sameStrategy(b.sent, strategy) && now.Sub(b.sentAt) < s.ttl/2 && now.Sub(b.created) > 2*s.opts.Interval {
		return
	}
	if shadowed {
		s.metrics.shadowed.Inc()
	}
	b.sent, b.sentAt = strategy, now
	s.push(b, assignment(b.id, strategy, s.ttl))
	s.metrics.actions.WithLabelValues(strategyName(strategy)).Inc()
}

// push queues a for b's stream and wakes its handler. s.mu is held.
func (s *Server) push(b *sub, a *action) {
	b.st.pending[b.key] = a
	select {
	case b.st.wake <- struct{}{}:
	default:
	}
}

// takePending returns the stream's queued actions as one response (nil
// when none), in bucket-key order.
func (s *Server) takePending(st *stream) *response {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(st.pending) == 0 {
		return nil
	}
	keys := make([]string, 0, len(st.pending))
	for k := range st.pending {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	resp := &response{BucketAction: make([]*action, len(keys))}
	for i, k := range keys {
		resp.BucketAction[i] = st.pending[k]
	}
	clear(st.pending)
	return resp
}
