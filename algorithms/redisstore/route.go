package redisstore

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
)

// shardCheck decides a part of a batch that one shard holds; last is false
// when a redirect will be followed (dispatch sends the part once more).
type shardCheck func(ctx context.Context, sh *shard, reqs []algorithms.Request, last bool) ([]algorithms.Decision, error)

// dispatch decides a validated, non-empty batch: each part on its shard with
// check, the parts at once. A part whose master answered a redirect (a slot
// moved: failover, resharding) did not run; it is routed again on a fresh
// slot table and sent once more.
func (s *Store) dispatch(ctx context.Context, reqs []algorithms.Request, check shardCheck) ([]algorithms.Decision, error) {
	if s.cluster == nil {
		return check(ctx, s.single, reqs, true)
	}
	s.cluster.ready(ctx)
	var out []algorithms.Decision
	var at []int // the positions still to decide; nil: all
	for attempt := 0; ; attempt++ {
		last := attempt > 0
		sent := time.Now()
		parts := s.split(reqs, at)
		if len(parts) == 1 && at == nil {
			ds, err := check(ctx, parts[0].sh, reqs, last)
			if last || !isRedirect(err) {
				return ds, err
			}
		} else {
			if out == nil {
				out = make([]algorithms.Decision, len(reqs))
			}
			errs := s.onParts(ctx, parts, check, last, out)
			var failed error
			at = at[:0]
			for i, err := range errs {
				switch {
				case err == nil:
				case !last && isRedirect(err):
					at = append(at, parts[i].at...)
				default:
					failed = errors.Join(failed, err)
				}
			}
			if failed != nil {
				// What other parts counted stays counted: they were
				// asked, and a caller that retries is over-counted,
				// never under.
				return nil, failed
			}
			if len(at) == 0 {
				s.refundVoided(ctx, reqs, out)
				return out, nil
			}
		}
		if at == nil {
			at = make([]int, len(reqs))
			for i := range at {
				at[i] = i
			}
		}
		s.cluster.refresh(ctx, sent)
	}
}

// onParts decides each part on its shard, all at once, writes the decisions
// into out at their positions, and returns each part's error.
func (s *Store) onParts(ctx context.Context, parts []part, check shardCheck, last bool, out []algorithms.Decision) []error {
	errs := make([]error, len(parts))
	run := func(i int) {
		p := parts[i]
		ds, err := check(ctx, p.sh, p.reqs, last)
		if err != nil {
			errs[i] = err
			return
		}
		putBack(out, p.at, ds)
	}
	var wg sync.WaitGroup
	for i := 1; i < len(parts); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run(i)
		}()
	}
	run(0)
	wg.Wait()
	return errs
}

// part is the requests of a batch that one shard holds, and their positions.
type part struct {
	sh   *shard
	reqs []algorithms.Request
	at   []int
}

// split groups the requests of a batch at positions at (nil: all) by the
// master of each one's slot.
func (s *Store) split(reqs []algorithms.Request, at []int) []part {
	var parts []part
	add := func(i int) {
		r := reqs[i]
		sh := s.cluster.shardOf(s.indexKey(r.Key.Scope, r.Key.Identifier))
		j := 0
		for j < len(parts) && parts[j].sh != sh {
			j++
		}
		if j == len(parts) {
			parts = append(parts, part{sh: sh})
		}
		parts[j].reqs = append(parts[j].reqs, r)
		parts[j].at = append(parts[j].at, i)
	}
	if at == nil {
		for i := range reqs {
			add(i)
		}
	}
	for _, i := range at {
		add(i)
	}
	return parts
}

// putBack writes ds, the decisions of the requests at positions at of a
// batch, to out at those positions.
func putBack(out []algorithms.Decision, at []int, ds []algorithms.Decision) {
	for j, i := range at {
		out[i] = ds[j]
	}
}
