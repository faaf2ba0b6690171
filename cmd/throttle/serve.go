package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/algorithms/redisstore/overlimit"
	"github.com/throttle-rl/throttle/descriptors"
	"github.com/throttle-rl/throttle/internal/tlsreload"
	"github.com/throttle-rl/throttle/quotasvc"
	"github.com/throttle-rl/throttle/ratelimitsvc"
	"github.com/throttle-rl/throttle/refstats"
	"github.com/throttle-rl/throttle/restapi"
	"github.com/throttle-rl/throttle/store"
)

// serve runs Throttle until ctx ends (SIGTERM), then drains in-flight
// requests within ShutdownTimeout. It reads as its parts: each open* makes
// one and registers how it is closed; close undoes them in reverse order.
func serve(ctx context.Context, cfg *config, logOut io.Writer) error {
	a, err := newApp(cfg, logOut)
	if err != nil {
		return err
	}
	defer a.close()
	for _, open := range []func(context.Context) error{
		a.openTLS,         // certificate files of the listeners and Redis, re-read on change
		a.openStore,       // clients, rules, exemptions; their cache; usage
		a.openTracing,     // OpenTelemetry, when an endpoint is set
		a.openStatsSink,   // the reference service's stats sink: statsd, DogStatsD or Prometheus, when set
		a.openCounters,    // memory, or Redis behind the failure policy
		a.openDescriptors, // DESCRIPTORS_DIR, reloaded on change
		a.openXDS,         // CONFIG_TYPE=GRPC_XDS_SOTW: the control plane's domains over the files'
		a.openIdempotency, // Idempotency-Key replies in Redis, with REDIS_URL
		a.openTenancy,     // the domains the descriptor configuration names taken from clients
		a.openAPIs,        // the Envoy gRPC services and the REST handler
		a.listen,          // every port bound before any is served
	} {
		if err := open(ctx); err != nil {
			if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
				return nil // told to stop (SIGTERM) while a step waited
			}
			return err
		}
	}
	return a.serve(ctx)
}

// app is one `throttle serve`: its parts, and how to close them.
type app struct {
	cfg *config
	log *slog.Logger
	// metrics gathers every metric; reg registers them, each labelled
	// region=REGION when REGION is set.
	metrics *prometheus.Registry
	reg     prometheus.Registerer

	// closers undo what the open* steps did, run last to first by close.
	// They are the one way anything stops: a background task's closer
	// (goBG) ends it and waits for it, so it stops before what it uses
	// closes.
	closers []func()

	db         *store.DB
	cache      *store.Cache
	usage      *store.UsageRecorder
	tracer     trace.TracerProvider // nil: tracing off, in every package
	propagator propagation.TextMapPropagator
	limiter    algorithms.Store
	backend    string // "memory" or "redis"
	// ready asks Redis itself whether it answers, for /ready; nil: memory.
	ready      func(context.Context) map[string]error
	current    func() *descriptors.Config
	descStatus func(string) restapi.DescriptorStatus
	grpcSrv    *grpc.Server
	health     *health.Server
	quota      *quotasvc.Server
	httpSrv    *http.Server
	httpLis    net.Listener
	grpcLis    net.Listener
	// TLS material of the listeners; nil: plaintext.
	grpcTLS, httpTLS *tlsreload.Reloader
	// redisTLS makes the TLS configuration of a rediss:// host from
	// REDIS_TLS_*; nil: go-redis's own.
	redisTLS func(serverName string) *tls.Config
	// xdsTLS is the TLS to the xDS control plane; nil: plaintext.
	xdsTLS *tls.Config

	// idempotency keeps Idempotency-Key replies; nil: the REST API's memory.
	idempotency restapi.IdempotencyStore
	// ledger keeps each client's outstanding reservations; nil: the REST
	// API's memory (per replica).
	ledger restapi.ReservationLedger

	// refStats are the reference service's stats (its stats sink); nil:
	// off. statsSinkSrv serves them on PROMETHEUS_ADDR with USE_PROMETHEUS.
	refStats     *refstats.Stats
	statsSinkSrv *http.Server
}

