package quotasvc_test

import (
	"context"
	"maps"
	"math"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// dataPlane is one Envoy's rate_limit_quota filter, as its documentation
// and its source (global_client_impl.cc) behave:
//
//   - a request matched into a bucket never seen creates the bucket, is
//     decided by no_assignment_behavior (default: allow all; Envoy takes a
//     blanket rule there), and is reported at once in a report of that
//     bucket alone; that first bucket opens the stream and starts the
//     report timer;
//   - every reporting interval, one report of every bucket: requests allowed
//     and denied since the last report (then reset), time_elapsed in whole
//     seconds, the domain in every message; with no stream, a new one is
//     opened (to the next replica: a load balancer) and, if that fails, the
//     report is dropped;
//   - an assignment becomes the bucket's active one: a token bucket is
//     replaced only when its settings change, the new one starting with the
//     old one's fill ratio (full when there was none); a blanket rule
//     applies as is; requests_per_time_unit is ignored (Envoy: "not yet
//     supported"); assignment_time_to_live counts whole seconds;
//   - an expired assignment falls back to expired_assignment_behavior for
//     its timeout (fallback strategy or the last assignment), else to
//     no_assignment_behavior; an abandon action erases the bucket;
//   - a stream closed by the server is reopened at the next report.
//
// Its clock is its driver's: request and advance take the time, and the
// report timer runs on it, so a test process the machine starves still
// counts every request in the report of its time.
type dataPlane struct {
	t        testing.TB
	domain   string
	interval time.Duration
	addrs    []string
	// noAssignment is no_assignment_behavior's blanket rule; nil allows
	// all.
	noAssignment *typev3.RateLimitStrategy
	// expiredFallback, when set, is expired_assignment_behavior's
	// fallback_rate_limit, for expiredTimeout; reuseLast reuses the last
	// assignment instead.
	expiredFallback *typev3.RateLimitStrategy
	reuseLast       bool
	expiredTimeout  time.Duration

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	outbox chan *rlqsv3.RateLimitQuotaUsageReports // reports to send, in order

	mu         sync.Mutex
	conns      map[string]*grpc.ClientConn
	next       int
	stream     rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient
	nextReport time.Time // the report timer; zero until the first bucket
	clock      time.Time // the latest time request or advance was given
	buckets    map[string]*dpBucket
	// What the tests look at.
	opened      []time.Time // when each stream opened
	streamAddrs []string
	assigned    []time.Time // when each response with an assignment came
	closedAt    []time.Time
}

type dpBucket struct {
	id              map[string]string
	allowed, denied uint64
	last            time.Time // last report
	active          *typev3.RateLimitStrategy
	expires         time.Time // zero: no expiry
	fallback        *typev3.RateLimitStrategy
	fallbackUntil   time.Time
	tb              *localBucket
	history         []assigned // every assignment received
}

// assigned is an assignment as received: when, and its rate (requests per
// second; +Inf allows all).
type assigned struct {
	at   time.Time
	rate float64
}

func newDataPlane(t testing.TB, domain string, interval time.Duration, addrs ...string) *dataPlane {
	ctx, cancel := context.WithCancel(context.Background())
	d := &dataPlane{
		t: t, domain: domain, interval: interval, addrs: addrs, ctx: ctx, cancel: cancel,
		outbox: make(chan *rlqsv3.RateLimitQuotaUsageReports, 64),
		conns:  map[string]*grpc.ClientConn{}, buckets: map[string]*dpBucket{},
	}
	d.wg.Add(1)
	go d.sender()
	t.Cleanup(d.close)
	return d
}

// close stops reporting and closes the streams; it may be called again.
func (d *dataPlane) close() {
	d.cancel()
	d.wg.Wait()
	d.mu.Lock()
	defer d.mu.Unlock()
	for addr, c := range d.conns {
		c.Close()
		delete(d.conns, addr)
	}
}

func bucketKeyOf(id map[string]string) string {
	keys := make([]string, 0, len(id))
	for k := range id {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k + "\x00" + id[k] + "\x00")
	}
	return b.String()
}

