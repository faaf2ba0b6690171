package redisstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// plainNow is the time of a plain batch in µs: Options.Now in tests,
// else Redis's clock as the master's offset from the local clock says —
// asked first (one round trip) when the master has none yet.
func (s *Store) plainNow(ctx context.Context, sh *master) (int64, error) {
	if s.now != nil {
		return s.now().UnixMicro(), nil
	}
	if now, ok := sh.clock.now(); ok {
		return now, nil
	}
	sent := time.Now()
	t, err := sh.client.Time(ctx).Result()
	if err != nil {
		return 0, fmt.Errorf("redis: %w", err)
	}
	sh.clock.sample(sent, time.Now(), t)
	now, _ := sh.clock.now()
	return now, nil
}

// redisClock keeps a Redis master's clock as an offset from the local one,
// from samples of Redis TIME: each one was taken between the moment its
// call was sent and the moment its reply came, so the sample of the
// shortest round trip is the most exact. The best sample is kept, and
// replaced by any better one, or by the next one once it is a second old
// (clocks drift, and may be stepped). It is the one place a clock offset
// is kept: each master's (master.clock, for plain batches) and the
// approximate table's (approxTable.clock, for its windows).
type redisClock struct {
	offsetUS atomic.Int64 // Redis's time minus the local time, read without the lock
	known    atomic.Bool  // a sample was taken
	mu       sync.Mutex   // orders samples
	spreadUS int64        // the kept sample's round trip: its uncertainty
	at       time.Time    // when it was taken; zero: no sample
}

// sample takes Redis's time t, asked between sent and got (local time).
func (c *redisClock) sample(sent, got, t time.Time) {
	if t.IsZero() {
		return
	}
	spread := got.Sub(sent).Microseconds()
	mid := sent.Add(got.Sub(sent) / 2)
	c.mu.Lock()
	if c.at.IsZero() || spread <= c.spreadUS || got.Sub(c.at) > time.Second {
		c.spreadUS, c.at = spread, got
		c.offsetUS.Store(t.UnixMicro() - mid.UnixMicro())
		c.known.Store(true)
	}
	c.mu.Unlock()
}

// offset is Redis's time minus the local time in µs, 0 without a sample.
func (c *redisClock) offset() int64 { return c.offsetUS.Load() }

// now returns Redis's time now in µs, false without a sample.
func (c *redisClock) now() (int64, bool) {
	return time.Now().UnixMicro() + c.offsetUS.Load(), c.known.Load()
}