func newApp(cfg *config, logOut io.Writer) (*app, error) {
	a := &app{cfg: cfg, log: newLogger(cfg, logOut), metrics: prometheus.NewRegistry()}
	a.reg = a.metrics
	if cfg.Region != "" {
		a.reg = prometheus.WrapRegistererWith(prometheus.Labels{"region": cfg.Region}, a.metrics)
	}
	if cfg.GCPercent > 0 {
		// The collector's target is the process's; serve is the process.
		debug.SetGCPercent(cfg.GCPercent)
	}
	for _, c := range []prometheus.Collector{collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		if err := a.reg.Register(c); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// onClose registers f to run at close, before everything registered
// earlier.
func (a *app) onClose(f func()) { a.closers = append(a.closers, f) }

// close runs the closers, last registered first.
func (a *app) close() {
	for i := len(a.closers) - 1; i >= 0; i-- {
		a.closers[i]()
	}
}

// goBG runs f in the background until close, whose closer ends it (its
// context) and waits for it before anything registered earlier closes.
func (a *app) goBG(name string, f func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := f(ctx); err != nil {
			a.log.Error("background task stopped", "task", name, "err", err)
		}
	}()
	a.onClose(func() { cancel(); <-done })
}

// serveUntil serves srv on l until ctx ends, then stops it with stop
// (srv.Close, or srv.Shutdown within a deadline) and waits for Serve to
// return. failed is Serve's error when it returned before ctx ended;
// otherwise err is stop's error, or Serve's when it returned something
// other than http.ErrServerClosed.
func serveUntil(ctx context.Context, srv *http.Server, l net.Listener, stop func() error) (failed, err error) {
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	select {
	case err := <-done:
		return err, nil
	case <-ctx.Done():
	}
	err = stop()
	if serr := <-done; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return nil, err
}

// openAPIs builds the gRPC server (Envoy's rate-limit and rate-limit quota
// services, gRPC health) and the REST handler.
func (a *app) openAPIs(context.Context) error {
	cfg := a.cfg
	// The Envoy path rejects known over-limit descriptors without Redis.
	// Only there: its counters are scoped by domain, which no REST /reset
	// touches; the Envoy counters reset (…/counters/reset) clears this
	// replica's entries, another replica's expire when Redis said the
	// request could pass.
	rlsLimiter := a.limiter
	if a.backend == "redis" && cfg.LocalCacheBytes > 0 {
		var err error
		if rlsLimiter, err = overlimit.New(a.limiter, overlimit.Options{MaxBytes: cfg.LocalCacheBytes, Registerer: a.reg}); err != nil {
			return err
		}
	}
	rls, err := ratelimitsvc.New(ratelimitsvc.Options{
		Limiter: rlsLimiter, Descriptors: a.current, Rules: a.cache, ResponseHeaders: cfg.ResponseHeaders, HeaderSets: cfg.HeaderSets,
		ShadowMode: cfg.ShadowMode, DynamicMetadata: cfg.DynamicMetadata, MaxValueStatsKeys: maxValueKeys(cfg.MaxValueStatsKeys),
		MaxDescriptors: cfg.MaxDescriptors, MaxDescriptorEntries: cfg.MaxDescriptorEntries, MaxOverrideWindow: cfg.MaxOverrideWindow, CountRejectedHits: cfg.CountRejectedHits, NearLimitRatio: cfg.NearLimitRatio,
		LimitHeaders: cfg.limitHeaders(), MaxConnectionAge: cfg.Listen.MaxConnAge, MaxConnectionAgeGrace: cfg.Listen.MaxConnAgeGrace,
		Log: a.log, Registerer: a.reg, TracerProvider: a.tracer, Propagator: a.propagator, ReferenceStats: a.referenceStats(),
	})
	if err != nil {
		return err
	}
	var grpcOpts []grpc.ServerOption
	if a.grpcTLS != nil {
		grpcOpts = append(grpcOpts, grpc.Creds(a.grpcTLS.GRPCCredentials()))
	}
	a.grpcSrv, a.health = ratelimitsvc.NewGRPCServer(rls, grpcOpts...)
	// Envoy's rate-limit quota service (RLQS), on the same port.
	if a.quota, err = a.newQuota(); err != nil {
		return err
	}
	a.quota.Register(a.grpcSrv, a.health)
	envoyJSON, configDump, metrics := a.restDoors(rls) // the pages PORT serves without a key (rest.go)
	handler := restapi.NewHandler(a.withTenancy(a.withRESTApps(restapi.Deps{
		Log: a.log, DB: a.db, Cache: a.cache, Usage: a.usage, Limiter: a.limiter, Registerer: a.reg, Gatherer: metrics,
		TrustedProxies: cfg.TrustedProxies, ConfigDump: configDump, HeaderSets: cfg.HeaderSets, TracerProvider: a.tracer, Propagator: a.propagator,
		RegisterLimit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: cfg.RegisterLimit, Window: time.Hour},
		Descriptors:   a.descStatus, EnvoyCounters: rls, AdminKey: cfg.AdminKey, LimiterReady: a.ready, FailureMode: cfg.FailureMode,
		EnvoyJSON: envoyJSON, Healthcheck: a.healthcheck(), MaxReservationTTL: cfg.MaxReservationTTL, GlobalScope: cfg.GlobalScope(),
	})))
	a.httpSrv = restapi.NewServer(cfg.httpAddress(), handler)
	if a.httpTLS != nil {
		a.httpSrv.TLSConfig, a.httpSrv.ErrorLog = a.httpTLS.ServerConfig(), a.httpTLS.HTTPErrorLog(a.log)
	}
	return nil
}

