package quotasvc

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/descriptors"
)

// group is one shared limit and this replica's buckets that map to it.
type group struct {
	key    string // the usage store's key of the limit (groupKey)
	domain string
	quota  quota
	subs   map[*sub]struct{}
	// last is the last allocation the usage store gave, for when it fails.
	last   *allocation
	lastAt time.Time
}

// newcomers returns the grants of g's buckets that allocation a (nil: none
// yet) does not count: the k-th of them by instance id gets newcomer's k-th
// grant. s.mu is held.
func (s *Server) newcomers(g *group, a *allocation) map[*sub]grant {
	var missing []*sub
	for b := range g.subs {
		if _, ok := a.grantOf(b.instance); !ok {
			missing = append(missing, b)
		}
	}
	sort.Slice(missing, func(i, j int) bool { return missing[i].instance < missing[j].instance })
	n := len(g.subs) - len(missing)
	if a != nil {
		n = len(a.grants)
	}
	out := make(map[*sub]grant, len(missing))
	for k, b := range missing {
		out[b] = newcomer(g.quota, s.opts.Interval, n, k)
	}
	return out
}

// plan maps b to what its match says, joining the group of its limit when
// it has one to share. s.mu is held.
func (s *Server) plan(b *sub, m *descriptors.Match) {
	kind, q, key := limitOf(s.opts.KeyPrefix, b.st.domain, m)
	b.kind = kind
	if kind != "shared" {
		return
	}
	g := s.groups[key]
	if g == nil {
		g = &group{key: key, domain: b.st.domain, quota: q, subs: map[*sub]struct{}{}}
		s.groups[key] = g
	}
	g.subs[b] = struct{}{}
	b.group = g
}

// leave takes b out of its group, dropping the group when it was the last.
// s.mu is held.
func (s *Server) leave(b *sub) {
	g := b.group
	if g == nil {
		return
	}
	delete(g.subs, b)
	if len(g.subs) == 0 {
		delete(s.groups, g.key)
	}
	b.group = nil
}

// limitOf says what a bucket whose descriptor matched m maps to: kind
// (shared, or no_limit, unlimited, shadow, deny: blanket rules), and for a
// shared limit its quota and group key. Of a descriptor's several limits
// (rate_limits) the strictest decides: deny if one denies everything, else
// the one of the lowest rate (burst + sustained: the sustained one).
func limitOf(prefix, domain string, m *descriptors.Match) (kind string, q quota, key string) {
	if m == nil {
		return "no_limit", quota{}, ""
	}
	lim, ok := strictest(m.Limits)
	switch {
	case m.ShadowMode:
		return "shadow", quota{}, ""
	case !ok:
		return "unlimited", quota{}, ""
	case lim.AlwaysOverLimit():
		return "deny", quota{}, ""
	}
	el, err := lim.EngineLimit()
	if err != nil { // a loaded configuration's limits all convert
		return "no_limit", quota{}, ""
	}
	q.window = el.Window
	if q.window <= 0 {
		q.window = time.Minute // the token bucket's default refill: limit per minute
	}
	q.rate = float64(el.Limit) / q.window.Seconds()
	switch el.Algorithm {
	case algorithms.TokenBucket:
		if el.RefillRate > 0 {
			q.rate = el.RefillRate
		}
		q.capacity = float64(el.Limit)
	case algorithms.GCRA:
		q.capacity = float64(el.Limit)
	}
	sig := string(el.Algorithm) + ":" + strconv.FormatInt(el.Limit, 10) + ":" + strconv.FormatInt(el.Window.Milliseconds(), 10) +
		":" + strconv.FormatFloat(el.RefillRate, 'g', -1, 64)
	return "shared", q, groupKey(prefix, domain, m.Counter, sig)
}

