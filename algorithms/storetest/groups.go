package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
)

// The conformance of all-or-nothing groups, always-counting limits and
// Clear, on every store.

// WideLimits are one limit of 100 a minute per algorithm: the wide limit of
// the all-or-nothing groups.
var WideLimits = []algorithms.Limit{
	{Algorithm: algorithms.FixedWindow, Limit: 100, Window: time.Minute},
	{Algorithm: algorithms.SlidingWindow, Limit: 100, Window: time.Minute},
	{Algorithm: algorithms.TokenBucket, Limit: 100, Window: time.Minute},
	{Algorithm: algorithms.GCRA, Limit: 100, Window: time.Minute},
}

// AllOrNothing: an ip limit of 100 and a user limit of 1, four
// requests carrying both. Tied, the three the user limit rejects leave the
// ip limit untouched (99 remaining); untied (the reference's counting) they
// spend it (96).
func AllOrNothing(t *testing.T, factories []Factory) {
	for _, f := range factories {
		for _, wide := range WideLimits {
			for _, tied := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s/%s/tied=%v", f.Name, wide.Algorithm, tied), func(t *testing.T) {
					clock := NewClock(T0)
					s := f.New(t, clock.Now)
					scope := UniqueScope(t)
					ctx := context.Background()
					user := algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 1, Window: time.Minute}
					for i := range 4 {
						// The narrow limit first and last: a group is void
						// whichever of its requests is over.
						reqs := []algorithms.Request{
							{Key: algorithms.Key{Scope: scope, Identifier: "user-1", Name: "u"}, Limit: user, Hits: 1, AllOrNothing: tied},
							{Key: algorithms.Key{Scope: scope, Identifier: "10.0.0.1", Name: "ip"}, Limit: wide, Hits: 1, AllOrNothing: tied},
						}
						if i%2 == 1 {
							reqs[0], reqs[1] = reqs[1], reqs[0]
						}
						ds, err := s.Check(ctx, reqs)
						if err != nil {
							t.Fatal(err)
						}
						u, ip := ds[0], ds[1]
						if i%2 == 1 {
							u, ip = ds[1], ds[0]
						}
						wantIP := int64(99)
						if !tied {
							wantIP = 99 - int64(i)
						}
						if i == 0 {
							if !u.Allowed || !u.Counted || !ip.Allowed || !ip.Counted || ip.Remaining != 99 {
								t.Fatalf("request 0: user %+v, ip %+v; want both admitted and counted, ip 99 left", u, ip)
							}
							continue
						}
						if u.Allowed || u.Counted {
							t.Errorf("request %d: user %+v, want over its limit", i, u)
						}
						if !ip.Allowed || ip.Counted != !tied || ip.Remaining != wantIP {
							t.Errorf("request %d: ip %+v; want within its limit, counted %v, %d left", i, ip, !tied, wantIP)
						}
					}
					// The state agrees: a peek of the ip limit.
					ds, err := s.Check(ctx, []algorithms.Request{{Key: algorithms.Key{Scope: scope, Identifier: "10.0.0.1", Name: "ip"}, Limit: wide}})
					if err != nil {
						t.Fatal(err)
					}
					want := int64(99)
					if !tied {
						want = 96
					}
					if ds[0].Remaining != want {
						t.Errorf("ip limit after 4 requests: %d left, want %d", ds[0].Remaining, want)
					}
				})
			}
		}
	}
}