// serve serves REST and gRPC until ctx ends or a server fails, then drains
// both (shutdown).
func (a *app) serve(ctx context.Context) error {
	a.log.Info("throttle serving", "version", version, "rest", a.httpLis.Addr().String(), "grpc", a.grpcLis.Addr().String(),
		"counters", a.backend, "database", a.db.Dialect(), "failure_mode", string(a.cfg.FailureMode),
		"tracing", a.cfg.Tracing.String(), "grpc_tls", describeTLS(a.grpcTLS != nil, a.cfg.TLS.GRPCClientCA),
		"rest_tls", describeTLS(a.httpTLS != nil, a.cfg.TLS.HTTPClientCA), "global_limits", a.cfg.GlobalScope(), "region", a.cfg.Region)
	if names := a.cfg.Inert; len(names) > 0 {
		a.log.Warn("settings of envoyproxy/ratelimit that have no meaning in Throttle are ignored (docs/moving-from-envoy-ratelimit.md says why)", "settings", names)
	}
	errc := make(chan error, 2)
	serveHTTP := a.httpSrv.Serve
	if a.httpTLS != nil {
		serveHTTP = func(l net.Listener) error { return a.httpSrv.ServeTLS(l, "", "") }
	}
	go func() {
		if err := serveHTTP(a.httpLis); !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("REST server: %w", err)
		}
	}()
	go func() {
		if err := a.grpcSrv.Serve(a.grpcLis); err != nil {
			errc <- fmt.Errorf("gRPC server: %w", err)
		}
	}()
	var serveErr error
	select {
	case <-ctx.Done():
		a.log.Info("shutting down: draining in-flight requests", "timeout", a.cfg.ShutdownTimeout.String())
	case serveErr = <-errc:
		a.log.Error("server failed; shutting down", "err", serveErr)
	}
	a.shutdown()
	a.log.Info("stopped")
	return serveErr
}

// shutdown tells Envoy to stop sending (gRPC health NOT_SERVING), then
// drains REST and gRPC together within ShutdownTimeout, and closes what is
// left open after it.
func (a *app) shutdown() {
	a.health.Shutdown()
	a.quota.Stop() // RLQS streams end (GracefulStop would wait for them); Envoys reconnect elsewhere
	shutCtx, cancel := context.WithTimeout(context.Background(), a.cfg.ShutdownTimeout)
	defer cancel()
	var sd sync.WaitGroup
	sd.Add(2)
	go func() {
		defer sd.Done()
		if err := a.httpSrv.Shutdown(shutCtx); err != nil {
			a.log.Warn("REST shutdown deadline passed; closing connections", "err", err)
			a.httpSrv.Close()
		}
	}()
	go func() {
		defer sd.Done()
		done := make(chan struct{})
		go func() { a.grpcSrv.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-shutCtx.Done():
			a.log.Warn("gRPC shutdown deadline passed; closing connections")
			a.grpcSrv.Stop()
			<-done
		}
	}()
	sd.Wait()
}
