package redisstore

import (
	"context"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/algorithms/storetest"
)

// TestPlainFixedWindowOnRedisClock decides unindexed fixed windows without
// the script and on Redis's clock (no RedisOptions.Now): the counter holds
// exactly the admitted hits (the hits over the limit were refunded, those
// of AlwaysCount were not), it expires with its window, and decisions are
// dated by Redis's clock.
func TestPlainFixedWindowOnRedisClock(t *testing.T) {
	ctx := context.Background()
	rdb := newRedisClient(t, 0)
	s := New(rdb, Options{})
	scope := uniqueScope(t)
	l := algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 3, Window: time.Minute}
	req := algorithms.Request{Key: algorithms.Key{Scope: scope, Identifier: "u"}, Limit: l, Hits: 1, Unindexed: true, Counting: algorithms.CountThenRefund}
	var allowed []bool
	var last algorithms.Decision
	for _, hits := range []int64{1, 1, 2, 1, 5} {
		req.Hits = hits
		ds, err := s.Check(ctx, []algorithms.Request{req})
		if err != nil {
			t.Fatal(err)
		}
		allowed = append(allowed, ds[0].Allowed)
		last = ds[0]
	}
	if want := []bool{true, true, false, true, false}; !slices.Equal(allowed, want) {
		t.Fatalf("allowed = %v, want %v", allowed, want)
	}
	redisNow, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	if d := redisNow.Sub(last.Now); d < 0 || d > time.Second {
		t.Errorf("decided at %v, Redis's clock says %v", last.Now, redisNow)
	}
	key := s.windowKey(&req, last.Now.UnixMicro())
	if n, err := rdb.Get(ctx, key).Int64(); err != nil || n != 3 {
		t.Fatalf("counter %s = %d (%v), want 3: the hits over the limit must be refunded", key, n, err)
	}
	// The counter expires at its window's end on Redis's clock, plus the
	// margin less the error of the store's estimate of that clock (the
	// sample it dated the first decision by may have been its widest).
	checkExpiresAfterWindows(t, rdb, key, l.Window, 1)

	req.Hits, req.AlwaysCount = 2, true
	ds, err := s.Check(ctx, []algorithms.Request{req})
	if err != nil {
		t.Fatal(err)
	}
	if ds[0].Allowed || !ds[0].Counted {
		t.Fatalf("always_count over the limit: allowed %v counted %v, want false true", ds[0].Allowed, ds[0].Counted)
	}
	want := int64(5)
	if ds[0].Now.UnixMicro()/l.Window.Microseconds() != last.Now.UnixMicro()/l.Window.Microseconds() {
		want = 2 // a minute boundary fell in between: a new window
	}
	if n, _ := rdb.Get(ctx, s.windowKey(&req, ds[0].Now.UnixMicro())).Int64(); n != want {
		t.Fatalf("counter = %d after an always_count request of 2, want %d", n, want)
	}
}

