package xdsconfig

import (
	"fmt"
	"strings"
	"testing"
	"time"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"

	"github.com/throttle-rl/throttle/descriptors"
	"github.com/throttle-rl/throttle/internal/testkit/xdstest"
)

// BenchmarkLoad: what Client does with each xDS response, on one of 100
// RateLimitConfig resources (domains of Envoy Gateway's shape: a route
// with 10 rules, each a tenant selector over a request-id selector), with
// the reservation overlay set on every domain's first rule.
func BenchmarkLoad(b *testing.B) {
	const n = 100
	cfgs := make([]*rlsconf.RateLimitConfig, n)
	var overlay strings.Builder
	overlay.WriteString("reservations:\n")
	for i := range cfgs {
		c := proto.Clone(xdstest.AIGatewayTokens(1000, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000, 10000)).(*rlsconf.RateLimitConfig)
		c.Name = fmt.Sprintf("tenant-%03d", i)
		c.Domain = c.Name
		cfgs[i] = c
		fmt.Fprintf(&overlay, "  - {domain: %s, handle: rule-0-match-1, hits: 100, ttl: 60s}\n", c.Domain)
	}
	res, err := ParseReservations("overlay.yaml", []byte(overlay.String()), time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		c, err := loadConfigs(descriptors.Options{}, cfgs, res, nil)
		if err != nil || c.DomainCount() != n {
			b.Fatalf("loadConfigs: %d domains, %v", c.DomainCount(), err)
		}
	}
}
