package storetest

import (
	"github.com/throttle-rl/throttle/algorithms"

	"context"
	"fmt"
	"testing"
)

// RepeatedInGroup: an all-or-nothing group that counts one key
// twice and is then voided by another request puts back the state from
// before the group (a REST batch may name one limit twice).
func RepeatedInGroup(t *testing.T, factories []Factory) {
	for _, f := range factories {
		for _, l := range WideLimits {
			t.Run(fmt.Sprintf("%s/%s", f.Name, l.Algorithm), func(t *testing.T) {
				clock := NewClock(T0)
				s := f.New(t, clock.Now)
				scope := UniqueScope(t)
				ctx := context.Background()
				a := algorithms.Request{Key: algorithms.Key{Scope: scope, Identifier: "a", Name: "a"}, Limit: l, Hits: 1, AllOrNothing: true}
				full := algorithms.Request{Key: algorithms.Key{Scope: scope, Identifier: "b", Name: "b"}, Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 1, Window: l.Window}, Hits: 1}
				if _, err := s.Check(ctx, []algorithms.Request{full}); err != nil {
					t.Fatal(err)
				}
				full.AllOrNothing = true
				ds, err := s.Check(ctx, []algorithms.Request{a, a, full})
				if err != nil {
					t.Fatal(err)
				}
				if !ds[0].Allowed || !ds[1].Allowed || ds[2].Allowed || ds[0].Counted || ds[1].Counted {
					t.Fatalf("a, a, over: %+v; want a within twice, not counted, the last over", ds)
				}
				ds, err = s.Check(ctx, []algorithms.Request{{Key: a.Key, Limit: l}})
				if err != nil {
					t.Fatal(err)
				}
				if ds[0].Remaining != l.Limit {
					t.Errorf("a after the void group: %d left, want %d (nothing counted)", ds[0].Remaining, l.Limit)
				}
			})
		}
	}
}
