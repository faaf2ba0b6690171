package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/descriptors"
	"github.com/throttle-rl/throttle/ratelimitsvc"
	"github.com/throttle-rl/throttle/restapi"
	"github.com/throttle-rl/throttle/store"
)

// serve wires every part together and runs until ctx ends (SIGTERM), then
// drains in-flight requests within ShutdownTimeout.
func serve(ctx context.Context, cfg *config, logOut io.Writer) error {
	log := slog.New(slog.NewJSONHandler(logOut, &slog.HandlerOptions{Level: cfg.LogLevel}))
	if cfg.GCPercent > 0 {
		// The collector's target is the process's; serve is the process.
		debug.SetGCPercent(cfg.GCPercent)
	}
	reg := prometheus.NewRegistry()
	for _, c := range []prometheus.Collector{collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}

	// Background work has one owner: bg ends it, wg waits for it. Deferred
	// in this order so that an early return (a start that fails) first
	// ends the work, then waits for it.
	var wg sync.WaitGroup
	defer wg.Wait()
	bg, stopBG := context.WithCancel(context.Background())
	defer stopBG()
	goBG := func(name string, f func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(bg); err != nil {
				log.Error("background task stopped", "task", name, "err", err)
			}
		}()
	}

	openCtx, cancelOpen := context.WithTimeout(ctx, 30*time.Second)
	db, err := store.Open(openCtx, cfg.DatabaseURL, log)
	cancelOpen()
	if err != nil {
		return fmt.Errorf("open database: %w", err)
	}
	defer db.Close()
	if err := db.RegisterPoolMetrics(reg); err != nil {
		return err
	}
	cache := store.NewCache(db, cfg.CacheRefresh, log)
	if err := cache.Refresh(ctx); err != nil {
		return fmt.Errorf("load clients and rules: %w", err)
	}
	goBG("cache", cache.Run)

	// Usage is flushed last, after the servers drained: its own context.
	usage := store.NewUsageRecorder(db, time.Second, log)
	usageCtx, stopUsage := context.WithCancel(context.Background())
	usageDone := make(chan struct{})
	go func() {
		defer close(usageDone)
		if err := usage.Run(usageCtx); err != nil {
			log.Error("usage recorder stopped", "err", err)
		}
	}()
	defer func() { stopUsage(); <-usageDone }()

	// Tracing: off (no provider, no spans) without an OTLP endpoint.
	sdkTracer, err := newTracerProvider(ctx, &cfg.Tracing, log)
	if err != nil {
		return err
	}
	var tracer trace.TracerProvider // nil: off, in every package
	stopTracing := func() {}
	if sdkTracer != nil {
		tracer = sdkTracer
		var once sync.Once
		stopTracing = func() {
			once.Do(func() {
				// Flush the spans of the drained requests.
				fctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
				defer cancel()
				if err := sdkTracer.Shutdown(fctx); err != nil {
					log.Warn("OpenTelemetry: spans not all sent before shutdown", "err", err)
				}
			})
		}
		defer stopTracing()
	}
	propagator := propagation.TraceContext{} // W3C traceparent, tracestate

	limiter, backend, err := newLimiter(ctx, cfg, log, reg, tracer, goBG)
	if err != nil {
		return err
	}

	var (
		current    func() *descriptors.Config
		descStatus func(string) restapi.DescriptorStatus
	)
	if cfg.DescriptorsDir != "" {
		newReloader := descriptors.NewReloader
		if cfg.ForceStart {
			newReloader = descriptors.NewReloaderWithoutInitialConfig
		}
		r, err := newReloader(cfg.DescriptorsDir, cfg.ReloadInterval, descriptors.Options{MergeDomains: cfg.MergeDomains}, log, reg)
		if err != nil {
			if !cfg.ForceStart {
				err = fmt.Errorf("%w (FORCE_START_WITHOUT_INITIAL_CONFIG=true starts without it)", err)
			}
			return fmt.Errorf("DESCRIPTORS_DIR: %w", err)
		}
		current, descStatus = r.Current, domainStatus(r)
		goBG("descriptors", r.Run)
		if c := r.Current(); c != nil {
			log.Info("descriptor configuration loaded", "dir", cfg.DescriptorsDir, "domains", c.DomainCount())
		} else {
			log.Warn("starting without the descriptor configuration (FORCE_START_WITHOUT_INITIAL_CONFIG); it loads when it appears", "dir", cfg.DescriptorsDir)
		}
	}
	// GET /rlconfig: the YAML configuration in use, as the reference
	// service's debug endpoint (REST client rules are private to their
	// clients and not part of it).
	configDump := func() string {
		if current == nil {
			return ""
		}
		return current().Dump()
	}

	// The Envoy path rejects known over-limit descriptors without Redis.
	// Only there: its counters are scoped by domain, which no REST /reset
	// (made on any replica) can touch, so the cache cannot go stale.
	rlsLimiter := limiter
	if backend == "redis" && cfg.LocalCacheBytes > 0 {
		if rlsLimiter, err = algorithms.NewOverLimitCache(limiter, algorithms.OverLimitCacheOptions{MaxBytes: cfg.LocalCacheBytes, Registerer: reg}); err != nil {
			return err
		}
	}
	rls, err := ratelimitsvc.New(ratelimitsvc.Options{
		Limiter: rlsLimiter, Descriptors: current, Rules: cache, ResponseHeaders: cfg.ResponseHeaders, HeaderSets: cfg.HeaderSets,
		ShadowMode: cfg.ShadowMode, DynamicMetadata: cfg.DynamicMetadata, MaxValueStatsKeys: maxValueKeys(cfg.MaxValueStatsKeys),
		Log: log, Registerer: reg, TracerProvider: tracer, Propagator: propagator,
	})
	if err != nil {
		return err
	}
	quota, err := newQuota(cfg, current, cache, log, reg, goBG)
	if err != nil {
		return err
	}
	grpcSrv, health := ratelimitsvc.NewGRPCServer(rls)
	quota.Register(grpcSrv, health)
	handler := restapi.NewHandler(restapi.Deps{
		Log: log, DB: db, Cache: cache, Usage: usage, Limiter: limiter, Registerer: reg, Gatherer: reg,
		TrustedProxies: cfg.TrustedProxies, ConfigDump: configDump, HeaderSets: cfg.HeaderSets, TracerProvider: tracer, Propagator: propagator,
		RegisterLimit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: cfg.RegisterLimit, Window: time.Hour},
		Descriptors:   descStatus,
	})
	httpSrv := restapi.NewServer(net.JoinHostPort(cfg.BindAddress, strconv.Itoa(cfg.Port)), handler)

	// Bind both before serving either, so a taken port fails the start.
	httpLis, err := net.Listen("tcp", httpSrv.Addr)
	if err != nil {
		return fmt.Errorf("PORT: %w", err)
	}
	grpcLis, err := net.Listen("tcp", net.JoinHostPort(cfg.BindAddress, strconv.Itoa(cfg.GRPCPort)))
	if err != nil {
		httpLis.Close()
		return fmt.Errorf("GRPC_PORT: %w", err)
	}
	if cfg.DebugAddress != "" {
		dl, err := net.Listen("tcp", cfg.DebugAddress)
		if err != nil {
			httpLis.Close()
			grpcLis.Close()
			return fmt.Errorf("DEBUG_ADDRESS: %w", err)
		}
		log.Info("serving /debug/pprof", "addr", dl.Addr().String())
		goBG("debug server", func(ctx context.Context) error { return serveDebug(ctx, dl) })
	}
	log.Info("throttle serving", "version", version, "rest", httpLis.Addr().String(), "grpc", grpcLis.Addr().String(),
		"counters", backend, "database", db.Dialect(), "failure_mode", string(cfg.FailureMode),
		"tracing", cfg.Tracing.String())

	errc := make(chan error, 2)
	go func() {
		if err := httpSrv.Serve(httpLis); !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("REST server: %w", err)
		}
	}()
	go func() {
		if err := grpcSrv.Serve(grpcLis); err != nil {
			errc <- fmt.Errorf("gRPC server: %w", err)
		}
	}()

	var serveErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down: draining in-flight requests", "timeout", cfg.ShutdownTimeout.String())
	case serveErr = <-errc:
		log.Error("server failed; shutting down", "err", serveErr)
	}

	health.Shutdown() // gRPC health NOT_SERVING: Envoy stops sending
	quota.Stop()      // RLQS streams end (GracefulStop would wait for them); Envoys reconnect elsewhere
	shutCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	var sd sync.WaitGroup
	sd.Add(2)
	go func() {
		defer sd.Done()
		if err := httpSrv.Shutdown(shutCtx); err != nil {
			log.Warn("REST shutdown deadline passed; closing connections", "err", err)
			httpSrv.Close()
		}
	}()
	go func() {
		defer sd.Done()
		done := make(chan struct{})
		go func() { grpcSrv.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-shutCtx.Done():
			log.Warn("gRPC shutdown deadline passed; closing connections")
			grpcSrv.Stop()
			<-done
		}
	}()
	sd.Wait()
	stopTracing()
	stopBG()
	log.Info("stopped")
	return serveErr
}