// TestPlainMixedBatch decides, as the coalescing workers do, one call of
// several callers: those whose requests are all unindexed fixed or sliding
// windows go without the script, the others by it, and every decision comes
// back in its caller's place.
func TestPlainMixedBatch(t *testing.T) {
	ctx := context.Background()
	clock := storetest.NewClock(t0)
	s := New(newRedisClient(t, 0), Options{Now: clock.Now})
	scope := uniqueScope(t)
	fw := func(limit int64) algorithms.Limit {
		return algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: limit, Window: time.Minute}
	}
	tb := algorithms.Limit{Algorithm: algorithms.TokenBucket, Limit: 7, Window: time.Minute}
	sw := algorithms.Limit{Algorithm: algorithms.SlidingWindow, Limit: 9, Window: time.Minute}
	reqs := []algorithms.Request{
		// caller 0: plain, an all-or-nothing group voided by its second
		{Key: algorithms.Key{Scope: scope, Identifier: "a"}, Limit: fw(5), Hits: 2, Unindexed: true, Counting: algorithms.CountThenRefund, AllOrNothing: true},
		{Key: algorithms.Key{Scope: scope, Identifier: "b"}, Limit: fw(1), Hits: 2, Unindexed: true, Counting: algorithms.CountThenRefund, AllOrNothing: true},
		// caller 1: by the script
		{Key: algorithms.Key{Scope: scope, Identifier: "c"}, Limit: tb, Hits: 1, Unindexed: true, Counting: algorithms.CountThenRefund},
		// caller 2: a fixed window with an indexed sliding one: by the script
		{Key: algorithms.Key{Scope: scope, Identifier: "d"}, Limit: fw(4), Hits: 1, Unindexed: true, Counting: algorithms.CountThenRefund},
		{Key: algorithms.Key{Scope: scope, Identifier: "e"}, Limit: sw, Hits: 1},
		// caller 3: plain, a fixed and a sliding window
		{Key: algorithms.Key{Scope: scope, Identifier: "f"}, Limit: fw(6), Hits: 1, Unindexed: true, Counting: algorithms.CountThenRefund},
		{Key: algorithms.Key{Scope: scope, Identifier: "g"}, Limit: sw, Hits: 1, Unindexed: true, Counting: algorithms.CountThenRefund},
	}
	sizes := []int{2, 1, 2, 2}
	if plain, scripted := splitPlain(reqs, sizes); !slices.Equal(plain, []int{0, 1, 5, 6}) || !slices.Equal(scripted, []int{2, 3, 4}) {
		t.Fatalf("plain %v, scripted %v: want [0 1 5 6] and [2 3 4]", plain, scripted)
	}
	ds, err := s.decide(ctx, singleMaster(s), reqs, sizes)
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		allowed, counted bool
		limit, remaining int64
	}
	want := []got{{true, false, 5, 5}, {false, false, 1, 1}, {true, true, 7, 6}, {true, true, 4, 3}, {true, true, 9, 8}, {true, true, 6, 5}, {true, true, 9, 8}}
	for i, d := range ds {
		if g := (got{d.Allowed, d.Counted, d.Limit, d.Remaining}); g != want[i] {
			t.Errorf("request %d: %+v, want %+v", i, g, want[i])
		}
	}
	// The voided group counted nothing.
	ds, err = s.Check(ctx, []algorithms.Request{{Key: algorithms.Key{Scope: scope, Identifier: "a"}, Limit: fw(5), Unindexed: true, Counting: algorithms.CountThenRefund}})
	if err != nil {
		t.Fatal(err)
	}
	if ds[0].Remaining != 5 {
		t.Fatalf("a's remaining after its voided group: %d, want 5", ds[0].Remaining)
	}
}

// TestRedisClockKeepsTheNarrowestSample checks the offset comes from the
// sample of the shortest round trip, until it is a second old.
func TestRedisClockKeepsTheNarrowestSample(t *testing.T) {
	var c redisClock
	if _, ok := c.now(); ok {
		t.Fatal("a clock without samples says it knows the time")
	}
	base := time.Now()
	c.sample(base, base.Add(2*time.Millisecond), base.Add(time.Hour+time.Millisecond))
	if c.offset() != time.Hour.Microseconds() {
		t.Fatalf("offset %d µs, want 1 h", c.offset())
	}
	// A wider sample is ignored, a narrower one taken.
	c.sample(base.Add(10*time.Millisecond), base.Add(20*time.Millisecond), base.Add(2*time.Hour))
	if c.offset() != time.Hour.Microseconds() {
		t.Fatalf("a wider sample replaced the offset: %d µs", c.offset())
	}
	c.sample(base.Add(30*time.Millisecond), base.Add(31*time.Millisecond), base.Add(30*time.Millisecond+500*time.Microsecond-time.Minute))
	if c.offset() != -time.Minute.Microseconds() {
		t.Fatalf("offset %d µs, want -1 min from the narrower sample", c.offset())
	}
	// A second later any sample replaces it.
	c.sample(base.Add(2*time.Second), base.Add(2*time.Second+50*time.Millisecond), base.Add(2*time.Second+25*time.Millisecond))
	if c.offset() != 0 {
		t.Fatalf("offset %d µs, want 0 from the fresh sample", c.offset())
	}
	if now, ok := c.now(); !ok || absDuration(time.Duration(now-time.Now().UnixMicro())*time.Microsecond) > time.Second {
		t.Fatalf("now = %d, %v", now, ok)
	}
}

