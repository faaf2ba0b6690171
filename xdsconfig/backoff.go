package xdsconfig

import (
	"errors"
	"math/rand/v2"
	"time"
)

// Backoff is how long the client waits before it connects again after the
// control plane could not be reached or the stream ended: Initial, then
// twice as long after each failed attempt, up to Max; with Jitter, each
// wait is drawn at random within RandomFactor of it (0.5: between half and
// one and a half times it), never above Max. A stream that worked starts
// the waits over at Initial.
type Backoff struct {
	Initial, Max time.Duration
	// RandomFactor is between 0 and 1.
	RandomFactor float64
	Jitter       bool
}

// validate checks b.
func (b Backoff) validate() error {
	switch {
	case b.Initial <= 0:
		return errors.New("backoff: the initial interval must be positive")
	case b.Max < b.Initial:
		return errors.New("backoff: the maximum interval must be at least the initial one")
	case b.RandomFactor < 0 || b.RandomFactor > 1:
		return errors.New("backoff: the random factor must be between 0 and 1")
	}
	return nil
}

// backoff counts the failed attempts in a row and says how long to wait
// before the next one.
type backoff struct {
	Backoff
	failures int
	rand     func() float64 // [0, 1)
}

func newBackoff(b Backoff) *backoff { return &backoff{Backoff: b, rand: rand.Float64} }

// next returns the wait after one more failed attempt.
func (b *backoff) next() time.Duration {
	d := b.Initial
	for i := 0; i < b.failures && d < b.Max; i++ {
		d *= 2
	}
	d = min(d, b.Max)
	b.failures++
	if b.Jitter && b.RandomFactor > 0 {
		d = time.Duration(float64(d) * (1 + b.RandomFactor*(2*b.rand()-1)))
	}
	return min(d, b.Max)
}

// reset starts the waits over, after a stream that worked.
func (b *backoff) reset() { b.failures = 0 }
