package redisstore

import (
	"context"
	"fmt"
	"time"
)

// register notes this replica in the registry (or takes it out) and reads
// the replica count. The count settles once a read was sent an interval
// after this replica joined: replicas that started together count each
// other by then, so their blind budgets add up to less than limit /
// blindParts.
func (y *approxSyncer) register(ctx context.Context, leave bool) error {
	ttl := max(3*y.t.interval, time.Second).Milliseconds()
	flag := ""
	if leave {
		flag = "1"
	}
	sent := time.Now()
	var res []int64
	err := y.s.route.onKey(ctx, y.regKey, func(sh *master) error {
		var err error
		res, err = y.reg.Run(ctx, sh.client, []string{y.regKey}, y.id, ttl, flag).Int64Slice()
		return err
	})
	if err != nil {
		return fmt.Errorf("redis: approximate registry: %w", err)
	}
	if len(res) != 1 {
		return fmt.Errorf("redis: approximate registry: %d values in the reply, want 1", len(res))
	}
	if !leave {
		y.joined.CompareAndSwap(0, sent.UnixNano())
		y.t.replicas.Store(max(1, res[0]))
		if sent.UnixNano()-y.joined.Load() >= y.t.interval.Nanoseconds() {
			y.t.settled.Store(true)
		}
	}
	return nil
}
