// Package xdstest runs an xDS control plane for tests, as Envoy Gateway's
// serves the rate-limit service: go-control-plane's ADS server over its
// snapshot cache of RateLimitConfig resources, on a real loopback listener
// (TLS optional), recording every request it gets, ACKs and NACKs.
package xdstest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"sync"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/throttle-rl/throttle/internal/testkit/certtest"
)

// Options describe a control plane.
type Options struct {
	// Addr is where it listens, host:port; empty: a free loopback port.
	// A restarted control plane passes the Addr of the one it replaces.
	Addr string
	// TLS is the listener's; nil: plaintext.
	TLS *tls.Config
	// OnResponse, optional, is called with the version of each response
	// just before it is sent: a test may Set the next snapshot there,
	// before the client answers this one.
	OnResponse func(s *Server, version string)
}

// Server is one running control plane.
type Server struct {
	// Addr is its listen address, host:port.
	Addr string

	cache  cachev3.SnapshotCache
	grpc   *grpc.Server
	cancel context.CancelFunc
	stop   sync.Once

	mu       sync.Mutex
	requests []*discovery.DiscoveryRequest
	headers  []metadata.MD // of each stream opened
	changed  chan struct{} // closed and replaced at each request
}

// Start starts a control plane, stopped when the test ends.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	addr := o.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var lis net.Listener
	var err error
	// A restarted control plane takes its predecessor's port, which the
	// system may hold for a moment after the close.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if lis, err = net.Listen("tcp", addr); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("xdstest: listen on %s: %v", addr, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{Addr: lis.Addr().String(), cache: cachev3.NewSnapshotCache(true, cachev3.IDHash{}, nil), cancel: cancel, changed: make(chan struct{})}
	var opts []grpc.ServerOption
	if o.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(o.TLS)))
	}
	s.grpc = grpc.NewServer(opts...)
	cb := serverv3.CallbackFuncs{
		StreamOpenFunc: func(ctx context.Context, _ int64, _ string) error {
			md, _ := metadata.FromIncomingContext(ctx)
			s.mu.Lock()
			s.headers = append(s.headers, md)
			s.mu.Unlock()
			return nil
		},
		StreamRequestFunc: func(_ int64, r *discovery.DiscoveryRequest) error {
			s.record(r)
			return nil
		},
	}
	if o.OnResponse != nil {
		cb.StreamResponseFunc = func(_ context.Context, _ int64, _ *discovery.DiscoveryRequest, resp *discovery.DiscoveryResponse) {
			o.OnResponse(s, resp.GetVersionInfo())
		}
	}
	discovery.RegisterAggregatedDiscoveryServiceServer(s.grpc, serverv3.NewServer(ctx, s.cache, cb))
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = s.grpc.Serve(lis)
	}()
	t.Cleanup(func() {
		s.Stop()
		<-served
	})
	return s
}

// Stop stops the control plane now, its streams cut, as a crash or a
// rollout does.
func (s *Server) Stop() {
	s.stop.Do(func() {
		s.grpc.Stop()
		s.cancel()
	})
}

// Set makes cfgs, at version, the snapshot of the node nodeID.
func (s *Server) Set(t testing.TB, nodeID, version string, cfgs ...*rlsconf.RateLimitConfig) {
	t.Helper()
	res := make([]types.Resource, len(cfgs))
	for i, c := range cfgs {
		res[i] = c
	}
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: res})
	if err != nil {
		t.Fatalf("xdstest: snapshot %s: %v", version, err)
	}
	if err := s.cache.SetSnapshot(context.Background(), nodeID, snap); err != nil {
		t.Fatalf("xdstest: set snapshot %s: %v", version, err)
	}
}

func (s *Server) record(r *discovery.DiscoveryRequest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, proto.Clone(r).(*discovery.DiscoveryRequest))
	close(s.changed)
	s.changed = make(chan struct{})
}

// Requests returns the requests received so far, in order.
func (s *Server) Requests() []*discovery.DiscoveryRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*discovery.DiscoveryRequest(nil), s.requests...)
}

// Headers returns the gRPC metadata of each stream opened so far.
func (s *Server) Headers() []metadata.MD {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]metadata.MD(nil), s.headers...)
}

// WaitRequest returns the first request received, since the start, that
// match accepts, waiting up to timeout for it; it fails the test with
// what it got otherwise.
func (s *Server) WaitRequest(t testing.TB, timeout time.Duration, what string, match func(*discovery.DiscoveryRequest) bool) *discovery.DiscoveryRequest {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for seen := 0; ; {
		s.mu.Lock()
		reqs, changed := s.requests, s.changed
		s.mu.Unlock()
		for ; seen < len(reqs); seen++ {
			if match(reqs[seen]) {
				return reqs[seen]
			}
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("xdstest: no %s within %s; requests received: %v", what, timeout, reqs)
			return nil
		}
	}
}

// ACK matches the acknowledgement of version.
func ACK(version string) func(*discovery.DiscoveryRequest) bool {
	return func(r *discovery.DiscoveryRequest) bool {
		return r.GetErrorDetail() == nil && r.GetVersionInfo() == version && r.GetResponseNonce() != ""
	}
}

// NACK matches any refusal.
func NACK(r *discovery.DiscoveryRequest) bool { return r.GetErrorDetail() != nil }

// MTLS is the TLS of a control plane as Envoy Gateway's: a certificate of
// ca for 127.0.0.1 and localhost, and client certificates required, signed
// by ca.
func MTLS(t testing.TB, ca *certtest.CA) *tls.Config {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return &tls.Config{
		Certificates: []tls.Certificate{ca.Localhost(t).TLS(t)},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		MinVersion:   tls.VersionTLS12,
	}
}