func absDuration(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// TestPlainKnownCounters checks the counters a store knows: a counter
// another replica made is counted on (SET NX finds it, INCRBY counts), and
// one deleted under a store that knew it is made again with its TTL.
func TestPlainKnownCounters(t *testing.T) {
	ctx := context.Background()
	rdb := newRedisClient(t, 0)
	clock := storetest.NewClock(t0)
	a := New(rdb, Options{Now: clock.Now})
	b := New(rdb, Options{Now: clock.Now})
	req := algorithms.Request{Key: algorithms.Key{Scope: uniqueScope(t), Identifier: "u"}, Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 10, Window: time.Hour}, Hits: 2, Unindexed: true, Counting: algorithms.CountThenRefund}
	key := a.windowKey(&req, t0.UnixMicro())
	remaining := func(s *Store) int64 {
		t.Helper()
		ds, err := s.Check(ctx, []algorithms.Request{req})
		if err != nil {
			t.Fatal(err)
		}
		return ds[0].Remaining
	}
	ttl := func() time.Duration {
		t.Helper()
		d, err := rdb.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	// a makes it, b finds it, a knows it.
	if got := []int64{remaining(a), remaining(b), remaining(a), remaining(b)}; !slices.Equal(got, []int64{8, 6, 4, 2}) {
		t.Fatalf("remaining %v, want [8 6 4 2]", got)
	}
	if d := ttl(); d <= 0 || d > time.Hour+expiryMargin {
		t.Fatalf("TTL %v", d)
	}
	// Deleted under both: made again, with its TTL.
	if err := rdb.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	if got := remaining(a); got != 8 {
		t.Fatalf("remaining after the counter was deleted: %d, want 8", got)
	}
	if d := ttl(); d <= 0 || d > time.Hour+expiryMargin {
		t.Fatalf("the counter made again has TTL %v, want (0, 1h+margin]", d)
	}
}

// TestPlainSlidingWindowOnRedisClock decides unindexed sliding windows
// without the script and on Redis's clock: the previous window's count
// weighs on the current one, hits over the limit are refunded, and the
// counter lives until the next window ends (its previous one then).
func TestPlainSlidingWindowOnRedisClock(t *testing.T) {
	ctx := context.Background()
	rdb := newRedisClient(t, 0)
	s := New(rdb, Options{})
	l := algorithms.Limit{Algorithm: algorithms.SlidingWindow, Limit: 10, Window: time.Hour}
	req := algorithms.Request{Key: algorithms.Key{Scope: uniqueScope(t), Identifier: "u"}, Limit: l, Hits: 1, Unindexed: true, Counting: algorithms.CountThenRefund}
	if plain, _ := splitPlain([]algorithms.Request{req}, nil); len(plain) != 1 {
		t.Fatal("an unindexed sliding window goes by the script")
	}
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	// The previous hour held 8: at a fraction e of this one, 8·(1−e) of
	// it still weighs.
	if err := rdb.Set(ctx, s.windowKey(&req, now.UnixMicro()-l.Window.Microseconds()), 8, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	ds, err := s.Check(ctx, []algorithms.Request{req})
	if err != nil {
		t.Fatal(err)
	}
	d := ds[0]
	weighted := 8 * (1 - float64(d.Now.UnixMicro()%l.Window.Microseconds())/float64(l.Window.Microseconds()))
	if want := int64(math.Floor(10 - weighted - 1)); !d.Allowed || d.Remaining != want {
		t.Fatalf("1 hit on a previous hour of 8 (%.3f weighs): allowed %v remaining %d, want true %d", weighted, d.Allowed, d.Remaining, want)
	}
	// 9 more would fit the current hour alone (1 + 9 = 10), not with the
	// previous one's weight: refused, and refunded.
	req.Hits = 9
	if ds, err = s.Check(ctx, []algorithms.Request{req}); err != nil {
		t.Fatal(err)
	}
	if ds[0].Allowed {
		t.Fatal("9 hits admitted on a count of 1 and a weighted previous hour: the previous window was not read")
	}
	key := s.windowKey(&req, d.Now.UnixMicro())
	if n, err := rdb.Get(ctx, key).Int64(); err != nil || n != 1 {
		t.Fatalf("counter %s = %d (%v), want 1: the refused hits must be refunded", key, n, err)
	}
	// It expires when the next window ends on Redis's clock, plus at most
	// the margin.
	checkExpiresAfterWindows(t, rdb, key, l.Window, 2)
}

// checkExpiresAfterWindows checks that key expires when the window of
// length w that holds Redis's time ends, n-1 windows later (the end of
// the next one for n = 2), plus at most the margin of plain counters (and
// 50 ms for the error of the store's estimate of Redis's clock).
func checkExpiresAfterWindows(t *testing.T, rdb *redis.Client, key string, w time.Duration, n int) {
	t.Helper()
	ctx := context.Background()
	var pttl *redis.DurationCmd
	var clock *redis.TimeCmd
	if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		clock, pttl = p.Time(ctx), p.PTTL(ctx, key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	expires := clock.Val().Add(pttl.Val())
	end := clock.Val().Truncate(w).Add(time.Duration(n) * w)
	// The store dates the key by its estimate of Redis's clock, whose error
	// is up to a round trip of the sample it took: tens of milliseconds on a
	// machine running the whole suite on two cores (166 ms was seen), so
	// the bound allows half a second past the margin, and none before.
	if slack := expiryMargin + 500*time.Millisecond; expires.Before(end) || expires.After(end.Add(slack)) {
		t.Errorf("counter %s expires %v after the end of window %d from now on Redis's clock, want [0, %v]", key, expires.Sub(end), n, slack)
	}
}
