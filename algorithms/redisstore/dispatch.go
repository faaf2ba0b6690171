package redisstore

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
)

// dispatch decides a validated, non-empty batch: each part on its master by
// p.onMaster, the parts at once. A part whose master answered a redirect (a slot
// moved: failover, resharding) did not run; it is routed again on a fresh
// slot table and sent once more. (What the parts counted for an
// all-or-nothing group another part voided is the caller's to take back:
// refundVoided.)
func (r *router) dispatch(ctx context.Context, reqs []algorithms.Request, p *checkPath) ([]algorithms.Decision, error) {
	r.ready(ctx)
	var out []algorithms.Decision
	var at []int // the positions still to decide; nil: all
	for attempt := 0; ; attempt++ {
		last := attempt > 0
		sent := time.Now()
		if one := r.topo.Load().one; one != nil {
			// A single Redis: no part to make, no redirect to follow.
			return p.onMaster(ctx, one, reqs, true)
		}
		if parts := r.split(reqs, at); len(parts) == 1 && at == nil {
			ds, err := p.onMaster(ctx, parts[0].sh, reqs, last)
			if last || !isRedirect(err) {
				return ds, err
			}
		} else {
			if out == nil {
				out = make([]algorithms.Decision, len(reqs))
			}
			errs := onParts(ctx, parts, p, last, out)
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
				return out, nil
			}
		}
		if at == nil {
			at = make([]int, len(reqs))
			for i := range at {
				at[i] = i
			}
		}
		r.refresh(ctx, sent)
	}
}

// onParts decides each part on its master (p.onMaster), all at once, writes the decisions
// into out at their positions, and returns each part's error.
func onParts(ctx context.Context, parts []part, p *checkPath, last bool, out []algorithms.Decision) []error {
	errs := make([]error, len(parts))
	run := func(i int) {
		ds, err := p.onMaster(ctx, parts[i].sh, parts[i].reqs, last)
		if err != nil {
			errs[i] = err
			return
		}
		putBack(out, parts[i].at, ds)
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

// part is the requests of a batch that one master holds, and their positions.
type part struct {
	sh   *master
	reqs []algorithms.Request
	at   []int
}

// split groups the requests of a batch at positions at (nil: all) by the
// master of each one's slot.
func (r *router) split(reqs []algorithms.Request, at []int) []part {
	var parts []part
	add := func(i int) {
		req := reqs[i]
		sh := r.masterOfRequest(&req)
		j := 0
		for j < len(parts) && parts[j].sh != sh {
			j++
		}
		if j == len(parts) {
			parts = append(parts, part{sh: sh})
		}
		parts[j].reqs = append(parts[j].reqs, req)
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
