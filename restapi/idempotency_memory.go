package restapi

import (
	"context"
	"sync"
	"time"
)

// memoryIdempotency is the IdempotencyStore of one replica: a map whose
// expired entries are swept as it grows.
type memoryIdempotency struct {
	now func() time.Time

	mu        sync.Mutex
	m         map[string]memoryRecord
	sweepSize int // sweep when the map reaches it
}

type memoryRecord struct {
	value   []byte
	expires time.Time
}

func newMemoryIdempotency(now func() time.Time) *memoryIdempotency {
	return &memoryIdempotency{now: now, m: map[string]memoryRecord{}, sweepSize: 1024}
}

func (s *memoryIdempotency) Claim(_ context.Context, key string, pending []byte, ttl time.Duration) (bool, []byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if r, ok := s.m[key]; ok && now.Before(r.expires) {
		return false, r.value, nil
	}
	s.put(key, pending, now.Add(ttl))
	return true, nil, nil
}

func (s *memoryIdempotency) Put(_ context.Context, key string, value []byte, ttl time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.put(key, value, s.now().Add(ttl))
	return nil
}

func (s *memoryIdempotency) Release(_ context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, key)
	return nil
}

// put stores a record, first sweeping the expired ones when the map has
// doubled since the last sweep. Call it with mu held.
func (s *memoryIdempotency) put(key string, value []byte, expires time.Time) {
	if len(s.m) >= s.sweepSize {
		now := s.now()
		for k, r := range s.m {
			if !now.Before(r.expires) {
				delete(s.m, k)
			}
		}
		s.sweepSize = max(1024, 2*len(s.m))
	}
	s.m[key] = memoryRecord{value: value, expires: expires}
}
