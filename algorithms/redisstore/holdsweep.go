package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Held quota: the sweepers' metrics (holds that expired, hits held) and
// each store's sweeper, which gives back the holds that expired in Redis,
// whoever made them.

// holdMetrics are the sweeper's metrics.
type holdMetrics struct {
	mu    sync.Mutex // guards swept and gauge: register swaps them while the sweeper runs
	swept prometheus.Counter
	gauge *heldGauge
	held  atomic.Int64 // hits held, as the last sweep read them
}

// expired counts n holds the sweeper gave back.
func (m *holdMetrics) expired(n int) {
	m.mu.Lock()
	c := m.swept
	m.mu.Unlock()
	c.Add(float64(n))
}

func newHoldMetrics() *holdMetrics {
	return &holdMetrics{swept: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "throttle_reservations_expired_total",
		Help: "Holds (reservations) that expired unsettled and that this replica's sweeper gave back in Redis, whoever made them.",
	}), gauge: &heldGauge{desc: prometheus.NewDesc("throttle_reservations_held_hits",
		"Hits held by unexpired, unsettled holds (reservations): in Redis, over every master that answered (and every Redis of the process: REDIS_URL, REDIS_PERSECOND, GLOBAL_REDIS_URL), as this replica's sweepers last read them; in memory, now.", nil, nil)}}
}

// register registers the metrics on reg. A second store of the process
// (REDIS_PERSECOND, GLOBAL_REDIS_URL) adds to the first's counter, and
// its holds to the first's gauge.
func (m *holdMetrics) register(reg prometheus.Registerer) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var errs [2]error
	m.swept, errs[0] = register(reg, m.swept)
	m.gauge, errs[1] = register(reg, m.gauge)
	if err := errors.Join(errs[:]...); err != nil {
		return fmt.Errorf("register hold metrics: %w", err)
	}
	m.gauge.join(m)
	return nil
}

// heldGauge is throttle_reservations_held_hits: the holds of every store
// registered on one registry, summed at scrape time.
type heldGauge struct {
	desc   *prometheus.Desc
	mu     sync.Mutex
	stores []*holdMetrics
}

// join adds m's holds to the sum, once.
func (g *heldGauge) join(m *holdMetrics) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !slices.Contains(g.stores, m) {
		g.stores = append(g.stores, m)
	}
}

// Describe is prometheus.Collector's.
func (g *heldGauge) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

// Collect is prometheus.Collector's.
func (g *heldGauge) Collect(ch chan<- prometheus.Metric) {
	g.mu.Lock()
	var sum int64
	for _, m := range g.stores {
		sum += m.held.Load()
	}
	g.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, float64(sum))
}

// runSweeper sweeps expired holds every every until stop is closed, each
// sweep within a deadline of every.
func (s *Store) runSweeper(every time.Duration, stop, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), every)
		expired, held, err := s.SweepHolds(ctx)
		cancel()
		s.holdMetrics.expired(expired)
		if err == nil {
			s.holdMetrics.held.Store(held)
		}
	}
}

// SweepHolds gives back the holds that expired, on every master at once,
// and returns how many it gave back and how many hits are still held. A
// master that fails does not stop the others; the error joins theirs.
func (s *Store) SweepHolds(ctx context.Context) (expired int, held int64, err error) {
	var mu sync.Mutex
	_, errs := s.route.each(ctx, func(ctx context.Context, sh *master) error {
		if sh.client == nil {
			return errNoMaster
		}
		keys, args := s.route.pack(s.holdIndexesOf(sh), []any{s.nowArg(), strconv.Itoa(holdSweepBatch), ""}, 2)
		if len(keys) == 0 {
			return nil
		}
		res, err := s.runFn(ctx, sh, s.sweepFn, keys, args).Int64Slice()
		if err != nil {
			return fmt.Errorf("redis: sweep holds on %q: %w", sh.name, err)
		}
		mu.Lock()
		expired += int(res[0])
		held += res[1]
		mu.Unlock()
		return nil
	})
	return expired, held, errors.Join(errs...)
}
