package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
)

// Split decides over two Redis deployments, as Envoy's reference service
// does with REDIS_PERSECOND: a request whose limit's window is one second
// (PerSecond) goes to the per-second Redis, every other to the main one.
// Each is a Guard of its own, with its own breakers and failure policy, so
// a dead per-second Redis fails only the per-second decisions.
//
// A batch with requests on both sides is decided on both at once. Each
// side keeps an all-or-nothing group atomic within itself; across the two,
// what one side counted for a group the other side voided is taken back
// after (algorithms.VoidedCounts, refundAt), as across the masters of a
// Redis Cluster: between the counting and the refund another request can
// see the count that is then taken back.
type Split struct {
	main, perSecond *Guard
}

// NewSplit decides the per-second requests on perSecond and the others on
// main.
func NewSplit(main, perSecond *Guard) (*Split, error) {
	if main == nil || perSecond == nil {
		return nil, errors.New("redisstore: NewSplit needs two Guards")
	}
	return &Split{main: main, perSecond: perSecond}, nil
}

// PerSecond reports whether r goes to the per-second Redis of a Split: its
// limit's window is one second (the reference's unit SECOND).
func PerSecond(r *algorithms.Request) bool { return r.Limit.Window == time.Second }

// Check decides each request on its side, the two sides at once. When a
// side fails (ErrOverloaded, the caller's deadline), the batch fails, and
// what the other side counted stays counted: over-counting, never under.
func (s *Split) Check(ctx context.Context, reqs []algorithms.Request) ([]algorithms.Decision, error) {
	if err := algorithms.ValidateBatch(reqs); err != nil {
		return nil, err
	}
	fast, slow := s.sides(reqs)
	switch {
	case len(fast) == 0:
		return s.main.Check(ctx, reqs)
	case len(slow) == 0:
		return s.perSecond.Check(ctx, reqs)
	}
	var fds []algorithms.Decision
	var ferr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		fds, ferr = s.perSecond.Check(ctx, subset(reqs, fast))
	}()
	sds, serr := s.main.Check(ctx, subset(reqs, slow))
	<-done
	if err := errors.Join(serr, ferr); err != nil {
		return nil, err
	}
	out := make([]algorithms.Decision, len(reqs))
	putBack(out, fast, fds)
	putBack(out, slow, sds)
	if at := algorithms.VoidedCounts(reqs, out); len(at) > 0 {
		var fastAt, slowAt []int
		for _, i := range at {
			if PerSecond(&reqs[i]) {
				fastAt = append(fastAt, i)
			} else {
				slowAt = append(slowAt, i)
			}
		}
		s.perSecond.store.refundAt(ctx, reqs, fastAt, out)
		s.main.store.refundAt(ctx, reqs, slowAt, out)
	}
	return out, nil
}

// sides returns the positions of the per-second requests of reqs, and of
// the others; nil for none.
func (s *Split) sides(reqs []algorithms.Request) (fast, slow []int) {
	for i := range reqs {
		if PerSecond(&reqs[i]) {
			fast = append(fast, i)
		} else {
			slow = append(slow, i)
		}
	}
	return fast, slow
}

// Reset resets (scope, identifier) on both sides and returns how many
// limits' states it deleted in all.
func (s *Split) Reset(ctx context.Context, scope, identifier string, alg algorithms.Algorithm) (int, error) {
	n, err := s.main.Reset(ctx, scope, identifier, alg)
	if err != nil {
		return n, err
	}
	m, err := s.perSecond.Reset(ctx, scope, identifier, alg)
	if err != nil {
		return n + m, fmt.Errorf("per-second redis: %w", err)
	}
	return n + m, nil
}

// Clear clears each request's state on its side.
func (s *Split) Clear(ctx context.Context, reqs []algorithms.Request) (int, error) {
	if err := algorithms.ValidateBatch(reqs); err != nil {
		return 0, err
	}
	fast, slow := s.sides(reqs)
	n := 0
	if len(slow) > 0 {
		var err error
		if n, err = s.main.Clear(ctx, subset(reqs, slow)); err != nil {
			return n, err
		}
	}
	if len(fast) > 0 {
		m, err := s.perSecond.Clear(ctx, subset(reqs, fast))
		if err != nil {
			return n + m, fmt.Errorf("per-second redis: %w", err)
		}
		n += m
	}
	return n, nil
}

// perSecondName starts the names of the per-second Redis's masters in
// Ready: "per-second redis", or "per-second " and a Cluster master's
// address.
const perSecondName = "per-second "

// Ready asks both sides whether they answer (Store.Ready): every master by
// its name, the per-second Redis's after perSecondName.
func (s *Split) Ready(ctx context.Context) map[string]error {
	var fast map[string]error
	done := make(chan struct{})
	go func() {
		defer close(done)
		fast = s.perSecond.store.Ready(ctx)
	}()
	out := s.main.store.Ready(ctx)
	<-done
	for name, err := range fast {
		if err != nil {
			err = fmt.Errorf("per-second %w", err)
		}
		out[perSecondName+name] = err
	}
	return out
}

// Settle settles each hold on its side (PerSecond of its request).
func (s *Split) Settle(ctx context.Context, sts []algorithms.Settle) ([]algorithms.SettleResult, error) {
	if err := algorithms.ValidateSettles(sts); err != nil {
		return nil, err
	}
	var fast, slow []int
	for i := range sts {
		if PerSecond(&sts[i].Request) {
			fast = append(fast, i)
		} else {
			slow = append(slow, i)
		}
	}
	out := make([]algorithms.SettleResult, len(sts))
	for _, side := range []struct {
		g  *Guard
		at []int
	}{{s.main, slow}, {s.perSecond, fast}} {
		if len(side.at) == 0 {
			continue
		}
		sub := make([]algorithms.Settle, len(side.at))
		for j, i := range side.at {
			sub[j] = sts[i]
		}
		rs, err := side.g.Settle(ctx, sub)
		if err != nil {
			return nil, err
		}
		for j, i := range side.at {
			out[i] = rs[j]
		}
	}
	return out, nil
}