// AlwaysCount: a budget of 300 per minute charged after the
// response: a peek (hits 0) at request time is within, a report of 500
// counts though it is over, and the next request is refused until the
// budget is paid back.
func AlwaysCount(t *testing.T, factories []Factory) {
	for _, f := range factories {
		for _, l := range WideLimits {
			l.Limit = 300
			t.Run(f.Name+"/"+string(l.Algorithm), func(t *testing.T) {
				clock := NewClock(T0)
				s := f.New(t, clock.Now)
				key := algorithms.Key{Scope: UniqueScope(t), Identifier: "tenant", Name: "tokens"}
				ctx := context.Background()
				check := func(hits int64, always bool) algorithms.Decision {
					t.Helper()
					ds, err := s.Check(ctx, []algorithms.Request{{Key: key, Limit: l, Hits: hits, AlwaysCount: always}})
					if err != nil {
						t.Fatal(err)
					}
					return ds[0]
				}
				if d := check(0, true); !d.Allowed || d.Counted || d.Remaining != 300 {
					t.Fatalf("request-time peek: %+v, want within, nothing counted, 300 left", d)
				}
				if d := check(500, true); d.Allowed || !d.Counted || d.Remaining != 0 {
					t.Fatalf("report of 500 with 300 left: %+v, want over the limit but counted, 0 left", d)
				}
				if d := check(1, false); d.Allowed || d.Counted {
					t.Errorf("the next request: %+v, want refused", d)
				}
				if d := check(0, true); d.Allowed {
					t.Errorf("a peek after the charge: %+v, want over", d)
				}
				// Without AlwaysCount the report is refused and charges
				// nothing.
				key.Identifier = "other"
				if d := check(500, false); d.Allowed || d.Counted {
					t.Errorf("a report of 500 not always counted: %+v, want refused", d)
				}
				if d := check(300, false); !d.Allowed || !d.Counted {
					t.Errorf("then 300: %+v, want admitted", d)
				}
				// The debt is paid back: by the next window, or by the
				// refill (200 over: 40 s at 5 per second, and a GCRA's TAT
				// as far).
				key.Identifier = "tenant"
				clock.Advance(2 * time.Minute)
				if d := check(1, false); !d.Allowed {
					t.Errorf("two minutes later: %+v, want admitted", d)
				}
			})
		}
	}
}

// Clear checks that Clear forgets exactly the state of the requests given,
// indexed or not, and counts what existed.
func Clear(t *testing.T, factories []Factory) {
	for _, f := range factories {
		t.Run(f.Name, func(t *testing.T) {
			clock := NewClock(T0)
			s := f.New(t, clock.Now)
			scope := UniqueScope(t)
			ctx := context.Background()
			var reqs []algorithms.Request
			for _, l := range WideLimits {
				l.Limit = 2
				reqs = append(reqs,
					algorithms.Request{Key: algorithms.Key{Scope: scope, Identifier: "a"}, Limit: l, Hits: 2},
					algorithms.Request{Key: algorithms.Key{Scope: scope, Identifier: "b", Name: "named"}, Limit: l, Hits: 2, Unindexed: true})
			}
			if _, err := s.Check(ctx, reqs); err != nil {
				t.Fatal(err)
			}
			other := algorithms.Request{Key: algorithms.Key{Scope: scope, Identifier: "c"}, Limit: WideLimits[0], Hits: 1}
			if _, err := s.Check(ctx, []algorithms.Request{other}); err != nil {
				t.Fatal(err)
			}
			n, err := s.Clear(ctx, reqs)
			if err != nil || n != len(reqs) {
				t.Fatalf("Clear = %d, %v; want %d", n, err, len(reqs))
			}
			ds, err := s.Check(ctx, reqs)
			if err != nil {
				t.Fatal(err)
			}
			for i, d := range ds {
				if !d.Allowed {
					t.Errorf("request %d after Clear: %+v, want admitted (fresh state)", i, d)
				}
			}
			if n, err := s.Clear(ctx, []algorithms.Request{{Key: algorithms.Key{Scope: scope, Identifier: "nobody"}, Limit: WideLimits[1]}}); err != nil || n != 0 {
				t.Errorf("Clear of no state = %d, %v; want 0", n, err)
			}
			ds, err = s.Check(ctx, []algorithms.Request{{Key: other.Key, Limit: other.Limit}})
			if err != nil || ds[0].Remaining != 99 {
				t.Errorf("another identifier after Clear: %+v %v, want untouched (99 left)", ds, err)
			}
		})
	}
}
