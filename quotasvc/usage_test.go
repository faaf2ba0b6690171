package quotasvc

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/throttle-rl/throttle/internal/testkit/redistest"
)

// The two usage stores keep the same contract: one table, both stores.
func TestUsageStores(t *testing.T) {
	const entryTTL, allocTTL = 300 * time.Millisecond, time.Second
	opts, err := redis.ParseURL(redistest.SharedURL(t))
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	stores := map[string]func() usageStore{
		"memory": func() usageStore { return newMemoryUsage(time.Now, entryTTL, allocTTL) },
		"redis":  func() usageStore { return newRedisUsage(rdb, entryTTL, allocTTL) },
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			u := open()
			g := groupKey("", fmt.Sprintf("usage-test-%d", time.Now().UnixNano()), "4:name3:api", "fixed_window:100:1000:0")
			other := g + "x"

			// Written demands, and the loading replica's own, come back
			// while no allocation is there.
			if err := u.write(ctx, []demandWrite{{g, demand{"r1-1", 10}}, {g, demand{"r1-2", -1}}, {other, demand{"r1-3", 5}}}, 0); err != nil {
				t.Fatal(err)
			}
			ls, err := u.load(ctx, 7, []groupLoad{{group: g, local: []demand{{"r2-1", 30.5}}}})
			if err != nil {
				t.Fatal(err)
			}
			want := []demand{{"r1-1", 10}, {"r1-2", -1}, {"r2-1", 30.5}}
			if diff := cmp.Diff(want, sorted(ls[0].demands), cmp.AllowUnexported(demand{})); ls[0].alloc != "" || diff != "" {
				t.Fatalf("load: alloc %q, demands (-want +got):\n%s", ls[0].alloc, diff)
			}

			// The first allocation saved for an epoch wins.
			got, err := u.save(ctx, []groupSave{{group: g, epoch: 7, alloc: "7|1|a:1:1"}})
			if err != nil || got[0] != "7|1|a:1:1" {
				t.Fatalf("save = %q, %v", got, err)
			}
			got, err = u.save(ctx, []groupSave{{group: g, epoch: 7, alloc: "7|1|b:2:2"}})
			if err != nil || got[0] != "7|1|a:1:1" {
				t.Fatalf("second save for the epoch = %q, %v; want the first", got, err)
			}
			ls, err = u.load(ctx, 7, []groupLoad{{group: g}})
			if err != nil || ls[0].alloc != "7|1|a:1:1" {
				t.Fatalf("load for the epoch = %+v, %v", ls, err)
			}
			// A later epoch computes afresh; an earlier one uses the later.
			if ls, err = u.load(ctx, 8, []groupLoad{{group: g}}); err != nil || ls[0].alloc != "" || len(ls[0].demands) != 3 {
				t.Fatalf("load for the next epoch = %+v, %v", ls, err)
			}
			if got, err = u.save(ctx, []groupSave{{group: g, epoch: 8, alloc: "8|1|c:3:3"}}); err != nil || got[0] != "8|1|c:3:3" {
				t.Fatalf("save for epoch 8 = %q, %v", got, err)
			}
			if got, err = u.save(ctx, []groupSave{{group: g, epoch: 7, alloc: "7|1|d:4:4"}}); err != nil || got[0] != "8|1|c:3:3" {
				t.Fatalf("late save for epoch 7 = %q, %v; want epoch 8's", got, err)
			}
			if ls, err = u.load(ctx, 7, []groupLoad{{group: g}}); err != nil || ls[0].alloc != "8|1|c:3:3" {
				t.Fatalf("late load for epoch 7 = %+v, %v", ls, err)
			}

			// Demands expire unless written again; a short life is honoured.
			if err := u.write(ctx, []demandWrite{{g, demand{"r1-1", 11}}}, 100*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			time.Sleep(200 * time.Millisecond)
			ls, err = u.load(ctx, 9, []groupLoad{{group: g, local: []demand{{"r2-1", 31}}}})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]demand{{"r1-2", -1}, {"r2-1", 31}}, sorted(ls[0].demands), cmp.AllowUnexported(demand{})); diff != "" {
				t.Errorf("after r1-1's short life (-want +got):\n%s", diff)
			}
			time.Sleep(entryTTL)
			if ls, err = u.load(ctx, 10, []groupLoad{{group: g}}); err != nil || len(ls[0].demands) != 0 {
				t.Errorf("after every demand's life: %+v, %v", ls, err)
			}
			if ls, err = u.load(ctx, 10, []groupLoad{{group: other}}); err != nil || len(ls[0].demands) != 0 {
				t.Errorf("other group after its demand's life: %+v, %v", ls, err)
			}
		})
	}
}

func sorted(ds []demand) []demand {
	sort.Slice(ds, func(i, j int) bool { return ds[i].instance < ds[j].instance })
	return ds
}

// With Redis gone, every call fails (and the server falls back); none
// hangs past its deadline.
func TestRedisUsageDown(t *testing.T) {
	rs := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	u := newRedisUsage(rdb, time.Second, time.Second)
	g := groupKey("", "down", "c", "s")
	ctx := context.Background()
	if _, err := u.load(ctx, 1, []groupLoad{{group: g, local: []demand{{"a", 1}}}}); err != nil {
		t.Fatal(err)
	}
	rs.Stop()
	dctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := u.load(dctx, 2, []groupLoad{{group: g}}); err == nil {
		t.Error("load succeeded with Redis stopped")
	}
	if err := u.write(dctx, []demandWrite{{g, demand{"a", 1}}}, 0); err == nil {
		t.Error("write succeeded with Redis stopped")
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("failing calls took %v", took)
	}
	// Back, and without its scripts: EVAL loads them again.
	rs.Restart()
	if _, err := u.load(ctx, 3, []groupLoad{{group: g, local: []demand{{"a", 2}}}}); err != nil {
		t.Errorf("load after Redis restarted: %v", err)
	}
}

func TestGroupKey(t *testing.T) {
	got := groupKey("", "a:b{c}", "3:key5:v%a:l", "fixed_window:10:1000:0")
	want := "throttle:q{a%3Ab%7Bc%7D:3%3Akey5%3Av%25a%3Al}:fixed_window%3A10%3A1000%3A0"
	if got != want {
		t.Errorf("groupKey = %q, want %q", got, want)
	}
	// The hash tag is everything between the braces: one per limit.
	tag := got[strings.Index(got, "{")+1 : strings.Index(got, "}")]
	if strings.ContainsAny(tag, "{}") || !strings.HasPrefix(got, "throttle:q{") {
		t.Errorf("hash tag %q", tag)
	}
	if groupKey("", "a", "b:c", "s") == groupKey("", "a:b", "c", "s") {
		t.Error("different domains and counters share a key")
	}
}
