package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/throttle-rl/throttle/internal/procstat"
)

// runRLS drives ShouldRateLimit with the case's requests: a warmup on other
// descriptor values, then the measured run between two readings of the
// service's and Redis's counters.
func runRLS(ctx context.Context, o *options) (*result, error) {
	creds, err := o.credentials()
	if err != nil {
		return nil, err
	}
	clients := make([]rlsv3.RateLimitServiceClient, o.conns)
	for i := range clients {
		conn, err := grpc.NewClient(o.addr, grpc.WithTransportCredentials(creds))
		if err != nil {
			return nil, fmt.Errorf("-addr %s: %w", o.addr, err)
		}
		defer conn.Close()
		clients[i] = rlsv3.NewRateLimitServiceClient(conn)
	}
	calls := func(run string) callFunc {
		return func(ctx context.Context, i int) (bool, string, error) {
			req := requestFor(o.domain, o.caseName, o.algorithm, run, i)
			resp, err := clients[i%len(clients)].ShouldRateLimit(ctx, req)
			if err != nil {
				return false, status.Code(err).String(), err
			}
			switch resp.GetOverallCode() {
			case rlsv3.RateLimitResponse_OK:
				return false, "", nil
			case rlsv3.RateLimitResponse_OVER_LIMIT:
				return true, "", nil
			}
			return false, "overall_code_" + resp.GetOverallCode().String(), fmt.Errorf("overall code %s", resp.GetOverallCode())
		}
	}
	if o.warmup > 0 {
		w := drive(ctx, o, o.warmup, 0, calls(o.runID+"-warmup"))
		if w.calls > 0 && w.errorCount() == w.calls {
			return nil, fmt.Errorf("warmup: all %d calls failed: %v", w.calls, w.firstErr)
		}
	}

	res := &result{caseName: o.caseName, alg: o.algorithm, cache: o.cache, perCall: descriptorsPerCall(o.caseName), concurrency: o.concurrency,
		conns: o.conns, tls: o.tlsMode()}
	m, err := startMeasure(ctx, o)
	if err != nil {
		return nil, err
	}
	defer m.close()
	res.t = drive(ctx, o, o.requests, o.duration, calls(o.runID))
	if err := m.finish(ctx, o, res); err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("interrupted after %d calls", res.t.calls)
	}
	return res, nil
}

// credentials are the calls' transport: plaintext, TLS trusting -tls-ca,
// or mTLS with -tls-cert too.
func (o *options) credentials() (credentials.TransportCredentials, error) {
	if o.tlsCA == "" {
		return insecure.NewCredentials(), nil
	}
	pem, err := os.ReadFile(o.tlsCA)
	if err != nil {
		return nil, fmt.Errorf("-tls-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("-tls-ca %s: no PEM certificate in it", o.tlsCA)
	}
	cfg := &tls.Config{RootCAs: pool, ServerName: o.tlsServerName, MinVersion: tls.VersionTLS12}
	if o.tlsCert != "" {
		pair, err := tls.LoadX509KeyPair(o.tlsCert, o.tlsKey)
		if err != nil {
			return nil, fmt.Errorf("-tls-cert, -tls-key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return credentials.NewTLS(cfg), nil
}

// tlsMode labels the run: off, tls or mtls.
func (o *options) tlsMode() string {
	switch {
	case o.tlsCert != "":
		return "mtls"
	case o.tlsCA != "":
		return "tls"
	}
	return "off"
}

// measure is the CPU of the service and of Redis at the start of a run.
type measure struct {
	ticks       int64
	cpuBefore   procstat.Sample
	rdb         *redis.Client // nil without -redis
	redisBefore redisStats
}

// startMeasure reads the service's CPU (-pid) and Redis's (-redis) before a
// run.
func startMeasure(ctx context.Context, o *options) (*measure, error) {
	m := &measure{ticks: procstat.ClockTicks()}
	var err error
	if o.pid > 0 {
		if m.cpuBefore, err = procstat.Read(o.pid, m.ticks); err != nil {
			return nil, err
		}
	}
	if o.redisURL != "" {
		if m.rdb, err = openRedis(o.redisURL, 1); err != nil {
			return nil, err
		}
		if m.redisBefore, err = readRedisStats(ctx, m.rdb); err != nil {
			m.rdb.Close()
			return nil, err
		}
	}
	return m, nil
}

// finish puts in res what the service and Redis spent since startMeasure.
func (m *measure) finish(ctx context.Context, o *options, res *result) error {
	if o.pid > 0 {
		after, err := procstat.Read(o.pid, m.ticks)
		if err != nil {
			return err
		}
		if after.StartTime != m.cpuBefore.StartTime {
			return fmt.Errorf("service CPU: process %d is not the one measured at the start (restarted?)", o.pid)
		}
		res.serviceCPU, res.hasServiceCPU = after.CPU-m.cpuBefore.CPU, true
	}
	if m.rdb != nil {
		after, err := readRedisStats(context.WithoutCancel(ctx), m.rdb)
		if err != nil {
			return err
		}
		res.redis = diffRedis(m.redisBefore, after, engineCommands(o.algorithm)...)
	}
	return nil
}

func (m *measure) close() {
	if m.rdb != nil {
		m.rdb.Close()
	}
}