// strictest returns, of limits, one that denies everything, else the
// finite one of the lowest rate; false when every one is unlimited.
func strictest(limits []descriptors.RateLimit) (descriptors.RateLimit, bool) {
	var best descriptors.RateLimit
	found, bestRate := false, 0.0
	for _, l := range limits {
		switch {
		case l.Unlimited:
			continue
		case l.AlwaysOverLimit():
			return l, true
		}
		rate := float64(l.RequestsPerUnit) / l.WindowLength().Seconds()
		if !found || rate < bestRate {
			best, bestRate, found = l, rate, true
		}
	}
	return best, found
}

// assign is one reassignment, at epoch: the buckets are matched again when
// the configuration changed, idle ones abandoned, and every shared limit's
// allocation fetched (or computed, by the first replica of the epoch) and
// handed out.
func (s *Server) assign(ctx context.Context, epoch int64, now time.Time) {
	start := time.Now()
	groups, loads := s.groupLoads(now)
	allocs, failed := s.allocations(ctx, epoch, groups, loads)

	s.mu.Lock()
	defer s.mu.Unlock()
	assigned := map[string]float64{}
	for i, g := range groups {
		if s.groups[g.key] != g {
			continue // every bucket left meanwhile
		}
		var a *allocation
		if failed {
			a = s.fallback(g, epoch, now)
		} else {
			a = allocs[i]
			g.last, g.lastAt = a, now
		}
		assigned[g.domain] += s.handOut(g, a, now)
	}
	for st := range s.streams {
		for _, b := range st.subs {
			if b.group == nil {
				s.queue(b, blanketFor(b.kind), now)
			}
		}
	}
	s.metrics.assigned.Reset()
	for d, r := range assigned {
		s.metrics.assigned.WithLabelValues(d).Set(r)
	}
	s.metrics.assignTime.Observe(time.Since(start).Seconds())
}

// groupLoads matches the buckets again when the configuration changed
// (rematch) and returns the shared limits with the demand of each one's
// buckets, read under the lock.
func (s *Server) groupLoads(now time.Time) ([]*group, []groupLoad) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rematch(now)
	groups := make([]*group, 0, len(s.groups))
	loads := make([]groupLoad, 0, len(s.groups))
	for _, g := range s.groups {
		gl := groupLoad{group: g.key, local: make([]demand, 0, len(g.subs))}
		for b := range g.subs {
			gl.local = append(gl.local, demand{instance: b.instance, rate: b.rate})
		}
		groups = append(groups, g)
		loads = append(loads, gl)
	}
	return groups, loads
}

// handOut queues for each bucket of g its grant of allocation a (a bucket
// that subscribed after a was made gets a newcomer's), or, without an
// allocation, FAILURE_MODE's blanket strategy, and returns the rate it
// granted. s.mu is held.
func (s *Server) handOut(g *group, a *allocation, now time.Time) float64 {
	var late map[*sub]grant // subscribed after the allocation was made
	if a != nil {
		late = s.newcomers(g, a)
	}
	granted := 0.0
	for b := range g.subs {
		var strategy *typev3.RateLimitStrategy
		switch {
		case a == nil && s.opts.FailureMode == algorithms.FailClosed:
			strategy = blanketFor("deny")
		case a == nil:
			strategy = blanketFor("no_limit")
		default:
			gr, ok := a.grants[b.instance]
			if !ok {
				gr = late[b]
			}
			strategy = tokenBucket(gr)
			granted += gr.rate()
		}
		s.queue(b, strategy, now)
	}
	return granted
}