// request decides one request matched into bucket id, arriving at now, as
// the filter does. (The simulation passes each request's scheduled time: a
// driver that runs late must not see the tokens of its own delay.)
func (d *dataPlane) request(id map[string]string, now time.Time) bool {
	d.mu.Lock()
	if now.After(d.clock) {
		d.clock = now
	}
	key := bucketKeyOf(id)
	b := d.buckets[key]
	if b == nil {
		b = &dpBucket{id: maps.Clone(id), last: now}
		d.buckets[key] = b
		ok := decide(d.noAssignment, nil, now)
		d.count(b, ok)
		if d.nextReport.IsZero() {
			d.nextReport = now.Add(d.interval)
		}
		first := d.reportOf(now, b)
		d.mu.Unlock()
		// Sent from elsewhere (the filter posts it to Envoy's main thread):
		// the request does not wait for the stream.
		d.post(first)
		return ok
	}
	ok := d.decideBucket(b, now)
	d.count(b, ok)
	d.mu.Unlock()
	return ok
}

func (d *dataPlane) count(b *dpBucket, ok bool) {
	if ok {
		b.allowed++
	} else {
		b.denied++
	}
}

// decideBucket applies the bucket's active assignment, its expired
// behaviour, or no_assignment_behavior. d.mu is held.
func (d *dataPlane) decideBucket(b *dpBucket, now time.Time) bool {
	if b.active != nil && !b.expires.IsZero() && !now.Before(b.expires) {
		switch {
		case d.reuseLast:
			b.fallback, b.fallbackUntil = b.active, now.Add(d.expiredTimeout)
		case d.expiredFallback != nil:
			b.fallback, b.fallbackUntil = d.expiredFallback, now.Add(d.expiredTimeout)
			b.tb = replaceBucket(b.tb, d.expiredFallback, now)
		}
		b.active, b.expires = nil, time.Time{}
	}
	switch {
	case b.active != nil:
		return decide(b.active, b.tb, now)
	case b.fallback != nil && now.Before(b.fallbackUntil):
		return decide(b.fallback, b.tb, now)
	}
	b.fallback = nil
	return decide(d.noAssignment, nil, now)
}

// decide applies one strategy; nil allows all.
func decide(s *typev3.RateLimitStrategy, tb *localBucket, now time.Time) bool {
	switch {
	case s == nil:
		return true
	case s.GetTokenBucket() != nil:
		return tb != nil && tb.take(now)
	case s.GetRequestsPerTimeUnit() != nil:
		return true
	default:
		return s.GetBlanketRule() != typev3.RateLimitStrategy_DENY_ALL
	}
}

// reportOf builds a report of the buckets bs (all when none), resetting
// their counts, as the filter's buildReports. d.mu is held.
func (d *dataPlane) reportOf(now time.Time, bs ...*dpBucket) *rlqsv3.RateLimitQuotaUsageReports {
	if len(bs) == 0 {
		for _, b := range d.buckets {
			bs = append(bs, b)
		}
	}
	r := &rlqsv3.RateLimitQuotaUsageReports{Domain: d.domain}
	for _, b := range bs {
		r.BucketQuotaUsages = append(r.BucketQuotaUsages, &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId:           &rlqsv3.BucketId{Bucket: maps.Clone(b.id)},
			TimeElapsed:        &durationpb.Duration{Seconds: int64(now.Sub(b.last) / time.Second)},
			NumRequestsAllowed: b.allowed,
			NumRequestsDenied:  b.denied,
		})
		b.allowed, b.denied, b.last = 0, 0, now
	}
	return r
}

