package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/algorithms/redisstore"
	"github.com/throttle-rl/throttle/internal/testkit/redistest"
)

// decideOnce makes one check through the store Throttle builds on rdb.
func decideOnce(t *testing.T, rdb redis.UniversalClient) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s := redisstore.New(rdb, redisstore.Options{Coalesce: 2})
	defer s.Close()
	ds, err := s.Check(ctx, []algorithms.Request{
		{Key: algorithms.Key{Scope: "url-test", Identifier: "a"}, Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 1, Window: time.Minute}, Hits: 1},
		{Key: algorithms.Key{Scope: "url-test", Identifier: "b"}, Limit: algorithms.Limit{Algorithm: algorithms.TokenBucket, Limit: 1}, Hits: 1},
	})
	if err != nil || !ds[0].Allowed || !ds[1].Allowed {
		t.Fatalf("check = %+v, %v", ds, err)
	}
}

func TestRedisURLCluster(t *testing.T) {
	addrs := redistest.StartCluster(t)
	rdb, err := newRedis(redisConfig{URL: "redis://" + addrs[0] + "/0?cluster=true&addr=" + addrs[1] + "&addr=" + addrs[2]}, "REDIS_", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	if _, ok := rdb.(*redis.ClusterClient); !ok {
		t.Fatalf("client is %T, want *redis.ClusterClient", rdb)
	}
	decideOnce(t, rdb)
}

func TestRedisURLSentinel(t *testing.T) {
	sentinel := redistest.StartSentinel(t, redistest.Start(t), "mymaster")
	rdb, err := newRedis(redisConfig{URL: "redis://" + sentinel + "/0?master_name=mymaster"}, "REDIS_", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	// The sentinel needs a moment to answer for its master.
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := rdb.Ping(ctx).Err()
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no master through the sentinel: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	decideOnce(t, rdb)
}

func TestRedisURLErrors(t *testing.T) {
	for _, u := range []string{"redis://localhost:6379/0?bogus=1", "redis://localhost:6379/0?cluster=true&bogus=1", "redis://%zz"} {
		if _, err := newRedis(redisConfig{URL: u}, "REDIS_", nil); err == nil || !strings.Contains(err.Error(), "REDIS_URL") {
			t.Errorf("newRedis(%q) err = %v, want a REDIS_URL error", u, err)
		}
	}
}
