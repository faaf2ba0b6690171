package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
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
	ticks := procstat.ClockTicks()
	var cpuBefore procstat.Sample
	if o.pid > 0 {
		if cpuBefore, err = procstat.Read(o.pid, ticks); err != nil {
			return nil, err
		}
	}
	var rdbStats func(context.Context) (redisStats, error)
	var redisBefore redisStats
	if o.redisURL != "" {
		rdb, err := openRedis(o.redisURL, 1)
		if err != nil {
			return nil, err
		}
		defer rdb.Close()
		rdbStats = func(ctx context.Context) (redisStats, error) { return readRedisStats(ctx, rdb) }
		if redisBefore, err = rdbStats(ctx); err != nil {
			return nil, err
		}
	}

	res.t = drive(ctx, o, o.requests, o.duration, calls(o.runID))

	if o.pid > 0 {
		after, err := procstat.Read(o.pid, ticks)
		if err != nil {
			return nil, err
		}
		if after.StartTime != cpuBefore.StartTime {
			return nil, fmt.Errorf("service CPU: process %d is not the one measured at the start (restarted?)", o.pid)
		}
		res.serviceCPU, res.hasServiceCPU = after.CPU-cpuBefore.CPU, true
	}
	if rdbStats != nil {
		after, err := rdbStats(context.WithoutCancel(ctx))
		if err != nil {
			return nil, err
		}
		res.redis = diffRedis(redisBefore, after, engineCommands(o.algorithm)...)
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
