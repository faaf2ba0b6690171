package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
)

// Split decides over several Redis deployments, each a Guard of its own
// with its own breakers and failure policy, so that a dead one fails only
// its own decisions:
//
//   - the main Redis (REDIS_URL) decides every limit no other side takes;
//   - the per-second Redis (REDIS_PERSECOND, as Envoy's reference service
//     has it) the limits whose window is one second (PerSecond);
//   - the global Redis (GLOBAL_REDIS_URL), shared by every region, the
//     limits of scope global (algorithms.Limit.Global), whatever their
//     window: approximate limits, decided from memory within leases of it.
//
// A batch with requests on several sides is decided on all of them at
// once. Each side keeps an all-or-nothing group atomic within itself;
// across sides, what one counted for a group another voided is taken back
// after (algorithms.VoidedCounts, refundAt), as across the masters of a
// Redis Cluster: between the counting and the refund another request can
// see the count that is then taken back.
type Split struct {
	sides [numSides]*Guard // nil: no such side
}

// The sides of a Split, in the order Ready and Reset visit them.
const (
	mainSide = iota
	perSecondSide
	globalSide
	numSides
)

// sideNames prefix the errors of a side and the names of its masters in
// Ready (the main side's are bare).
var sideNames = [numSides]string{"", "per-second ", "global "}

// Sides are the Redis deployments a Split decides over: Main always, the
// others when set.
type Sides struct {
	Main, PerSecond, Global *Guard
}

// NewSplit decides each request on its side of sides.
func NewSplit(sides Sides) (*Split, error) {
	if sides.Main == nil || (sides.PerSecond == nil && sides.Global == nil) {
		return nil, errors.New("redisstore: NewSplit needs a main Guard and another")
	}
	return &Split{sides: [numSides]*Guard{sides.Main, sides.PerSecond, sides.Global}}, nil
}

// PerSecond reports whether r goes to the per-second Redis of a Split: its
// limit's window is one second (the reference's unit SECOND).
func PerSecond(r *algorithms.Request) bool { return r.Limit.Window == time.Second }

// side is where r is decided: the global side for a global limit, the
// per-second one for a one-second window, else the main one (a side the
// Split does not have is the main one's: a global limit reaches a Split
// without a global Redis only if validation upstream let it through).
func (s *Split) side(r *algorithms.Request) int {
	switch {
	case r.Limit.Global && s.sides[globalSide] != nil:
		return globalSide
	case PerSecond(r) && s.sides[perSecondSide] != nil:
		return perSecondSide
	}
	return mainSide
}

// bySide returns the positions of the requests of reqs on each side.
func (s *Split) bySide(n int, req func(i int) *algorithms.Request) (at [numSides][]int, sides int) {
	for i := range n {
		k := s.side(req(i))
		if len(at[k]) == 0 {
			sides++
		}
		at[k] = append(at[k], i)
	}
	return at, sides
}

// sideErr names the side an error came from.
func sideErr(k int, err error) error {
	if err == nil || k == mainSide {
		return err
	}
	return fmt.Errorf("%sredis: %w", sideNames[k], err)
}

// Check decides each request on its side, the sides at once. When a side
// fails (ErrOverloaded, the caller's deadline), the batch fails, and what
// the others counted stays counted: over-counting, never under.
func (s *Split) Check(ctx context.Context, reqs []algorithms.Request) ([]algorithms.Decision, error) {
	if err := algorithms.ValidateBatch(reqs); err != nil {
		return nil, err
	}
	at, sides := s.bySide(len(reqs), func(i int) *algorithms.Request { return &reqs[i] })
	switch {
	case len(reqs) == 0:
		return s.sides[mainSide].Check(ctx, reqs)
	case sides == 1:
		return s.sides[s.side(&reqs[0])].Check(ctx, reqs)
	}
	var ds [numSides][]algorithms.Decision
	var errs [numSides]error
	var wg sync.WaitGroup
	for k, g := range s.sides {
		if len(at[k]) == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ds[k], errs[k] = g.Check(ctx, subset(reqs, at[k]))
		}()
	}
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		return nil, err
	}
	out := make([]algorithms.Decision, len(reqs))
	for k := range s.sides {
		putBack(out, at[k], ds[k])
	}
	if voided := algorithms.VoidedCounts(reqs, out); len(voided) > 0 {
		var back [numSides][]int
		for _, i := range voided {
			k := s.side(&reqs[i])
			back[k] = append(back[k], i)
		}
		for k, g := range s.sides {
			if len(back[k]) > 0 {
				g.store.refundAt(ctx, reqs, back[k], out)
			}
		}
	}
	return out, nil
}

// Reset resets (scope, identifier) on every side and returns how many
// limits' states it deleted in all.
func (s *Split) Reset(ctx context.Context, scope, identifier string, alg algorithms.Algorithm) (int, error) {
	n := 0
	for k, g := range s.sides {
		if g == nil {
			continue
		}
		m, err := g.Reset(ctx, scope, identifier, alg)
		n += m
		if err != nil {
			return n, sideErr(k, err)
		}
	}
	return n, nil
}

// Clear clears each request's state on its side.
func (s *Split) Clear(ctx context.Context, reqs []algorithms.Request) (int, error) {
	if err := algorithms.ValidateBatch(reqs); err != nil {
		return 0, err
	}
	at, _ := s.bySide(len(reqs), func(i int) *algorithms.Request { return &reqs[i] })
	n := 0
	for k, g := range s.sides {
		if len(at[k]) == 0 {
			continue
		}
		m, err := g.Clear(ctx, subset(reqs, at[k]))
		n += m
		if err != nil {
			return n, sideErr(k, err)
		}
	}
	return n, nil
}

// Ready asks every side whether it answers (Store.Ready), at once: every
// master by its name, after its side's name ("per-second redis", "global
// redis", or a Cluster master's address after "per-second " or "global ").
func (s *Split) Ready(ctx context.Context) map[string]error {
	var got [numSides]map[string]error
	var wg sync.WaitGroup
	for k, g := range s.sides {
		if g == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[k] = g.store.Ready(ctx)
		}()
	}
	wg.Wait()
	out := got[mainSide]
	for k := mainSide + 1; k < numSides; k++ {
		for name, err := range got[k] {
			if err != nil {
				err = fmt.Errorf("%s%w", sideNames[k], err)
			}
			out[sideNames[k]+name] = err
		}
	}
	return out
}

// Settle settles each hold on its side (that of its request).
func (s *Split) Settle(ctx context.Context, sts []algorithms.Settle) ([]algorithms.SettleResult, error) {
	if err := algorithms.ValidateSettles(sts); err != nil {
		return nil, err
	}
	at, _ := s.bySide(len(sts), func(i int) *algorithms.Request { return &sts[i].Request })
	out := make([]algorithms.SettleResult, len(sts))
	for k, g := range s.sides {
		if len(at[k]) == 0 {
			continue
		}
		sub := make([]algorithms.Settle, len(at[k]))
		for j, i := range at[k] {
			sub[j] = sts[i]
		}
		rs, err := g.Settle(ctx, sub)
		if err != nil {
			return nil, sideErr(k, err)
		}
		for j, i := range at[k] {
			out[i] = rs[j]
		}
	}
	return out, nil
}
