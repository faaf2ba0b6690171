package algorithms

import (
	"sync"
	"time"
)

// t0 is aligned to every window the memory tests use.
var t0 = time.Unix(1_700_002_800, 0)

// fakeClock is a settable clock shared by a test and a store. (Package
// storetest has its own: it cannot be imported here, since it imports this
// package.)
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
