package idempotency

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrBudget is a reply not kept because its Redis is past the memory
// budget of idempotency records: what is left is the counters'.
var ErrBudget = errors.New("idempotency: Redis is past the budget of idempotency records; reply not kept")

// budgetEvery is how often a Redis node's memory is read again.
const budgetEvery = time.Second

// budget keeps idempotency records from taking what counters need: no
// reply is kept on a Redis node whose used_memory is at or past percent
// of its maxmemory (a node without maxmemory has no budget: set one, with
// maxmemory-policy noeviction). The node's INFO is read at most once per
// budgetEvery.
type budget struct {
	percent int // 0: no budget

	mu    sync.Mutex
	nodes map[string]budgetState // by node address
}

type budgetState struct {
	checked time.Time
	full    bool
}

// check returns ErrBudget when the node holding key is past the budget.
func (b *budget) check(ctx context.Context, rdb redis.UniversalClient, key string) error {
	if b.percent <= 0 {
		return nil
	}
	node := redis.Cmdable(rdb)
	addr := "single"
	if c, ok := rdb.(*redis.ClusterClient); ok {
		m, err := c.MasterForKey(ctx, key)
		if err != nil {
			return fmt.Errorf("idempotency: budget: %w", err)
		}
		node, addr = m, m.Options().Addr
	}
	b.mu.Lock()
	st, ok := b.nodes[addr]
	b.mu.Unlock()
	if !ok || time.Since(st.checked) >= budgetEvery {
		info, err := node.Info(ctx, "memory").Result()
		if err != nil {
			return fmt.Errorf("idempotency: budget: %w", err)
		}
		used, max := infoField(info, "used_memory"), infoField(info, "maxmemory")
		st = budgetState{checked: time.Now(), full: max > 0 && used*100 >= max*int64(b.percent)}
		b.mu.Lock()
		if b.nodes == nil {
			b.nodes = map[string]budgetState{}
		}
		b.nodes[addr] = st
		b.mu.Unlock()
	}
	if st.full {
		return ErrBudget
	}
	return nil
}

// infoField reads an integer field of INFO's reply (0 when missing).
func infoField(info, name string) int64 {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}
