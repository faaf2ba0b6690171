package xdsconfig

import (
	"strings"
	"testing"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/throttle-rl/throttle/descriptors"
	"github.com/throttle-rl/throttle/internal/inputsize"
)

// FuzzLoad: one resource of an xDS response, its bytes as the control
// plane sends them, converted and loaded: nothing panics, and a resource
// that loads is within the input-size rule (domain, keys and values of at
// most 1024 bytes) and its domain is in the configuration.
func FuzzLoad(f *testing.F) {
	seeds := []*rlsconf.RateLimitConfig{
		everyField(f),
		{Name: "eg", Domain: "edge", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "k", RateLimit: limit(rlsconf.RateLimitUnit_UNKNOWN, 5)}}},
		{Name: "eg", Domain: "edge", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "k", Value: "v"}, {Key: "k", Value: "v"}}},
		{Name: "eg", Domain: "edge", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "a", Descriptors: []*rlsconf.RateLimitDescriptor{
			{Key: "b", Value: strings.Repeat("v", 1025), RateLimit: limit(rlsconf.RateLimitUnit_YEAR, 1)}}}}},
		{Name: "eg"},
	}
	for _, c := range seeds {
		b, err := proto.Marshal(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, wire []byte) {
		res := &anypb.Any{TypeUrl: "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig", Value: wire}
		cfg, err := Load(descriptors.Options{}, []*anypb.Any{res})
		if err != nil {
			return
		}
		var c rlsconf.RateLimitConfig
		if err := proto.Unmarshal(wire, &c); err != nil {
			t.Fatalf("loaded a resource that does not decode: %v", err)
		}
		if len(c.GetDomain()) > inputsize.MaxString {
			t.Fatalf("loaded a domain of %d bytes", len(c.GetDomain()))
		}
		if cfg.Domain(c.GetDomain()) == nil {
			t.Fatalf("domain %q loaded but not in the configuration", c.GetDomain())
		}
		var walk func([]*rlsconf.RateLimitDescriptor)
		walk = func(ds []*rlsconf.RateLimitDescriptor) {
			for _, d := range ds {
				if len(d.GetKey()) > inputsize.MaxString || len(d.GetValue()) > inputsize.MaxString {
					t.Fatalf("loaded a descriptor of a %d-byte key and %d-byte value", len(d.GetKey()), len(d.GetValue()))
				}
				walk(d.GetDescriptors())
			}
		}
		walk(c.GetDescriptors())
	})
}