// allocations returns each group's allocation for epoch from the usage
// store, computing (and saving) those no replica has made yet. failed is
// true when the store did not answer.
func (s *Server) allocations(ctx context.Context, epoch int64, groups []*group, loads []groupLoad) (allocs []*allocation, failed bool) {
	if len(groups) == 0 {
		return nil, false
	}
	sctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	ls, err := s.usage.load(sctx, epoch, loads)
	if err != nil {
		s.storeFailed("load", err)
		return nil, true
	}
	allocs = make([]*allocation, len(groups))
	var saves []groupSave
	var saved []int
	for i, l := range ls {
		if l.alloc != "" {
			if a, err := decodeAllocation(l.alloc); err == nil {
				allocs[i] = &a
				continue
			}
		}
		a := allocate(groups[i].quota, s.opts.Interval, epoch, l.demands)
		allocs[i] = &a
		if s.opts.Log.Enabled(ctx, slog.LevelDebug) {
			s.opts.Log.DebugContext(ctx, "RLQS allocation", "group", groups[i].key, "epoch", epoch, "demands", fmt.Sprint(l.demands), "allocation", a.encode())
		}
		saves = append(saves, groupSave{group: groups[i].key, epoch: epoch, alloc: a.encode()})
		saved = append(saved, i)
	}
	if len(saves) > 0 {
		won, err := s.usage.save(sctx, saves)
		if err != nil {
			// Ours, from every replica's demands, is as good a split; the
			// other replicas may use another one this epoch.
			s.storeFailed("save", err)
		}
		for j, w := range won {
			if a, err := decodeAllocation(w); err == nil {
				allocs[saved[j]] = &a
			}
		}
	}
	if s.degraded.Swap(false) {
		s.opts.Log.Info("RLQS usage store answers again")
	}
	return allocs, false
}

// storeFailed counts a failed usage-store call, and logs the first of a
// run of them.
func (s *Server) storeFailed(op string, err error) {
	s.metrics.storeErrors.WithLabelValues(op).Inc()
	if op == "load" && !s.degraded.Swap(true) {
		s.opts.Log.Warn("RLQS usage store fails: shares from the last known split, then FAILURE_MODE",
			"err", err, "last_known_for", s.opts.LastKnown.String(), "failure_mode", string(s.opts.FailureMode))
	}
}

// fallback is a group's allocation while the usage store fails: the last
// one it gave, for Options.LastKnown; then by FailureMode: local splits the
// limit among this replica's buckets alone, open and closed return nil
// (allow all, deny all). s.mu is held.
func (s *Server) fallback(g *group, epoch int64, now time.Time) *allocation {
	if g.last != nil && now.Sub(g.lastAt) <= s.opts.LastKnown {
		s.metrics.degraded.WithLabelValues("last_known").Inc()
		return g.last
	}
	s.metrics.degraded.WithLabelValues(string(s.opts.FailureMode)).Inc()
	if s.opts.FailureMode != algorithms.FailLocal {
		return nil
	}
	ds := make([]demand, 0, len(g.subs))
	for b := range g.subs {
		ds = append(ds, demand{instance: b.instance, rate: b.rate})
	}
	a := allocate(g.quota, s.opts.Interval, epoch, ds)
	return &a
}

// rematch maps every bucket of a stream whose domain's descriptors changed
// again, and abandons idle buckets and buckets whose limit went away.
// s.mu is held.
func (s *Server) rematch(now time.Time) {
	for st := range s.streams {
		dom, _, err := s.resolve(st.domain)
		changed := err == nil && dom != st.dom
		if changed {
			st.dom = dom
		}
		for _, b := range st.subs {
			if now.Sub(b.lastUse) > s.opts.IdleAbandon {
				s.drop(b)
				continue
			}
			if !changed {
				continue
			}
			m := dom.Match(b.entries)
			kind, _, gkey := limitOf(s.opts.KeyPrefix, st.domain, m)
			switch {
			case kind == "no_limit" && b.kind != "no_limit":
				s.drop(b) // no longer configured
			case kind != b.kind || (b.group != nil && b.group.key != gkey):
				// Another limit: the same demand shares it from the next
				// reassignment on.
				s.leave(b)
				s.plan(b, m)
				s.metrics.subscribed.WithLabelValues(st.domain, b.kind).Inc()
			}
		}
	}
}

// drop abandons b: the instance forgets it, and subscribes again (afresh)
// when a request matches it later. s.mu is held.
func (s *Server) drop(b *sub) {
	s.leave(b)
	delete(b.st.subs, b.key)
	s.metrics.buckets.Dec()
	s.push(b, abandon(b.id))
	s.metrics.actions.WithLabelValues("abandon").Inc()
}
