package storetest

import (
	"github.com/throttle-rl/throttle/algorithms"

	"context"
	"fmt"
	"testing"
)

// Refund: negative hits give back what an identifier used —
// never below zero used, always allowed, counting nothing — in every
// algorithm and store; a refund of no state writes none, and a refund in a
// void all-or-nothing group is taken back with it.
func Refund(t *testing.T, factories []Factory) {
	for _, f := range factories {
		for _, l := range WideLimits {
			l.Limit = 10
			t.Run(fmt.Sprintf("%s/%s", f.Name, l.Algorithm), func(t *testing.T) {
				clock := NewClock(T0)
				s := f.New(t, clock.Now)
				scope := UniqueScope(t)
				ctx := context.Background()
				key := algorithms.Key{Scope: scope, Identifier: "user", Name: "api"}
				check := func(hits int64) algorithms.Decision {
					t.Helper()
					ds, err := s.Check(ctx, []algorithms.Request{{Key: key, Limit: l, Hits: hits}})
					if err != nil {
						t.Fatalf("hits %d: %v", hits, err)
					}
					return ds[0]
				}
				if d := check(-3); !d.Allowed || d.Remaining != 10 {
					t.Errorf("refund of nothing used: %+v, want allowed, 10 left", d)
				}
				if d := check(4); !d.Allowed || d.Remaining != 6 {
					t.Fatalf("4 hits: %+v, want 6 left", d)
				}
				if d := check(-3); !d.Allowed || d.Remaining != 9 {
					t.Errorf("refund of 3: %+v, want allowed, 9 left", d)
				}
				if d := check(-5); !d.Allowed || d.Remaining != 10 {
					t.Errorf("refund of 5 with 1 used: %+v, want allowed, 10 left (never below zero used)", d)
				}
				if d := check(0); d.Remaining != 10 {
					t.Errorf("peek after the refunds: %d left, want 10", d.Remaining)
				}
				if d := check(10); !d.Allowed || d.Remaining != 0 {
					t.Fatalf("10 hits after the refunds: %+v, want all 10 admitted", d)
				}
				// A refund in a group voided by another request is taken back.
				over := algorithms.Request{Key: algorithms.Key{Scope: scope, Identifier: "other", Name: "x"}, Limit: l, Hits: 11, AllOrNothing: true}
				ds, err := s.Check(ctx, []algorithms.Request{{Key: key, Limit: l, Hits: -4, AllOrNothing: true}, over})
				if err != nil {
					t.Fatal(err)
				}
				if !ds[0].Allowed || ds[0].Counted || ds[1].Allowed {
					t.Errorf("refund voided by an over request: %+v", ds)
				}
				if d := check(0); d.Remaining != 0 {
					t.Errorf("after the void group: %d left, want 0 (the refund taken back)", d.Remaining)
				}
				// The same refund before the over request, the over one first.
				ds, err = s.Check(ctx, []algorithms.Request{over, {Key: key, Limit: l, Hits: -4, AllOrNothing: true}})
				if err != nil {
					t.Fatal(err)
				}
				if d := check(0); d.Remaining != 0 || ds[1].Counted {
					t.Errorf("after a group voided first: %d left (counted %v), want 0", d.Remaining, ds[1].Counted)
				}
				if d := check(-4); !d.Allowed || d.Remaining != 4 {
					t.Errorf("refund of 4 alone: %+v, want 4 left", d)
				}
			})
		}
	}
}
