package redisstore

import (
	"context"
	"fmt"
	"time"
)

// register notes this replica in the registry (or takes it out) and reads
// the replica count and this replica's rank.
func (y *approxSyncer) register(ctx context.Context, leave bool) error {
	sh := y.s.single
	if y.s.cluster != nil {
		y.s.cluster.ready(ctx)
		sh = y.s.cluster.shardOf(y.regKey)
	}
	if sh == nil || sh.client == nil {
		return fmt.Errorf("redis: approximate registry: %w", errNoMaster)
	}
	ttl := max(3*y.t.interval, time.Second).Milliseconds()
	flag := ""
	if leave {
		flag = "1"
	}
	res, err := y.reg.Run(ctx, sh.client, []string{y.regKey}, y.id, ttl, flag).Int64Slice()
	if err != nil {
		return fmt.Errorf("redis: approximate registry: %w", err)
	}
	if len(res) != 2 {
		return fmt.Errorf("redis: approximate registry: %d values in the reply, want 2", len(res))
	}
	if !leave {
		y.t.replicas.Store(res[0])
		y.t.rank.Store(res[1])
	}
	return nil
}