// advance runs the report timer up to now: every interval, one report of
// every bucket.
func (d *dataPlane) advance(now time.Time) {
	var due []*rlqsv3.RateLimitQuotaUsageReports
	d.mu.Lock()
	if now.After(d.clock) {
		d.clock = now
	}
	for !d.nextReport.IsZero() && !now.Before(d.nextReport) {
		due = append(due, d.reportOf(d.nextReport))
		d.nextReport = d.nextReport.Add(d.interval)
	}
	d.mu.Unlock()
	for _, r := range due {
		d.post(r)
	}
}

// post queues r for the sender; d.mu must not be held (the sender takes it).
func (d *dataPlane) post(r *rlqsv3.RateLimitQuotaUsageReports) {
	select {
	case d.outbox <- r:
	case <-d.ctx.Done():
	}
}

// sender sends the queued reports, in order, until the data plane closes.
func (d *dataPlane) sender() {
	defer d.wg.Done()
	for {
		select {
		case <-d.ctx.Done():
			return
		case r := <-d.outbox:
			d.send(r)
		}
	}
}

// send sends r, opening a stream first when there is none; a report that
// cannot be sent is dropped, as the filter drops it.
func (d *dataPlane) send(r *rlqsv3.RateLimitQuotaUsageReports) {
	d.mu.Lock()
	s := d.stream
	d.mu.Unlock()
	if s == nil {
		if s = d.open(); s == nil {
			return
		}
	}
	if err := s.Send(r); err != nil {
		d.dropStream(s, err)
	}
}

// open starts a stream to the next replica. Only the sender calls it.
func (d *dataPlane) open() rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient {
	if d.ctx.Err() != nil {
		return nil
	}
	d.mu.Lock()
	addr := d.addrs[d.next%len(d.addrs)]
	d.next++
	conn := d.conns[addr]
	if conn == nil {
		var err error
		if conn, err = grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
			d.mu.Unlock()
			d.t.Errorf("grpc.NewClient(%s): %v", addr, err)
			return nil
		}
		d.conns[addr] = conn
	}
	d.mu.Unlock()
	s, err := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(d.ctx)
	if err != nil {
		return nil
	}
	d.mu.Lock()
	d.stream = s
	d.opened = append(d.opened, time.Now())
	d.streamAddrs = append(d.streamAddrs, addr)
	d.mu.Unlock()
	d.wg.Add(1)
	go d.receive(s)
	return s
}

func (d *dataPlane) dropStream(s rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stream == s {
		d.stream = nil
		d.closedAt = append(d.closedAt, time.Now())
	}
}

// receive applies the server's responses until the stream ends.
func (d *dataPlane) receive(s rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient) {
	defer d.wg.Done()
	for {
		resp, err := s.Recv()
		if err != nil {
			d.dropStream(s, err)
			return
		}
		if err := resp.ValidateAll(); err != nil {
			d.t.Errorf("response fails Envoy's validation: %v\n%v", err, resp)
		}
		received := time.Now()
		d.mu.Lock()
		now := d.clock // the data plane's own time, which its buckets run on
		sawAssignment := false
		for _, a := range resp.GetBucketAction() {
			b := d.buckets[bucketKeyOf(a.GetBucketId().GetBucket())]
			if b == nil {
				continue // not ours: the filter logs and skips it
			}
			if a.GetAbandonAction() != nil {
				delete(d.buckets, bucketKeyOf(b.id))
				continue
			}
			qa := a.GetQuotaAssignmentAction()
			st := qa.GetRateLimitStrategy()
			if st.GetRequestsPerTimeUnit() != nil {
				continue
			}
			sawAssignment = true
			if st.GetTokenBucket() != nil && (b.active.GetTokenBucket() == nil || !proto.Equal(b.active.GetTokenBucket(), st.GetTokenBucket())) {
				b.tb = replaceBucket(b.tb, st, now)
			}
			b.history = append(b.history, assigned{at: received, rate: strategyRate(st)})
			b.active, b.expires = st, time.Time{}
			if ttl := qa.GetAssignmentTimeToLive(); ttl != nil {
				b.expires = now.Add(time.Duration(ttl.GetSeconds()) * time.Second)
			}
			b.fallback = nil
		}
		if sawAssignment {
			d.assigned = append(d.assigned, received)
		}
		d.mu.Unlock()
	}
}

