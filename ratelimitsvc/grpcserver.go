package ratelimitsvc

import (
	"context"
	"log/slog"
	"runtime/debug"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
)

// streamWorkers is how many calls run on reused goroutines at once.
const streamWorkers = 256

// NewGRPCServer returns a gRPC server with the rate-limit service, the
// standard health service (grpc.health.v1, SERVING for "" and the
// rate-limit service) and server reflection registered. The health server is
// returned so that shutdown can turn it NOT_SERVING first. With
// Options.TracerProvider every rate-limit call is traced (trace.go). extra
// are more server options, such as the transport credentials of TLS.
func NewGRPCServer(s *Server, extra ...grpc.ServerOption) (*grpc.Server, *health.Server) {
	opts := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(s.metrics.unaryLatency, recoverer(s.opts.Log)),
		// Streams run on long-lived workers whose stacks have grown once,
		// instead of a new goroutine per call growing (copying) its stack
		// on every request: a fifth of the CPU under load. Beyond the
		// workers, calls get goroutines of their own as before.
		grpc.NumStreamWorkers(streamWorkers),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle: 5 * time.Minute, MaxConnectionAge: s.opts.MaxConnectionAge, MaxConnectionAgeGrace: s.opts.MaxConnectionAgeGrace,
		}),
		grpc.MaxRecvMsgSize(1 << 20),
	}
	var rls rlsv3.RateLimitServiceServer = s
	if s.tracing != nil {
		opts = append(opts, grpc.StatsHandler(s.tracing.statsHandler()))
		rls = &tracedServer{Server: s, tracer: s.tracing.Tracer}
	}
	g := grpc.NewServer(append(opts, extra...)...)
	rlsv3.RegisterRateLimitServiceServer(g, rls)
	h := health.NewServer()
	h.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	h.SetServingStatus(rlsv3.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(g, h)
	reflection.Register(g)
	return g, h
}

// recoverer turns a panic in a handler into an Internal error, logged once,
// instead of a crashed server.
func recoverer(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if r := recover(); r != nil {
				log.ErrorContext(ctx, "panic in gRPC handler", "method", info.FullMethod, "panic", r, "stack", string(debug.Stack()))
				err = status.Error(codes.Internal, "internal error")
			}
		}()
		return handler(ctx, req)
	}
}
