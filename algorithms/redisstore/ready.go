package redisstore

import (
	"context"
	"fmt"
)

// singleName is how Ready names a single Redis (or Sentinel's master); a
// Cluster master is named by its address, and slots no master serves by
// "unassigned".
const singleName = "redis"

// Ready asks Redis itself whether it answers, apart from any decision, for
// readiness probes: a PING of a single Redis (Sentinel: of its master); on a
// Cluster, every master that serves slots at once, each asked whether it
// answers and serves its slots (CLUSTER INFO), from the slot table as last
// read. It counts nothing, and leaves the Guard's breakers and its evidence
// of answers alone, so asking never changes a decision. ctx bounds it.
//
// It returns every master asked, by name (singleName, a master's address,
// or "unassigned"), with nil when it answered, else why not.
func (s *Store) Ready(ctx context.Context) map[string]error {
	masters, errs := s.route.each(ctx, func(ctx context.Context, sh *master) error { return sh.ping(ctx) })
	out := make(map[string]error, len(masters))
	for i, sh := range masters {
		name, err := sh.name, errs[i]
		switch {
		case name == "": // a single Redis
			name = singleName
			if err != nil {
				err = fmt.Errorf("redis: %w", err)
			}
		case err != nil:
			err = fmt.Errorf("redis master %s: %w", name, err)
		}
		out[name] = err
	}
	return out
}