// localBucket is Envoy's AtomicTokenBucketImpl: continuous refill at
// tokens per fill / fill seconds (whole seconds), at most max.
type localBucket struct {
	max    float64
	rate   float64
	tokens float64
	at     time.Time
}

// replaceBucket makes the token bucket of strategy s, starting with old's
// fill ratio (full when there is none), as the filter does.
func replaceBucket(old *localBucket, s *typev3.RateLimitStrategy, now time.Time) *localBucket {
	tb := s.GetTokenBucket()
	if tb == nil {
		return old
	}
	secs := tb.GetFillInterval().GetSeconds()
	if secs < 1 {
		secs = 1
	}
	perFill := float64(1)
	if tb.GetTokensPerFill() != nil {
		perFill = float64(tb.GetTokensPerFill().GetValue())
	}
	b := &localBucket{max: float64(tb.GetMaxTokens()), rate: perFill / float64(secs), at: now}
	b.tokens = b.max
	if old != nil && old.max > 0 {
		old.refill(now)
		b.tokens = b.max * old.tokens / old.max
	}
	return b
}

func (b *localBucket) refill(now time.Time) {
	if now.Before(b.at) {
		return
	}
	b.tokens = min(b.max, b.tokens+now.Sub(b.at).Seconds()*b.rate)
	b.at = now
}

func (b *localBucket) take(now time.Time) bool {
	b.refill(now)
	if b.tokens >= 1 {
		b.tokens--
		return true
	}
	return false
}

// strategyRate is what a strategy admits per second.
func strategyRate(s *typev3.RateLimitStrategy) float64 {
	if tb := s.GetTokenBucket(); tb != nil {
		return float64(tb.GetTokensPerFill().GetValue()) / float64(max(tb.GetFillInterval().GetSeconds(), 1))
	}
	if s.GetBlanketRule() == typev3.RateLimitStrategy_DENY_ALL {
		return 0
	}
	return math.Inf(1)
}

// assignments returns the assignments bucket id received.
func (d *dataPlane) assignments(id map[string]string) []assigned {
	d.mu.Lock()
	defer d.mu.Unlock()
	if b := d.buckets[bucketKeyOf(id)]; b != nil {
		return append([]assigned(nil), b.history...)
	}
	return nil
}

// setAddrs changes the replicas the next streams go to (a load balancer
// learning that one is gone).
func (d *dataPlane) setAddrs(addrs ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.addrs, d.next = addrs, 0
}

// state says what decides bucket id's requests at now: "assigned" (an
// active assignment), "expired" (expired_assignment_behavior), "none"
// (no_assignment_behavior), or "" (no such bucket).
func (d *dataPlane) state(id map[string]string, now time.Time) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	b := d.buckets[bucketKeyOf(id)]
	switch {
	case b == nil:
		return ""
	case b.active != nil && (b.expires.IsZero() || now.Before(b.expires)):
		return "assigned"
	case b.active != nil || (b.fallback != nil && now.Before(b.fallbackUntil)):
		return "expired"
	}
	return "none"
}

// reconnects returns, for each stream after the first, how long after the
// previous one closed it opened, and how long after it opened the first
// assignment came (-1: none).
func (d *dataPlane) reconnects() (gaps, firstAssignment []time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for k := 1; k < len(d.opened); k++ {
		if k-1 < len(d.closedAt) {
			gaps = append(gaps, d.opened[k].Sub(d.closedAt[k-1]))
		}
		first := time.Duration(-1)
		for _, at := range d.assigned {
			if !at.Before(d.opened[k]) {
				first = at.Sub(d.opened[k])
				break
			}
		}
		firstAssignment = append(firstAssignment, first)
	}
	return gaps, firstAssignment
}
