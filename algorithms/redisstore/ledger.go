package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/throttle-rl/throttle/algorithms"
)

//go:embed ledger.lua
var ledgerLua string

// Ledger keeps each owner's outstanding reservations in Redis, so every
// replica caps them against one count (REST's
// RESERVATION_MAX_OUTSTANDING_PER_CLIENT): per owner a sorted set of ids
// by expiry, key "throttle:{r:<owner>}:resv" (a slot of its own on a
// Cluster). A claim drops the expired ids, counts, and adds the new ones
// or none, in one script call; a settle's release is one ZREM. An id
// nobody releases (its replica died, its hold expired unseen) leaves at its
// expiry, by the next claim or list: no sweeper is needed.
type Ledger struct {
	s      *Store
	script *redis.Script
}

// Ledger returns the store's ledger of outstanding reservations.
func (s *Store) Ledger() *Ledger {
	return &Ledger{s: s, script: redis.NewScript(ledgerLua)}
}

// key is owner's ledger.
func (l *Ledger) key(owner string) string {
	b := append([]byte(l.s.opts.KeyPrefix+keyPrefix+"{r:"), algorithms.AppendKeyPart(nil, owner)...)
	return string(append(b, "}:resv"...))
}

// Claim adds ids, each expiring after its ttl, to owner's outstanding
// reservations, unless that would make more than most: then it adds none
// and returns false. n is how many owner had before.
func (l *Ledger) Claim(ctx context.Context, owner string, ids []string, ttls []time.Duration, most int) (n int, ok bool, err error) {
	if len(ids) == 0 {
		return 0, true, nil
	}
	args := make([]any, 0, 3+2*len(ids))
	args = append(args, "claim", l.s.nowArg(), strconv.Itoa(most))
	for i, id := range ids {
		args = append(args, id, strconv.FormatInt(ttls[i].Microseconds(), 10))
	}
	var res []int64
	err = l.run(ctx, owner, func(c redis.Cmdable, key string) error {
		var err error
		res, err = l.script.Run(ctx, c, []string{key}, args...).Int64Slice()
		return err
	})
	if err == nil && len(res) != 2 {
		err = fmt.Errorf("%d values in the reply, want 2", len(res))
	}
	if err != nil {
		return 0, false, fmt.Errorf("redis: claim reservations: %w", err)
	}
	return int(res[0]), res[1] == 1, nil
}

// Release takes ids out of owner's outstanding reservations.
func (l *Ledger) Release(ctx context.Context, owner string, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	members := make([]any, len(ids))
	for i, id := range ids {
		members[i] = id
	}
	err := l.run(ctx, owner, func(c redis.Cmdable, key string) error {
		return c.ZRem(ctx, key, members...).Err()
	})
	if err != nil {
		return fmt.Errorf("redis: release reservations: %w", err)
	}
	return nil
}

// List returns owner's outstanding reservations (unexpired, unreleased).
func (l *Ledger) List(ctx context.Context, owner string) ([]string, error) {
	var ids []string
	err := l.run(ctx, owner, func(c redis.Cmdable, key string) error {
		var err error
		ids, err = l.script.Run(ctx, c, []string{key}, "list", l.s.nowArg()).StringSlice()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("redis: list reservations: %w", err)
	}
	return ids, nil
}

// run calls f with the client of owner's ledger's master and its key.
func (l *Ledger) run(ctx context.Context, owner string, f func(c redis.Cmdable, key string) error) error {
	key := l.key(owner)
	return l.s.route.onKey(ctx, key, func(sh *master) error {
		if sh.client == nil {
			return errNoMaster
		}
		return f(sh.client, key)
	})
}
