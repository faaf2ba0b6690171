package restapi

import (
	"context"
	"errors"
	"sync"
	"time"
)

// errIdempotencyFull is a reply not kept: all clients' kept replies hold
// IdempotencyQuota.TotalBytes already.
var errIdempotencyFull = errors.New("idempotency: the replies of all clients take IDEMPOTENCY_MAX_BYTES_TOTAL; reply not kept")

// memoryIdempotency is the IdempotencyStore of one replica: a map whose
// expired entries are swept as it grows, and per client the records it
// keeps, oldest first, so a client over its quota loses its oldest.
type memoryIdempotency struct {
	now   func() time.Time
	quota IdempotencyQuota

	mu        sync.Mutex
	m         map[idemKey]memoryRecord
	clients   map[string]*memoryQuota
	total     int64 // bytes of every client's kept replies
	seq       uint64
	sweepSize int // sweep when the map reaches it
}

type memoryRecord struct {
	value   []byte
	expires time.Time
	seq     uint64 // > 0: a kept reply, counted in its client's quota
}

// memoryQuota is what one client keeps: its kept replies in the order
// they were put (entries whose record changed since are skipped), their
// number and bytes.
type memoryQuota struct {
	order   []queued
	records int
	bytes   int64
}

type queued struct {
	key  string
	seq  uint64
	size int64
}

func newMemoryIdempotency(now func() time.Time, q IdempotencyQuota) *memoryIdempotency {
	return &memoryIdempotency{now: now, quota: q, m: map[idemKey]memoryRecord{}, clients: map[string]*memoryQuota{}, sweepSize: 1024}
}

func (s *memoryIdempotency) Claim(_ context.Context, client, key string, pending []byte, ttl time.Duration) (bool, []byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	k := idemKey{client, key}
	if r, ok := s.m[k]; ok && now.Before(r.expires) {
		return false, r.value, nil
	}
	s.put(k, memoryRecord{value: pending, expires: now.Add(ttl)})
	return true, nil, nil
}

func (s *memoryIdempotency) Put(_ context.Context, client, key string, value []byte, ttl time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	k := idemKey{client, key}
	s.put(k, memoryRecord{value: value, expires: s.now().Add(ttl), seq: s.seq})
	q := s.clients[client]
	if q == nil {
		q = &memoryQuota{}
		s.clients[client] = q
	}
	q.order = append(q.order, queued{key: key, seq: s.seq, size: int64(len(value))})
	q.records++
	q.bytes += int64(len(value))
	s.total += int64(len(value))
	s.evict(client, q)
	if s.quota.TotalBytes > 0 && s.total > s.quota.TotalBytes {
		s.remove(k) // the others' replies stay: no client evicts another's
		return errIdempotencyFull
	}
	return nil
}

func (s *memoryIdempotency) Release(_ context.Context, client, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.remove(idemKey{client, key})
	return nil
}

// evict removes the client's oldest kept replies while it has more than
// its quota allows. Call it with mu held.
func (s *memoryIdempotency) evict(client string, q *memoryQuota) {
	for len(q.order) > 0 && ((s.quota.Records > 0 && q.records > s.quota.Records) || (s.quota.Bytes > 0 && q.bytes > s.quota.Bytes)) {
		head := q.order[0]
		q.order = q.order[1:]
		k := idemKey{client, head.key}
		if r, ok := s.m[k]; ok && r.seq == head.seq {
			s.remove(k)
		}
	}
	if len(q.order) > 2*q.records+16 { // drop the entries of records gone since
		live := q.order[:0]
		for _, e := range q.order {
			if r, ok := s.m[idemKey{client, e.key}]; ok && r.seq == e.seq {
				live = append(live, e)
			}
		}
		q.order = live
	}
}

// put stores a record in place of what key held, first sweeping the
// expired ones when the map has doubled since the last sweep. Call it with
// mu held.
func (s *memoryIdempotency) put(k idemKey, r memoryRecord) {
	s.remove(k)
	if len(s.m) >= s.sweepSize {
		now := s.now()
		for k, r := range s.m {
			if !now.Before(r.expires) {
				s.remove(k)
			}
		}
		s.sweepSize = max(1024, 2*len(s.m))
	}
	s.m[k] = r
}

// remove deletes a record, and takes a kept reply out of its client's
// count. Call it with mu held.
func (s *memoryIdempotency) remove(k idemKey) {
	r, ok := s.m[k]
	if !ok {
		return
	}
	delete(s.m, k)
	if q := s.clients[k.client]; q != nil && r.seq > 0 {
		q.records--
		q.bytes -= int64(len(r.value))
		s.total -= int64(len(r.value))
		if q.records == 0 {
			delete(s.clients, k.client)
		}
	}
}
