package xdsconfig

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/client/sotw/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/throttle-rl/throttle/descriptors"
)

// Run connects to the control plane and follows its RateLimitConfig
// resources until ctx ends, connecting again after the backoff whenever the
// stream ends. It returns nil when ctx ends.
func (c *Client) Run(ctx context.Context) error {
	b := newBackoff(c.o.Backoff)
	for {
		received, err := c.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if received {
			b.reset()
		}
		wait := b.next()
		c.streamFailed(err, wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// session connects, opens one ADS stream and handles its responses until
// it fails; received reports whether a response came. Each session has a
// connection of its own, so the backoff of Run alone says when the next
// attempt is (a connection kept across sessions would add gRPC's own
// reconnect backoff, up to 2 minutes), and one attempt is one dial,
// bounded by ConnectTimeout: the stream fails at once when it fails.
func (c *Client) session(ctx context.Context) (received bool, err error) {
	conn, err := grpc.NewClient(c.o.Server, c.dialOpts...)
	if err != nil {
		return false, fmt.Errorf("xDS control plane %q: %w", c.o.Server, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream
	if len(c.o.Headers) > 0 {
		ctx = metadata.NewOutgoingContext(ctx, metadata.New(c.o.Headers))
	}
	ads := sotw.NewADSClient(ctx, c.node, resource.RateLimitConfigType)
	if err := ads.InitConnect(conn); err != nil {
		return false, err
	}
	c.o.Log.Debug("xDS stream opened", "server", c.o.Server, "node", c.node.GetId())
	for {
		resp, err := ads.Fetch()
		if err != nil {
			return received, err
		}
		if !received {
			received = true
			c.streamUp()
		}
		if err := c.handle(ctx, ads, resp.Resources); err != nil {
			return true, err
		}
	}
}

// handle loads one response and ACKs it, or NACKs it with the reason
// (refuse). A send that fails ends the stream.
func (c *Client) handle(ctx context.Context, ads sotw.ADSClient, resources []*anypb.Any) error {
	defer c.markReceived()
	sum, cfg, err := c.load(resources)
	if err != nil {
		return c.refuse(ctx, ads, sum, err)
	}
	c.refused = refusals{}
	c.current.Store(cfg)
	c.o.Log.Info("xDS rate-limit configuration loaded", "server", c.o.Server, "resources", len(resources), "domains", cfg.DomainCount())
	c.m.responses.WithLabelValues(loaded).Inc()
	if c.o.OnLoad != nil {
		c.o.OnLoad(nil)
	}
	return ads.Ack()
}

// refuse NACKs a response that did not load, with err as its detail (at
// most maxNackDetail bytes): logged, counted and given to OnLoad unless it
// is one refused lately (nack.go), and sent after the pause a NACK that
// follows another waits.
func (c *Client) refuse(ctx context.Context, ads sotw.ADSClient, sum [sha256.Size]byte, err error) error {
	detail := capDetail(err.Error())
	if !c.refused.seen(sum) {
		c.o.Log.Error("xDS rate-limit configuration refused (NACK); the last good one stays in use", "server", c.o.Server, "err", detail)
		c.m.responses.WithLabelValues(refused).Inc()
		if c.o.OnLoad != nil {
			c.o.OnLoad(err)
		}
	}
	if pause := c.refused.nextPause(); pause > 0 {
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	return ads.Nack(detail)
}

// load decodes and loads resources, and returns a digest of what they say
// (by content, whatever their order or encoding).
func (c *Client) load(resources []*anypb.Any) ([sha256.Size]byte, *descriptors.Config, error) {
	cfgs, err := unmarshal(resources)
	if err != nil {
		return rawDigest(resources), nil, err
	}
	cfg, err := loadConfigs(c.o.Load, cfgs, c.o.Reservations, c.o.Log)
	return digest(cfgs), cfg, err
}

// digest is a digest of cfgs, in their order, each deterministically
// encoded.
func digest(cfgs []*rlsconf.RateLimitConfig) [sha256.Size]byte {
	h := sha256.New()
	for _, c := range cfgs {
		b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(c) // a message just decoded encodes
		fmt.Fprintf(h, "%d:", len(b))
		h.Write(b)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

// rawDigest is a digest of resources that do not decode.
func rawDigest(resources []*anypb.Any) [sha256.Size]byte {
	parts := make([]string, len(resources))
	for i, r := range resources {
		parts[i] = r.GetTypeUrl() + "\x00" + string(r.GetValue())
	}
	slices.Sort(parts)
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:%s", len(p), p)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}
