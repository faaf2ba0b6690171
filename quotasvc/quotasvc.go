// Package quotasvc is Envoy's rate-limit quota service (RLQS),
// envoy.service.rate_limit_quota.v3.RateLimitQuotaService: Envoys (and
// proxyless gRPC servers) report the usage of their buckets every interval;
// Throttle maps each bucket to a limit of the descriptor configuration (YAML,
// REST rules), and assigns every instance a share of it, as a token bucket,
// so that all instances on all replicas together keep the limit. Usage is
// shared through Redis (memory on one node). docs/rlqs.md describes the
// protocol as served, the bucket mapping, the split and the failures. Proto
// types stay in this package.
package quotasvc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/descriptors"
	"github.com/throttle-rl/throttle/internal/ruledomain"
)

// Options configures a Server.
type Options struct {
	// Descriptors returns the current YAML configuration; optional (nil
	// means no YAML domains). A nil Config means it has not loaded yet: a
	// stream for a domain no REST client owns fails UNAVAILABLE.
	Descriptors func() *descriptors.Config
	// Rules gives the REST clients' descriptor rules; optional.
	Rules ruledomain.Source
	// Redis, when set, is where every replica shares demands and
	// allocations; nil keeps them in this process (one node).
	Redis redis.UniversalClient
	// KeyPrefix goes before every Redis key (CACHE_KEY_PREFIX), as before
	// the rate-limit counters'.
	KeyPrefix string
	// Interval is how often shares are reassigned, aligned to the clock
	// (every replica reassigns at the same instants). Default 1s. Envoy's
	// reporting_interval should be a third of it.
	Interval time.Duration
	// FailureMode says what is assigned when Redis fails and the last
	// known shares are older than LastKnown (or none are known): open
	// (allow all, the default), closed (deny all) or local (this replica's
	// instances split the whole limit).
	FailureMode algorithms.FailureMode
	// LastKnown is how long the last split Redis gave is used while Redis
	// fails, before FailureMode decides. Default 1 minute.
	LastKnown time.Duration
	// IdleAbandon is how long a bucket may report no requests before the
	// instance is told to abandon it. Default 10 minutes.
	IdleAbandon time.Duration
	// ShadowMode (SHADOW_MODE) assigns every bucket allow-all, while
	// everything else goes on: buckets map to their limits, usage is
	// reported, demands are shared and the split computed, and metrics
	// count it all; only what is sent is allow-all. Optional; default off.
	ShadowMode bool
	// Log is required.
	Log *slog.Logger
	// Registerer receives the metrics; optional.
	Registerer prometheus.Registerer
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Server implements RateLimitQuotaService.
type Server struct {
	rlqsv3.UnimplementedRateLimitQuotaServiceServer

	opts    Options
	ttl     time.Duration // assignment_time_to_live: whole seconds
	timeout time.Duration // budget of one usage-store call
	rules   *ruledomain.Cache
	usage   usageStore
	metrics *metrics
	replica string        // this process, in instance ids
	seq     atomic.Uint64 // instance ids
	// degraded is set while the usage store fails: reports do not wait on
	// it, the next reassignment tries again.
	degraded atomic.Bool

	stopOnce sync.Once
	stopping chan struct{} // closed by Stop: every stream ends

	mu      sync.Mutex
	streams map[*stream]struct{}
	groups  map[string]*group // group key → this replica's buckets sharing that limit
}

// New returns a Server. Run reassigns shares; Stop ends the streams.
func New(opts Options) (*Server, error) {
	if opts.Log == nil {
		return nil, errors.New("quotasvc: Log is required")
	}
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	if opts.FailureMode == "" {
		opts.FailureMode = algorithms.FailOpen
	}
	if opts.LastKnown <= 0 {
		opts.LastKnown = time.Minute
	}
	if opts.IdleAbandon <= 0 {
		opts.IdleAbandon = 10 * time.Minute
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	var id [6]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, err
	}
	s := &Server{
		opts: opts,
		// Three intervals, in whole seconds (Envoy reads only the seconds):
		// an instance keeps its share through two missed reassignments.
		ttl:      time.Duration(max(math.Ceil(3*opts.Interval.Seconds()), 1)) * time.Second,
		timeout:  min(opts.Interval, time.Second),
		rules:    ruledomain.New(opts.Rules, opts.Log),
		metrics:  m,
		replica:  hex.EncodeToString(id[:]),
		stopping: make(chan struct{}),
		streams:  map[*stream]struct{}{},
		groups:   map[string]*group{},
	}
	// A demand outlives the assignments made from it: an instance keeps its
	// share in the split for as long as it may still enforce it, even when
	// its stream ended (its Envoy reconnecting elsewhere).
	entryTTL := s.ttl + opts.Interval
	allocTTL := 3 * opts.Interval
	if opts.Redis != nil {
		s.usage = newRedisUsage(opts.Redis, entryTTL, allocTTL)
	} else {
		s.usage = newMemoryUsage(opts.Now, entryTTL, allocTTL)
	}
	return s, nil
}

// Register adds the service to g and marks it SERVING in h (optional).
func (s *Server) Register(g *grpc.Server, h *health.Server) {
	rlqsv3.RegisterRateLimitQuotaServiceServer(g, s)
	if h != nil {
		h.SetServingStatus(rlqsv3.RateLimitQuotaService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	}
}

// Stop ends every stream, and refuses new ones, with UNAVAILABLE: a gRPC
// server's GracefulStop waits for streams, which an RLQS client never ends.
// Instances keep their assignments until they expire, and reconnect (to
// any replica) at their next report, which replaces them. Their demands
// are kept for one more interval only, not until their assignments could
// expire: the other replicas count them again once they have reconnected.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		s.release()
		close(s.stopping)
	})
}

// release shortens the life of this replica's demands to one interval.
func (s *Server) release() {
	s.mu.Lock()
	var ds []demandWrite
	for _, g := range s.groups {
		for b := range g.subs {
			ds = append(ds, demandWrite{group: g.key, demand: demand{instance: b.instance, rate: b.rate}})
		}
	}
	s.mu.Unlock()
	if len(ds) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	if err := s.usage.write(ctx, ds, s.opts.Interval); err != nil {
		s.metrics.storeErrors.WithLabelValues("write").Inc()
	}
}

// Run reassigns every bucket's share at each multiple of Interval until ctx
// ends or Stop is called.
func (s *Server) Run(ctx context.Context) error {
	t := time.NewTimer(s.untilNextEpoch())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.stopping:
			// Streams are ending: no reassignment would reach them, and
			// one would keep their released demands alive.
			return nil
		case <-t.C:
		}
		now := s.opts.Now()
		s.assign(ctx, s.epoch(now), now)
		t.Reset(s.untilNextEpoch())
	}
}

// epoch numbers the reassignment nearest to now: now / Interval, rounded.
func (s *Server) epoch(now time.Time) int64 {
	iv := int64(s.opts.Interval)
	return (now.UnixNano() + iv/2) / iv
}

// untilNextEpoch is the time to the next multiple of Interval, skipping one
// that is less than a tenth of an interval away (this one was just done).
func (s *Server) untilNextEpoch() time.Duration {
	iv := s.opts.Interval
	d := iv - time.Duration(s.opts.Now().UnixNano()%int64(iv))
	if d < iv/10 {
		d += iv
	}
	return d
}

// newInstanceID names one (stream, bucket): the unit that gets a share.
// Replica ids are random, so ids never repeat across replicas or restarts.
func (s *Server) newInstanceID() string {
	return s.replica + "-" + strconv.FormatUint(s.seq.Add(1), 36)
}
