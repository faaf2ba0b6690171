package restapi

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/store"
)

// The reservations outstanding per client: the ledger that caps them
// (in Redis across replicas, or this replica's memory) and how a handler
// claims and releases places in it.

// ReservationLedger keeps each client's outstanding reservations (made,
// neither settled nor expired) by reservation id, to cap them
// (RESERVATION_MAX_OUTSTANDING_PER_CLIENT) and list them (/stats). Deps
// takes one shared by every replica (redisstore.Ledger, with REDIS_URL);
// without one, each replica keeps its own in memory.
type ReservationLedger interface {
	// Claim adds ids, each expiring after its ttl, to owner's
	// reservations, unless that would make more than most: then it adds
	// none and returns false. n is how many owner had before.
	Claim(ctx context.Context, owner string, ids []string, ttls []time.Duration, most int) (n int, ok bool, err error)
	// Release takes ids out of owner's reservations.
	Release(ctx context.Context, owner string, ids []string) error
	// List returns owner's reservations.
	List(ctx context.Context, owner string) ([]string, error)
}

// memoryLedger is a ReservationLedger of one replica's memory.
type memoryLedger struct {
	mu  sync.Mutex
	now func() time.Time
	// by owner: reservation id → expiry.
	held map[string]map[string]time.Time
}

func newMemoryLedger(now func() time.Time) *memoryLedger {
	return &memoryLedger{now: now, held: map[string]map[string]time.Time{}}
}

// live returns owner's reservations after dropping the expired ones. Call
// it with l.mu held.
func (l *memoryLedger) live(owner string) map[string]time.Time {
	now := l.now()
	m := l.held[owner]
	for id, exp := range m {
		if !exp.After(now) {
			delete(m, id)
		}
	}
	if len(m) == 0 {
		delete(l.held, owner)
		return nil
	}
	return m
}

func (l *memoryLedger) Claim(_ context.Context, owner string, ids []string, ttls []time.Duration, most int) (int, bool, error) {
	if len(ids) == 0 {
		return 0, true, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.live(owner)
	if len(m)+len(ids) > most {
		return len(m), false, nil
	}
	if m == nil {
		m = map[string]time.Time{}
		l.held[owner] = m
	}
	now := l.now()
	for i, id := range ids {
		m[id] = now.Add(ttls[i])
	}
	return len(m) - len(ids), true, nil
}

func (l *memoryLedger) Release(_ context.Context, owner string, ids []string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.held[owner]
	for _, id := range ids {
		delete(m, id)
	}
	if len(m) == 0 {
		delete(l.held, owner)
	}
	return nil
}

func (l *memoryLedger) List(_ context.Context, owner string) ([]string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.live(owner)
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	return ids, nil
}

// outstanding caps each client's outstanding reservations on a ledger.
type outstanding struct {
	ledger ReservationLedger
	max    int
}

// claim takes places for client's new reservations ids, or refuses them
// all (TOO_MANY_RESERVATIONS) when the client would pass the cap.
func (o *outstanding) claim(ctx context.Context, client string, ids []string, ttls []time.Duration) error {
	if len(ids) == 0 {
		return nil
	}
	n, ok, err := o.ledger.Claim(ctx, client, ids, ttls, o.max)
	if err != nil {
		return limiterError(err)
	}
	if !ok {
		return &apiError{http.StatusTooManyRequests, reservationErrorCodeTooManyReserved,
			fmt.Sprintf("your client has %d outstanding reservations, the most it may have (RESERVATION_MAX_OUTSTANDING_PER_CLIENT): commit or cancel some first", n)}
	}
	return nil
}

// release frees client's places of ids (settled, or never made). A
// release that fails leaves them taken until their reservations' expiry:
// the cap errs on the side of fewer reservations, never more.
func (o *outstanding) release(ctx context.Context, client string, ids ...string) {
	if len(ids) > 0 {
		_ = o.ledger.Release(context.WithoutCancel(ctx), client, ids)
	}
}

// releaseReset frees the places of client c's reservations on identifier
// (of algorithm alg; every one when alg is empty), whose holds a reset just
// took: their commit is 410 RESERVATION_RESET, and they no longer count
// against the cap.
func (o *outstanding) releaseReset(ctx context.Context, c store.Client, identifier string, alg algorithms.Algorithm) {
	ids, err := o.ledger.List(ctx, c.ID)
	if err != nil {
		return // they leave at their expiry
	}
	var gone []string
	for _, id := range ids {
		if tok, ok := decodeReservationID(c, id); ok && tok.Identifier == identifier && (alg == "" || tok.Algorithm == string(alg)) {
			gone = append(gone, id)
		}
	}
	o.release(ctx, c.ID, gone...)
}
