package algorithms

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func BenchmarkTmpVariants(b *testing.B) {
	ctx := context.Background()
	rdb := newRedisClient(b, 1)
	s := NewRedisStore(rdb, RedisOptions{})
	for _, batch := range []int{8, 16} {
		for _, ks := range []int{0, 500} {
			keyOf := func(prefix string, n int) string {
				if ks > 0 {
					n %= ks
				}
				return prefix + strconv.Itoa(n)
			}
			b.Run(fmt.Sprintf("lua/batch=%d/ks=%d", batch, ks), func(b *testing.B) {
				scope := uniqueScope(b)
				reqs := make([]Request, batch)
				n := 0
				l := Limit{Algorithm: FixedWindow, Limit: 1e12, Window: time.Hour}
				measureRedisCPU(b, rdb, batch, func() {
					for i := range reqs {
						n++
						reqs[i] = Request{Key: Key{Scope: scope, Identifier: keyOf("u", n)}, Limit: l, Hits: 1, Unindexed: true}
					}
					if _, err := s.Check(ctx, reqs); err != nil {
						b.Fatal(err)
					}
				})
			})
			variants := map[string]func(p redis.Pipeliner, key string){
				"incr_pexpireat_nx": func(p redis.Pipeliner, key string) {
					p.IncrBy(ctx, key, 1)
					p.Do(ctx, "PEXPIREAT", key, "1900000000000", "NX")
				},
				"setnx_incr": func(p redis.Pipeliner, key string) {
					p.Do(ctx, "SET", key, "0", "PX", "3600000", "NX")
					p.IncrBy(ctx, key, 1)
				},
				"setnxget": func(p redis.Pipeliner, key string) {
					p.Do(ctx, "SET", key, "1", "PX", "3600000", "NX", "GET")
				},
				"incr_expire": func(p redis.Pipeliner, key string) {
					p.IncrBy(ctx, key, 1)
					p.Expire(ctx, key, time.Hour)
				},
			}
			for name, v := range variants {
				b.Run(fmt.Sprintf("%s/batch=%d/ks=%d", name, batch, ks), func(b *testing.B) {
					prefix := uniqueScope(b) + ":v:"
					n := 0
					measureRedisCPU(b, rdb, batch, func() {
						_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
							for range batch {
								n++
								v(p, keyOf(prefix, n))
							}
							return nil
						})
						if err != nil && err != redis.Nil {
							b.Fatal(err)
						}
					})
				})
			}
		}
	}
}
