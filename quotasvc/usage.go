package quotasvc

import (
	"context"
	"sync"
	"time"
)

// usageStore keeps, for each shared limit (a group), every instance's demand
// and the allocation of the current epoch, where every replica sees them:
// Redis (redisUsage), or memory on one node (memoryUsage). A demand expires
// unless written again; an allocation is computed once per epoch, by the
// first replica to find none, and used by all.
type usageStore interface {
	// write records demands of this replica's instances, to live ttl (0:
	// the store's own).
	write(ctx context.Context, ds []demandWrite, ttl time.Duration) error
	// load writes each group's local demands, then returns its allocation
	// for epoch (or a later one) when there is one, else every live demand.
	load(ctx context.Context, epoch int64, gs []groupLoad) ([]loaded, error)
	// save keeps each computed allocation unless one for its epoch or a
	// later one is there already, and returns the allocation in force.
	save(ctx context.Context, gs []groupSave) ([]string, error)
}

// demandWrite is one instance's demand of one group.
type demandWrite struct {
	group string
	demand
}

// groupLoad is a group and the demands of this replica's instances in it.
type groupLoad struct {
	group string
	local []demand
}

// loaded is a group's allocation in force (encoded), or, when there is none,
// every live demand.
type loaded struct {
	alloc   string
	demands []demand
}

// groupSave is a group's allocation (encoded) to keep.
type groupSave struct {
	group string
	epoch int64
	alloc string
}

// memoryUsage is the usage store of one node.
type memoryUsage struct {
	now      func() time.Time
	entryTTL time.Duration // how long a demand lives unless written again
	allocTTL time.Duration

	mu     sync.Mutex
	groups map[string]*memoryGroup
}

type memoryGroup struct {
	demands      map[string]memoryDemand
	alloc        string
	allocEpoch   int64
	allocExpires time.Time
	touched      time.Time
}

type memoryDemand struct {
	rate    float64
	expires time.Time
}

func newMemoryUsage(now func() time.Time, entryTTL, allocTTL time.Duration) *memoryUsage {
	return &memoryUsage{now: now, entryTTL: entryTTL, allocTTL: allocTTL, groups: map[string]*memoryGroup{}}
}

func (m *memoryUsage) group(key string, now time.Time) *memoryGroup {
	g := m.groups[key]
	if g == nil {
		g = &memoryGroup{demands: map[string]memoryDemand{}}
		m.groups[key] = g
	}
	g.touched = now
	return g
}

func (m *memoryUsage) write(_ context.Context, ds []demandWrite, ttl time.Duration) error {
	if ttl <= 0 {
		ttl = m.entryTTL
	}
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, d := range ds {
		m.group(d.group, now).demands[d.instance] = memoryDemand{rate: d.rate, expires: now.Add(ttl)}
	}
	return nil
}

func (m *memoryUsage) load(_ context.Context, epoch int64, gs []groupLoad) ([]loaded, error) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]loaded, len(gs))
	for i, gl := range gs {
		g := m.group(gl.group, now)
		for _, d := range gl.local {
			g.demands[d.instance] = memoryDemand{rate: d.rate, expires: now.Add(m.entryTTL)}
		}
		if g.alloc != "" && g.allocEpoch >= epoch && now.Before(g.allocExpires) {
			out[i].alloc = g.alloc
			continue
		}
		for id, d := range g.demands {
			if !now.Before(d.expires) {
				delete(g.demands, id)
				continue
			}
			out[i].demands = append(out[i].demands, demand{instance: id, rate: d.rate})
		}
	}
	// Groups no replica loads any more go once their demands would have
	// expired.
	for key, g := range m.groups {
		if now.Sub(g.touched) > m.entryTTL+m.allocTTL {
			delete(m.groups, key)
		}
	}
	return out, nil
}

func (m *memoryUsage) save(_ context.Context, gs []groupSave) ([]string, error) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, len(gs))
	for i, s := range gs {
		g := m.group(s.group, now)
		if g.alloc == "" || g.allocEpoch < s.epoch || !now.Before(g.allocExpires) {
			g.alloc, g.allocEpoch, g.allocExpires = s.alloc, s.epoch, now.Add(m.allocTTL)
		}
		out[i] = g.alloc
	}
	return out, nil
}
