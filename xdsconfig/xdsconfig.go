// Package xdsconfig is the xDS config source of Envoy's reference
// rate-limit service (its CONFIG_TYPE=GRPC_XDS_SOTW): a client of a control
// plane's Aggregated Discovery Service (go-control-plane's state-of-the-world
// ADS client) subscribed to RateLimitConfig resources, as Envoy Gateway's
// control plane serves them. Each response is loaded whole (Load) and then
// acknowledged (ACK) and swapped in, or refused (NACK) with the reason, the
// last good configuration kept. When the control plane is gone the client
// keeps its configuration and connects again with exponential backoff.
package xdsconfig

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/throttle-rl/throttle/descriptors"
)

// Options configure a Client.
type Options struct {
	// Server is the control plane's gRPC target, such as
	// envoy-gateway:18001. Required.
	Server string
	// NodeID names this client to the control plane, which keeps a
	// snapshot per node. Optional, but a control plane answers only the
	// nodes it has a snapshot for.
	NodeID string
	// NodeMetadata is the node's metadata, string values. Optional.
	NodeMetadata map[string]string
	// Headers are sent as gRPC metadata with the stream (a token the
	// control plane asks for). Optional; never logged. Without TLS they
	// go in plaintext, which New warns about.
	Headers map[string]string
	// TLS secures the connection; nil: plaintext. Its files are read where
	// it was made (tlsreload re-reads them on change).
	TLS *tls.Config
	// MaxRecvMsgSize is the largest response taken, in bytes; 0: gRPC's
	// default, 4 MiB.
	MaxRecvMsgSize int
	// ConnectTimeout bounds one attempt to connect (TCP and the TLS
	// handshake); 0: gRPC's default, 20s.
	ConnectTimeout time.Duration
	// Backoff is the wait between attempts to connect. Required.
	Backoff Backoff
	// Load says how the resources combine (MergeDomains).
	Load descriptors.Options
	// Reservations, optional, sets reserve on limits of the resources
	// (RESERVATION_OVERLAY; see Reservations).
	Reservations *Reservations
	// OnLoad, optional, is called after each response is handled: with nil
	// when it was loaded (ACK), with the reason when it was refused (NACK).
	// A response equal to one refused lately, which a control plane sends
	// again in answer to the NACK, is refused again without a call.
	OnLoad func(error)
	// Log gets a line per configuration loaded or refused and per change of
	// the connection's state, not per attempt. Optional.
	Log *slog.Logger
	// Registerer takes the client's metrics (metrics.go); nil: none.
	Registerer prometheus.Registerer
}

// Client follows the RateLimitConfig resources of one control plane. Run
// does the work; Current and Received may be called from any goroutine.
type Client struct {
	o        Options
	node     *core.Node
	dialOpts []grpc.DialOption
	m        *metrics

	current      atomic.Pointer[descriptors.Config]
	received     chan struct{}
	receivedOnce sync.Once

	// Owned by Run's goroutine.
	refused refusals // since the last response loaded (nack.go)
	state   connState
}

// New checks o and returns a Client; it does not connect (Run does).
func New(o Options) (*Client, error) {
	if o.Server == "" {
		return nil, errors.New("xdsconfig: no control plane address")
	}
	if err := o.Backoff.validate(); err != nil {
		return nil, fmt.Errorf("xdsconfig: %w", err)
	}
	if o.MaxRecvMsgSize < 0 {
		return nil, fmt.Errorf("xdsconfig: max receive message size %d is negative", o.MaxRecvMsgSize)
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(o.Registerer)
	if err != nil {
		return nil, err
	}
	if len(o.Headers) > 0 && o.TLS == nil {
		o.Log.Warn("xDS: the additional headers go to the control plane in plaintext (no TLS): whoever sees the traffic reads their values (tokens); turn TLS on toward the control plane", "server", o.Server, "headers", slices.Sorted(maps.Keys(o.Headers)))
	}
	c := &Client{o: o, node: node(o.NodeID, o.NodeMetadata), m: m, received: make(chan struct{})}
	c.dialOpts = dialOptions(o)
	// The target is checked now; Run makes the connections it uses.
	conn, err := grpc.NewClient(o.Server, c.dialOpts...)
	if err != nil {
		return nil, fmt.Errorf("xdsconfig: control plane %q: %w", o.Server, err)
	}
	conn.Close()
	return c, nil
}

// node is the client's node: its id, and its metadata as a Struct of
// strings.
func node(id string, metadata map[string]string) *core.Node {
	fields := make(map[string]*structpb.Value, len(metadata))
	for k, v := range metadata {
		fields[k] = structpb.NewStringValue(v)
	}
	return &core.Node{Id: id, Metadata: &structpb.Struct{Fields: fields}}
}

// keepaliveTime is how long a silent stream waits before it pings the
// control plane; gRPC servers refuse pings more often than every 5 minutes
// by default. keepaliveTimeout is how long the ping's answer may take
// before the connection counts as dead.
const (
	keepaliveTime    = 5 * time.Minute
	keepaliveTimeout = 20 * time.Second
)

func dialOptions(o Options) []grpc.DialOption {
	creds := insecure.NewCredentials()
	if o.TLS != nil {
		creds = credentials.NewTLS(o.TLS)
	}
	params := grpc.ConnectParams{Backoff: grpcbackoff.DefaultConfig, MinConnectTimeout: o.ConnectTimeout}
	if params.MinConnectTimeout <= 0 {
		params.MinConnectTimeout = 20 * time.Second
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithConnectParams(params),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: keepaliveTime, Timeout: keepaliveTimeout}),
	}
	if o.MaxRecvMsgSize > 0 {
		opts = append(opts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(o.MaxRecvMsgSize)))
	}
	return opts
}

// Current returns the configuration loaded last; nil until a response
// loaded.
func (c *Client) Current() *descriptors.Config { return c.current.Load() }

// Received is closed once the first response has been handled, loaded or
// refused: what a server that must not serve before its configuration
// (the reference's FORCE_START_WITHOUT_INITIAL_CONFIG=false) waits for, as
// the reference waits for its first configuration event, good or bad.
func (c *Client) Received() <-chan struct{} { return c.received }

func (c *Client) markReceived() { c.receivedOnce.Do(func() { close(c.received) }) }
