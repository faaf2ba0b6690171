package redisstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttle-rl/throttle/algorithms"
)

// TestHoldExpiresOnAnotherReplica: a hold that one store made and never
// settled is given back within its TTL and a sweep interval by another
// store's sweeper (the first is closed: its sweeper stopped, as when its
// replica is killed), on many identifiers (on a Cluster, every master), on
// a single Redis and a Cluster; its index and held count are empty after.
func TestHoldExpiresOnAnotherReplica(t *testing.T) {
	for _, tc := range []struct {
		name   string
		client func(t *testing.T) redis.UniversalClient
	}{{"single", singleRedis}, {"cluster", newClusterClient}} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := tc.client(t)
			// A key prefix of its own: the index and its held count are
			// this test's alone (other packages' tests hold in the shared
			// Redis too).
			scope := uniqueScope(t)
			maker := New(rdb, Options{HoldSweepEvery: -1, KeyPrefix: scope + ":"})
			sweeper := New(rdb, Options{HoldSweepEvery: 100 * time.Millisecond, KeyPrefix: scope + ":"})
			t.Cleanup(sweeper.Close)
			ctx := context.Background()
			l := algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 10, Window: time.Hour}
			roomIn(time.Hour, 10*time.Second)
			var reqs []algorithms.Request
			for i := range 30 {
				r := algorithms.Request{Key: algorithms.Key{Scope: scope, Identifier: "id-" + string(rune('a'+i))}, Limit: l, Hits: 7,
					Hold: &algorithms.Hold{ID: "h", TTL: 500 * time.Millisecond}}
				ds, err := maker.Check(ctx, []algorithms.Request{r})
				if err != nil || !ds[0].Counted {
					t.Fatalf("hold %d: %+v, %v", i, ds, err)
				}
				reqs = append(reqs, r)
			}
			maker.Close()
			peekAll := func() (left int64) {
				for _, r := range reqs {
					r.Hits, r.Hold = 0, nil
					ds, err := sweeper.Check(ctx, []algorithms.Request{r})
					if err != nil {
						t.Fatal(err)
					}
					left += ds[0].Remaining
				}
				return left
			}
			if got := peekAll(); got != 30*3 {
				t.Fatalf("held: %d left over 30 identifiers, want %d", got, 30*3)
			}
			time.Sleep(500*time.Millisecond + 300*time.Millisecond)
			if got := peekAll(); got != 30*10 {
				t.Errorf("a sweep interval after the expiry: %d left, want %d (every hold given back)", got, 30*10)
			}
			_, held, err := sweeper.SweepHolds(ctx)
			if err != nil || held != 0 {
				t.Errorf("after the sweep: %d hits held, err %v; want 0", held, err)
			}
			st := algorithms.Settle{Request: reqs[0], ID: "h"}
			st.Request.Hold = nil
			rs, err := sweeper.Settle(ctx, []algorithms.Settle{st})
			if err != nil || rs[0].Outcome != algorithms.Expired {
				t.Errorf("settle after the sweep: %+v, %v; want expired", rs, err)
			}
		})
	}
}

// TestHoldOnApproximateLimit: a hold on an approximate limit is decided
// exactly, on the very counter the leases count in (the approximate path's
// key of the window), and is refused when counted + leased + held + hits
// pass the limit.
func TestHoldOnApproximateLimit(t *testing.T) {
	rdb := newRedisClient(t, 0)
	s := New(rdb, Options{ApproximateInterval: 10 * time.Millisecond})
	t.Cleanup(s.Close)
	ctx := context.Background()
	roomIn(time.Hour, 10*time.Second)
	l := algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 10, Window: time.Hour, Accuracy: algorithms.Approximate}
	r := algorithms.Request{Key: algorithms.Key{Scope: uniqueScope(t), Identifier: "u"}, Limit: l, Hits: 6,
		Hold: &algorithms.Hold{ID: "r1", TTL: time.Minute}}
	ds, err := s.Check(ctx, []algorithms.Request{r})
	if err != nil || !ds[0].Counted || ds[0].Remaining != 4 {
		t.Fatalf("hold of 6 of 10: %+v, %v", ds, err)
	}
	rec, err := rdb.Get(ctx, s.holdKey(&r, "r1")).Result()
	if err != nil {
		t.Fatal(err)
	}
	counted := rec[strings.LastIndexByte(rec, '|')+1:]
	if want := s.windowKey(&r, ds[0].Now.UnixMicro()); counted != want {
		t.Errorf("the hold counted in %q, the approximate path counts in %q", counted, want)
	}
	if n, err := rdb.Get(ctx, counted).Int64(); err != nil || n != 6 {
		t.Errorf("the counter holds %d (%v), want 6", n, err)
	}
	r2 := r
	r2.Hits, r2.Hold = 5, &algorithms.Hold{ID: "r2", TTL: time.Minute}
	if ds, err := s.Check(ctx, []algorithms.Request{r2}); err != nil || ds[0].Allowed {
		t.Errorf("a hold of 5 with 6 held of 10: %+v, %v; want refused", ds, err)
	}
}
