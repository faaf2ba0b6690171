package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/algorithms/storetest"
	"github.com/throttle-rl/throttle/internal/testkit/redistest"
)

// newRedisClient connects to the test Redis and closes the client at the end.
func newRedisClient(t testing.TB, poolSize int) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(redistest.SharedURL(t))
	if err != nil {
		t.Fatalf("parse redis url: %v", err)
	}
	if poolSize > 0 {
		opt.PoolSize = poolSize
	}
	rdb := redis.NewClient(opt)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("ping redis: %v", err)
	}
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// singleRedis is the test Redis, for tests run on a single Redis and a
// Cluster alike (newClusterClient).
func singleRedis(t *testing.T) redis.UniversalClient { return newRedisClient(t, 0) }

// newClusterClient connects to a Cluster started for t and closes the
// client at the end.
func newClusterClient(t *testing.T) redis.UniversalClient {
	t.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: redistest.StartCluster(t), ContextTimeoutEnabled: true})
	t.Cleanup(func() { cc.Close() })
	return cc
}

// uniqueScope is storetest.UniqueScope.
func uniqueScope(t testing.TB) string {
	t.Helper()
	return storetest.UniqueScope(t)
}

// fakeClock is storetest's settable clock.
type fakeClock = storetest.Clock

// t0 is aligned to every window the tests use.
var t0 = storetest.T0

// storeFactories are the Redis store's configurations for the conformance
// suite: functions or the script, coalesced or not, counting atomically or
// (Envoy's counters) counting first.
func storeFactories() []storetest.Factory {
	return []storetest.Factory{
		{Name: "redis", New: func(t *testing.T, clock func() time.Time) algorithms.Store {
			return New(newRedisClient(t, 0), Options{Now: clock})
		}, Keep: keeper, Sweep: sweeper},
		{Name: "redis-script", New: func(t *testing.T, clock func() time.Time) algorithms.Store {
			// The engine as a script (EVALSHA), as on Redis 6 or where an
			// ACL refuses FUNCTION LOAD.
			s := New(newRedisClient(t, 0), Options{Now: clock})
			singleMaster(s).lua.Store(luaEval)
			return s
		}, Keep: keeper, Sweep: sweeper},
		{Name: "redis-coalesced", New: func(t *testing.T, clock func() time.Time) algorithms.Store {
			s := New(newRedisClient(t, 0), Options{Now: clock, Coalesce: 2})
			t.Cleanup(s.Close)
			return s
		}, Keep: keeper, Sweep: sweeper},
		{Name: "redis-unindexed", Unindexed: true, New: func(t *testing.T, clock func() time.Time) algorithms.Store {
			return storetest.Unindexed(New(newRedisClient(t, 0), Options{Now: clock}))
		}, Keep: keeper, Sweep: sweeper},
		{Name: "redis-unindexed-coalesced", Unindexed: true, New: func(t *testing.T, clock func() time.Time) algorithms.Store {
			s := New(newRedisClient(t, 0), Options{Now: clock, Coalesce: 2})
			t.Cleanup(s.Close)
			return storetest.Unindexed(s)
		}, Keep: keeper, Sweep: sweeper},
	}
}

// stateKeeper takes the TTL off one request's state key. Redis expires keys
// on its own clock, while the suite moves a fake one: a key that must live
// 1 ms of fake time can vanish in the real milliseconds between two steps.
// Once persisted, only the fake clock decides, as in production only
// Redis's does. A key can still expire between the script's write and
// persist; Exists tells, race-free, since a persisted key cannot expire any
// more.
type stateKeeper struct {
	t   *testing.T
	rdb *redis.Client
	key string
}

func keeper(t *testing.T, s algorithms.Store, r algorithms.Request) storetest.Keeper {
	t.Helper()
	return stateKeeper{t: t, rdb: newRedisClient(t, 1), key: storetest.Unwrap(s).(*Store).stateKey(&r)}
}

func (k stateKeeper) Persist() {
	k.t.Helper()
	if err := k.rdb.Persist(context.Background(), k.key).Err(); err != nil {
		k.t.Fatal(err)
	}
}

func (k stateKeeper) Exists() bool {
	k.t.Helper()
	n, err := k.rdb.Exists(context.Background(), k.key).Result()
	if err != nil {
		k.t.Fatal(err)
	}
	return n == 1
}

// sweeper gives back the holds that expired on the store's clock.
func sweeper(t *testing.T, s algorithms.Store) {
	t.Helper()
	if _, _, err := storetest.Unwrap(s).(*Store).SweepHolds(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// singleMaster is the one master of a store over a single Redis.
func singleMaster(s *Store) *master { return s.route.topo.Load().one }
