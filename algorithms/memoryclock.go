package algorithms

import (
	"sync/atomic"
	"time"
)

// reanchorEvery is how often wallClock reads the wall clock itself.
const reanchorEvery = time.Second

// wallClock is MemoryStore's default clock: the wall clock in Unix µs, read
// for one clock call instead of time.Now's two (wall and monotonic; on a
// virtual machine's kvm-clock each costs tens of ns, a quarter of a
// decision). It reads the monotonic clock and adds the time elapsed since an
// anchor, a time.Now reading it takes again once reanchorEvery has passed.
// The two clocks run at the same rate (NTP's slewing adjusts both), so the
// result is time.Now's, less the moment between the anchor's wall and
// monotonic readings (ns, unless the thread was paused between them); a
// step of the wall clock (set by NTP or by hand) shows within
// reanchorEvery. The store keeps each shard's time from running backwards
// across a new anchor (memoryShard.at). Safe for concurrent use.
type wallClock struct {
	anchor atomic.Pointer[clockAnchor]
}

// clockAnchor is one time.Now reading: the monotonic reading it carries
// and its wall time in Unix ns.
type clockAnchor struct {
	mono   time.Time
	wallNS int64
}

// nowUS returns the wall clock in Unix µs.
func (c *wallClock) nowUS() int64 {
	if a := c.anchor.Load(); a != nil {
		if d := time.Since(a.mono); d >= 0 && d < reanchorEvery {
			return (a.wallNS + int64(d)) / 1000
		}
	}
	t := time.Now()
	a := &clockAnchor{mono: t, wallNS: t.UnixNano()}
	c.anchor.Store(a)
	return a.wallNS / 1000
}
