package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// singleName is how Ready names a single Redis (or Sentinel's master) that
// does not answer; a Cluster master is named by its address, and slots no
// master serves by "unassigned".
const singleName = "redis"

// Ready asks Redis itself whether it answers, apart from any decision, for
// readiness probes: a PING of a single Redis (Sentinel: of its master); on a
// Cluster, every master that serves slots at once, each asked whether it
// answers and serves its slots (CLUSTER INFO), from the slot table as last
// read. It counts nothing, and leaves the Guard's breakers and its evidence
// of answers alone, so asking never changes a decision. ctx bounds it.
//
// down names what does not answer, in slot-table order (singleName, a
// master's address, or "unassigned"); err says why, for the log.
func (s *Store) Ready(ctx context.Context) (down []string, err error) {
	if s.cluster == nil {
		if err := s.single.ping(ctx); err != nil {
			return []string{singleName}, fmt.Errorf("redis: %w", err)
		}
		return nil, nil
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
	for i, e := range errs {
		if e != nil {
			down = append(down, masters[i].name)
			errs[i] = fmt.Errorf("redis master %s: %w", masters[i].name, e)
		}
	}
	return down, errors.Join(errs...)
}