// newLimiter builds the counter store: memory without REDIS_URL, else Redis
// behind the failure policy.
func newLimiter(ctx context.Context, cfg *config, log *slog.Logger, reg prometheus.Registerer, tracer trace.TracerProvider, goBG func(string, func(context.Context) error)) (algorithms.Store, string, error) {
	if cfg.RedisURL == "" {
		mem := algorithms.NewMemoryStore(algorithms.MemoryOptions{})
		goBG("memory sweep", mem.Run)
		return mem, "memory", nil
	}
	rdb, err := newRedis(cfg.RedisURL)
	if err != nil {
		return nil, "", err
	}
	// go-redis has one process-wide logger; serve is the process.
	redis.SetLogger(&redisLog{log: log})
	// Concurrent checks share script calls: under load one round trip
	// decides many requests.
	counters := algorithms.NewRedisStore(rdb, algorithms.RedisOptions{Coalesce: 4, MaxBatch: 128, TracerProvider: tracer})
	goBG("redis close", func(ctx context.Context) error {
		<-ctx.Done()
		counters.Close()
		return rdb.Close()
	})
	pingCtx, cancel := context.WithTimeout(ctx, 3*time.Second)
	if err := counters.Ping(pingCtx); err != nil {
		log.Warn("Redis does not answer yet; FAILURE_MODE decides until it does", "err", err, "failure_mode", string(cfg.FailureMode))
	}
	cancel()
	local := algorithms.NewMemoryStore(algorithms.MemoryOptions{})
	goBG("local sweep", local.Run)
	g, err := algorithms.NewGuard(counters, algorithms.GuardOptions{
		Mode: cfg.FailureMode, Timeout: cfg.BackendTimeout, DefaultTimeout: cfg.RESTTimeout, Local: local, Registerer: reg,
	})
	if err != nil {
		return nil, "", err
	}
	goBG("circuit probe", g.Run)
	return g, "redis", nil
}

// domainStatus hands the reloader's view of a domain to the REST API in its
// own types.
func domainStatus(r *descriptors.Reloader) func(string) restapi.DescriptorStatus {
	return func(domain string) restapi.DescriptorStatus {
		s := r.DomainStatus(domain)
		files := make([]restapi.DescriptorFile, len(s.Files))
		for i, f := range s.Files {
			files[i] = restapi.DescriptorFile{Name: f.Name, Content: string(f.Data)}
		}
		return restapi.DescriptorStatus{
			Files: files, LoadedAt: s.LoadedAt, CheckedAt: s.CheckedAt, Valid: s.Valid, Problems: s.Problems,
		}
	}
}

// maxValueKeys maps STATS_MAX_VALUE_KEYS (0 = none) to
// ratelimitsvc.Options.MaxValueStatsKeys (0 = default, negative = none).
func maxValueKeys(n int) int {
	if n == 0 {
		return -1
	}
	return n
}
