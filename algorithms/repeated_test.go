package algorithms

import (
	"context"
	"fmt"
	"testing"
)

func TestConformanceRepeatedInGroup(t *testing.T) {
	conformanceRepeatedInGroup(t, storeFactories())
}

// conformanceRepeatedInGroup: an all-or-nothing group that counts one key
// twice and is then voided by another request puts back the state from
// before the group (a REST batch may name one limit twice).
func conformanceRepeatedInGroup(t *testing.T, factories []storeFactory) {
	for _, f := range factories {
		for _, l := range groupLimits {
			t.Run(fmt.Sprintf("%s/%s", f.name, l.Algorithm), func(t *testing.T) {
				clock := &fakeClock{now: t0}
				s := f.make(t, clock.Now)
				scope := uniqueScope(t)
				ctx := context.Background()
				a := Request{Key: Key{scope, "a", "a"}, Limit: l, Hits: 1, AllOrNothing: true}
				full := Request{Key: Key{scope, "b", "b"}, Limit: Limit{Algorithm: FixedWindow, Limit: 1, Window: l.Window}, Hits: 1}
				if _, err := s.Check(ctx, []Request{full}); err != nil {
					t.Fatal(err)
				}
				full.AllOrNothing = true
				ds, err := s.Check(ctx, []Request{a, a, full})
				if err != nil {
					t.Fatal(err)
				}
				if !ds[0].Allowed || !ds[1].Allowed || ds[2].Allowed || ds[0].Counted || ds[1].Counted {
					t.Fatalf("a, a, over: %+v; want a within twice, not counted, the last over", ds)
				}
				ds, err = s.Check(ctx, []Request{{Key: a.Key, Limit: l}})
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
