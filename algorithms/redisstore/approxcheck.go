package redisstore

import (
	"context"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
)

// decide decides a validated, non-empty batch: its approximate
// requests from the table (by policy, where their master's syncs have
// failed for a while), the others by exact, in one call. An all-or-nothing
// group may hold both: when an approximate request of it is over, the exact
// ones are only read (hits 0); when an exact one is over, what the table
// counted for the group is taken back.
func (p *checkPath) decide(ctx context.Context, reqs []algorithms.Request) ([]algorithms.Decision, error) {
	s := p.s
	n := 0
	for i := range reqs {
		if approximate(&reqs[i]) {
			n++
		}
	}
	if n < len(reqs) {
		s.approxMetrics.exact.Add(float64(len(reqs) - n))
	}
	if n == 0 {
		return p.exact(ctx, reqs)
	}
	s.approxMetrics.approximate.Add(float64(n))
	s.syncer.ensure()
	now := time.Now()
	someDown := p.anyApproxDown(now) // else every master syncs: the table decides
	if n == len(reqs) && !someDown && !algorithms.Tied(reqs) {
		return p.decideApprox(ctx, reqs)
	}
	return p.decideMixed(ctx, reqs, someDown, now)
}

// decideMixed decides a batch the table cannot decide alone: tied, or
// holding exact requests, or approximate ones of a master that is down
// (someDown: answered by the failure policy).
func (p *checkPath) decideMixed(ctx context.Context, reqs []algorithms.Request, someDown bool, now time.Time) ([]algorithms.Decision, error) {
	s := p.s
	m := mixed{out: make([]algorithms.Decision, len(reqs)), tied: algorithms.Tied(reqs)}
	var down map[*master][]int // the approximate requests of masters down
	for i := range reqs {
		r := &reqs[i]
		if !approximate(r) {
			m.exactAt = append(m.exactAt, i)
			continue
		}
		if someDown {
			if sh := s.route.masterOfRequest(r); p.approxDown(sh, now) {
				down = addDown(down, sh, i)
				continue
			}
		}
		local, nowUS := s.approx.nowUS()
		switch s.approxDecide(ctx, r, &m.out[i], local, nowUS) {
		case notHere:
			m.exactAt = append(m.exactAt, i)
			continue
		case byPolicy:
			down = addDown(down, s.route.masterOfRequest(r), i)
			continue
		}
		m.note(r, i, true)
	}
	err := m.byPolicy(ctx, reqs, down, p)
	if err == nil {
		err = m.decideExact(ctx, reqs, p)
	}
	if err != nil || m.voided {
		m.undo(s.approx, reqs)
	}
	if err != nil {
		return nil, err
	}
	return m.out, nil
}

// byPolicy answers by the failure policy the approximate requests of the
// masters down, at their positions (down, by master).
func (m *mixed) byPolicy(ctx context.Context, reqs []algorithms.Request, down map[*master][]int, p *checkPath) error {
	if err := p.byPolicyAt(ctx, reqs, m.out, down); err != nil {
		return err
	}
	for _, at := range down {
		for _, i := range at {
			m.note(&reqs[i], i, false)
		}
	}
	return nil
}

// byPolicyAt answers by the failure policy the approximate requests at
// the positions down names (by master) into out: those of a master down,
// or past their lease with no answer from Redis in time. Their hits
// admitted (fail open, or fail local) are outside any lease: counted as
// blind.
func (p *checkPath) byPolicyAt(ctx context.Context, reqs []algorithms.Request, out []algorithms.Decision, down map[*master][]int) error {
	for sh, at := range down {
		ds, err := p.byPolicy(ctx, sh, subset(reqs, at))
		if err != nil {
			return err
		}
		putBack(out, at, ds)
		for j, i := range at {
			if ds[j].Counted || (ds[j].Allowed && reqs[i].Hits > 0) {
				p.s.approx.blindHits.Add(reqs[i].Hits)
			}
		}
	}
	return nil
}

// addDown adds position i, a request of master sh, to down.
func addDown(down map[*master][]int, sh *master, i int) map[*master][]int {
	if down == nil {
		down = map[*master][]int{}
	}
	down[sh] = append(down[sh], i)
	return down
}

