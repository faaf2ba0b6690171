// Package storetest is the conformance suite of algorithms.Store: the
// decisions every store must make, step by step on a fake clock, for each
// algorithm; batches, isolation, Reset, Clear, all-or-nothing groups,
// always-counting limits; the accuracy of the sliding window and GCRA
// against an exact reference; and exact admission under concurrency across
// replicas. The memory store (package algorithms) and the Redis store
// (package redisstore) run it from their tests, through the Store
// interface alone.
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
)

// T0 is the suite's start time, aligned to every window it uses (1 s, 60 s,
// 3600 s).
var T0 = time.Unix(1_700_002_800, 0)

// Factory makes the stores of one configuration for the suite.
type Factory struct {
	// Name names the configuration in subtests. Required.
	Name string
	// New makes a fresh store deciding on the clock now, which the suite
	// moves. Required.
	New func(t *testing.T, now func() time.Time) algorithms.Store
	// Unindexed says the store's requests are all Unindexed (Unindexed
	// wraps it): Reset finds nothing, so the Reset suite skips it.
	Unindexed bool
	// Keep, when set, returns a Keeper of r's state on s: for a backend
	// that expires state on its own clock while the suite moves a fake one.
	Keep func(t *testing.T, s algorithms.Store, r algorithms.Request) Keeper
	// Sweep, when set, gives back the holds that expired on the suite's
	// clock now: for a store that sweeps them in the background (Redis),
	// so that the suite need not wait for it. Optional: a store that
	// gives them back on access (memory) needs none.
	Sweep func(t *testing.T, s algorithms.Store)
}

// Keeper holds one request's state against the backend's own expiry.
type Keeper interface {
	// Persist takes the expiry off the state, if it exists.
	Persist()
	// Exists reports whether the state exists.
	Exists() bool
}

// keepAll is the Keeper of a store whose state expires on the suite's
// clock: nothing to do, and the state exists until that clock says.
type keepAll struct{}

func (keepAll) Persist()     {}
func (keepAll) Exists() bool { return true }

func (f Factory) keeper(t *testing.T, s algorithms.Store, r algorithms.Request) Keeper {
	t.Helper()
	if f.Keep == nil {
		return keepAll{}
	}
	return f.Keep(t, s, r)
}

// Memory is the memory store's Factory.
func Memory() Factory {
	return Factory{Name: "memory", New: func(t *testing.T, now func() time.Time) algorithms.Store {
		return algorithms.NewMemoryStore(algorithms.MemoryOptions{Now: now})
	}}
}

// Run runs every per-store suite over factories, each as a subtest: the
// Contract, then GCRA's exactness and the accuracy figures.
func Run(t *testing.T, factories []Factory) {
	Contract(t, factories)
	t.Run("gcra exact", func(t *testing.T) { GCRAExact(t, factories) })
	t.Run("gcra retry after", func(t *testing.T) { GCRARetryAfter(t, factories) })
	t.Run("accuracy", func(t *testing.T) { Accuracy(t, factories) })
}

// Contract runs the decisions of every algorithm step by step, batches,
// isolation, Reset, invalid requests, all-or-nothing groups,
// always-counting limits, Clear, refunds, a key repeated in a group and holds over
// factories, each as a subtest.
func Contract(t *testing.T, factories []Factory) {
	t.Run("decisions", func(t *testing.T) { Decisions(t, factories) })
	t.Run("batch", func(t *testing.T) { Batch(t, factories) })
	t.Run("isolation", func(t *testing.T) { Isolation(t, factories) })
	t.Run("reset", func(t *testing.T) { Reset(t, factories) })
	t.Run("invalid", func(t *testing.T) { Invalid(t, factories) })
	t.Run("all or nothing", func(t *testing.T) { AllOrNothing(t, factories) })
	t.Run("always count", func(t *testing.T) { AlwaysCount(t, factories) })
	t.Run("clear", func(t *testing.T) { Clear(t, factories) })
	t.Run("refund", func(t *testing.T) { Refund(t, factories) })
	t.Run("repeated in group", func(t *testing.T) { RepeatedInGroup(t, factories) })
	t.Run("holds", func(t *testing.T) { Holds(t, factories) })
	t.Run("held", func(t *testing.T) { Held(t, factories) })
	t.Run("holds cleared", func(t *testing.T) { HoldsCleared(t, factories) })
}

// UniqueScope gives each test its own scope, so tests sharing one backend
// never see each other's state.
func UniqueScope(t testing.TB) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return t.Name() + "-" + hex.EncodeToString(b)
}

// Clock is a settable clock shared by a test and a store.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock at now.
func NewClock(now time.Time) *Clock { return &Clock{now: now} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Unindexed makes every request Unindexed and CountThenRefund, as the Envoy
// service's are: the Redis store then decides fixed and sliding windows by
// counting first (no script), and keeps no index for Reset.
func Unindexed(s algorithms.Store) algorithms.Store { return unindexedStore{s} }

type unindexedStore struct{ algorithms.Store }

func unindexed(reqs []algorithms.Request) []algorithms.Request {
	out := slices.Clone(reqs)
	for i := range out {
		out[i].Unindexed = true
		out[i].Counting = algorithms.CountThenRefund
	}
	return out
}

func (u unindexedStore) Check(ctx context.Context, reqs []algorithms.Request) ([]algorithms.Decision, error) {
	return u.Store.Check(ctx, unindexed(reqs))
}

func (u unindexedStore) Clear(ctx context.Context, reqs []algorithms.Request) (int, error) {
	return u.Store.Clear(ctx, unindexed(reqs))
}

// Unwrap returns the store Unindexed wraps, or s itself.
func Unwrap(s algorithms.Store) algorithms.Store {
	if u, ok := s.(unindexedStore); ok {
		return u.Store
	}
	return s
}
