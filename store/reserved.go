package store

import (
	"context"
	"errors"
	"slices"
	"time"
)

// ReleaseReserved takes from its client every domain reserved names (the
// domains of the descriptor configuration, in cmd/throttle), until ctx
// ends: such a domain is the operator's, and a client's descriptor rules
// must not decide it should the configuration later drop it. It looks
// whenever the reserved domains or the clients (the cache's revision) have
// changed since its last pass that succeeded: at once, then every `every`.
// The client keeps everything else (rules, exemptions, keys, counters) and
// has no domain until the operator grants it one. A failed pass is logged
// and tried again; it returns nil when ctx ends.
func (c *Cache) ReleaseReserved(ctx context.Context, reserved func() []string, every time.Duration) error {
	t := time.NewTicker(every)
	defer t.Stop()
	var done []string
	doneRev, first := int64(0), true
	for {
		if domains, rev := reserved(), c.Revision(); first || rev != doneRev || !slices.Equal(domains, done) {
			if err := c.release(ctx, domains); err != nil {
				c.log.Warn("reserved domains: will try again", "err", err)
			} else {
				done, doneRev, first = domains, rev, false
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// release takes each of domains a client has from it, and reloads the
// cache when one did.
func (c *Cache) release(ctx context.Context, domains []string) error {
	released := false
	for _, d := range domains {
		if _, ok := c.ClientByDomain(d); !ok {
			continue
		}
		cl, err := c.db.ReleaseDomain(ctx, d)
		if errors.Is(err, ErrNotFound) {
			continue // another replica released it
		}
		if err != nil {
			return err
		}
		c.log.Warn("a client lost its Envoy domain: the descriptor configuration names it, and it is the operator's", "domain", d, "client_id", cl.ID)
		released = true
	}
	if released {
		return c.Refresh(ctx)
	}
	return nil
}