// approximate reports whether the table decides r: an approximate limit,
// not a refund (negative hits go to Redis, which keeps the count from going
// below zero; the table sees the refund at its next sync), not a hold (Redis
// decides it exactly, on the counter the leases count in, and writes the
// hold beside it: holds.go).
func approximate(r *algorithms.Request) bool {
	return r.Limit.Accuracy == algorithms.Approximate && r.Hits >= 0 && r.Hold == nil
}

// decideApprox decides a batch of approximate requests alone, none tied,
// from the table (by exact where the table is full or the replica count is
// not known yet, one at a time).
func (p *checkPath) decideApprox(ctx context.Context, reqs []algorithms.Request) ([]algorithms.Decision, error) {
	s := p.s
	out := make([]algorithms.Decision, len(reqs))
	local, nowUS := s.approx.nowUS()
	var down map[*master][]int
	for i := range reqs {
		switch s.approxDecide(ctx, &reqs[i], &out[i], local, nowUS) {
		case notHere:
			ds, err := p.exact(ctx, withExact(reqs[i:i+1]))
			if err != nil {
				return nil, err
			}
			out[i] = ds[0]
		case byPolicy:
			down = addDown(down, s.route.masterOfRequest(&reqs[i]), i)
		}
	}
	if err := p.byPolicyAt(ctx, reqs, out, down); err != nil {
		return nil, err
	}
	return out, nil
}

// mixed is a batch of approximate and exact requests being decided.
type mixed struct {
	out     []algorithms.Decision
	tied    bool  // the batch has an all-or-nothing group
	voided  bool  // a request of the group is over
	exactAt []int // the requests Redis decides
	counted []int // the group's approximate requests the table counted
}

// note notes the decision of approximate request i for its group:
// decided by the table (inTable) or by the failure policy.
func (m *mixed) note(r *algorithms.Request, i int, inTable bool) {
	if !m.tied || !r.AllOrNothing {
		return
	}
	if algorithms.Voids(r, &m.out[i]) {
		m.voided = true
	}
	if inTable && m.out[i].Counted && algorithms.Uncounts(r) {
		m.counted = append(m.counted, i)
	}
}

// decideExact decides the exact requests on Redis: only read when the
// group is void already; the group void when one of them is over.
func (m *mixed) decideExact(ctx context.Context, reqs []algorithms.Request, p *checkPath) error {
	if len(m.exactAt) == 0 {
		return nil
	}
	sub := subset(reqs, m.exactAt)
	peeked := make([]bool, len(sub))
	for j := range sub {
		r := &sub[j]
		// The table's overflow, or before the registry was read: exact, on
		// this store (a global limit's is the global Redis already).
		r.Limit.Accuracy, r.Limit.Global = algorithms.Exact, false
		if m.voided && m.tied && algorithms.Uncounts(r) {
			peeked[j], r.Hits = true, 0
		}
	}
	ds, err := p.exact(ctx, sub)
	if err != nil {
		return err
	}
	for j, i := range m.exactAt {
		r := &reqs[i]
		if peeked[j] {
			// Within its limit or not, as a read says; counted: no.
			ds[j].Allowed = ds[j].Remaining >= r.Hits
			ds[j].Counted = false
		}
		if m.tied && algorithms.Voids(r, &ds[j]) {
			m.voided = true
		}
	}
	putBack(m.out, m.exactAt, ds)
	return nil
}

// undo takes back what the table counted for the group, which is void.
func (m *mixed) undo(t *approxTable, reqs []algorithms.Request) {
	for _, i := range m.counted {
		t.undo(&reqs[i], m.out[i].Now)
		m.out[i].Counted = false
	}
	m.counted = nil
}

// subset is the requests of reqs at positions at.
func subset(reqs []algorithms.Request, at []int) []algorithms.Request {
	sub := make([]algorithms.Request, len(at))
	for j, i := range at {
		sub[j] = reqs[i]
	}
	return sub
}

// withExact is a copy of reqs decided exactly, on this store (a global
// limit's is the global Redis already).
func withExact(reqs []algorithms.Request) []algorithms.Request {
	out := append([]algorithms.Request(nil), reqs...)
	for i := range out {
		out[i].Limit.Accuracy, out[i].Limit.Global = algorithms.Exact, false
	}
	return out
}
