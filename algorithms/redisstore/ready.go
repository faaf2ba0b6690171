package redisstore

import (
	"context"
	"fmt"
	"sync"
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
	if s.cluster == nil {
		err := s.single.ping(ctx)
		if err != nil {
			err = fmt.Errorf("redis: %w", err)
		}
		return map[string]error{singleName: err}
	}
	s.cluster.ready(ctx)
	masters := s.cluster.masters()
	errs := make([]error, len(masters))
	var wg sync.WaitGroup
	for i, sh := range masters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = sh.ping(ctx)
		}()
	}
	wg.Wait()
	out := make(map[string]error, len(masters))
	for i, sh := range masters {
		if errs[i] != nil {
			errs[i] = fmt.Errorf("redis master %s: %w", sh.name, errs[i])
		}
		out[sh.name] = errs[i]
	}
	return out
}
