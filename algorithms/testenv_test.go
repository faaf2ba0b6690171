package algorithms

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttle-rl/throttle/internal/redistest"
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

// uniqueScope gives each test its own scope, so tests sharing one Redis never
// see each other's state.
func uniqueScope(t testing.TB) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return t.Name() + "-" + hex.EncodeToString(b)
}

// fakeClock is a settable clock shared by a test and a store.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// storeFactory builds a store on clock for the conformance suite.
type storeFactory struct {
	name string
	make func(t *testing.T, clock func() time.Time) Store
}

// unindexed reports whether the store's requests are all Unindexed
// (unindexedStore): nothing for Reset to find.
func (f storeFactory) unindexed() bool { return strings.Contains(f.name, "unindexed") }

// unindexedStore makes every request Unindexed, as the Envoy service's are:
// a RedisStore then decides fixed windows without the script (plain.go).
type unindexedStore struct{ Store }

func unindexed(reqs []Request) []Request {
	out := slices.Clone(reqs)
	for i := range out {
		out[i].Unindexed = true
	}
	return out
}

func (u unindexedStore) Check(ctx context.Context, reqs []Request) ([]Decision, error) {
	return u.Store.Check(ctx, unindexed(reqs))
}

func (u unindexedStore) Clear(ctx context.Context, reqs []Request) (int, error) {
	return u.Store.Clear(ctx, unindexed(reqs))
}

func storeFactories() []storeFactory {
	return []storeFactory{
		{"memory", func(t *testing.T, clock func() time.Time) Store {
			return NewMemoryStore(MemoryOptions{Now: clock})
		}},
		{"redis", func(t *testing.T, clock func() time.Time) Store {
			return NewRedisStore(newRedisClient(t, 0), RedisOptions{Now: clock})
		}},
		{"redis-script", func(t *testing.T, clock func() time.Time) Store {
			// The engine as a script (EVALSHA), as on Redis 6 or where an
			// ACL refuses FUNCTION LOAD.
			s := NewRedisStore(newRedisClient(t, 0), RedisOptions{Now: clock})
			s.single.lua.Store(luaEval)
			return s
		}},
		{"redis-coalesced", func(t *testing.T, clock func() time.Time) Store {
			s := NewRedisStore(newRedisClient(t, 0), RedisOptions{Now: clock, Coalesce: 2})
			t.Cleanup(s.Close)
			return s
		}},
		{"redis-unindexed", func(t *testing.T, clock func() time.Time) Store {
			return unindexedStore{NewRedisStore(newRedisClient(t, 0), RedisOptions{Now: clock})}
		}},
		{"redis-unindexed-coalesced", func(t *testing.T, clock func() time.Time) Store {
			s := NewRedisStore(newRedisClient(t, 0), RedisOptions{Now: clock, Coalesce: 2})
			t.Cleanup(s.Close)
			return unindexedStore{s}
		}},
	}
}
