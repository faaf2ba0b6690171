package envoy_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	rlqsfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rate_limit_quota/v3"
	networkinputsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/matching/common_inputs/network/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/throttle-rl/throttle/descriptors"
	"github.com/throttle-rl/throttle/envoy"
	"github.com/throttle-rl/throttle/internal/testkit"
)

// The RLQS proxy decodes strictly into the v3 bootstrap and passes
// validation; its filter streams to Throttle's gRPC port over HTTP/2 for
// domain "edge", and every bucket its matchers build maps, as docs/rlqs.md
// says (entries sorted by key), to a limit of descriptors/edge.yaml.
func TestRLQSProxy(t *testing.T) {
	b, err := envoy.LoadBootstrap(testkit.MustRead(t, "envoy-rlqs.yaml"))
	if err != nil {
		t.Fatalf("envoy-rlqs.yaml: %v", err)
	}
	cfg := mustLoadDescriptors(t, "edge.yaml", testkit.MustRead(t, "descriptors/edge.yaml"))
	hcm := onlyHTTPConnectionManager(t, b.GetStaticResources().GetListeners())
	filters := hcm.GetHttpFilters()
	if n := len(filters); n != 2 || filters[0].GetName() != "envoy.filters.http.rate_limit_quota" || filters[1].GetName() != "envoy.filters.http.router" {
		t.Fatalf("http_filters = %v, want rate_limit_quota then router", filterNames(filters))
	}
	var fc rlqsfilterv3.RateLimitQuotaFilterConfig
	if err := filters[0].GetTypedConfig().UnmarshalTo(&fc); err != nil {
		t.Fatal(err)
	}
	if fc.GetDomain() != cfg.Domain {
		t.Errorf("filter domain = %q, descriptors/edge.yaml domain = %q", fc.GetDomain(), cfg.Domain)
	}
	cluster := fc.GetRlqsServer().GetEnvoyGrpc().GetClusterName()
	var found bool
	for _, c := range b.GetStaticResources().GetClusters() {
		if c.GetName() != cluster {
			continue
		}
		found = true
		assertHTTP2(t, c)
		if got := envoy.EndpointAddrs(c); len(got) != 1 || got[0] != "throttle:8081" {
			t.Errorf("cluster %s endpoints = %v, want throttle:8081 (GRPC_PORT)", cluster, got)
		}
	}
	if !found {
		t.Fatalf("rlqs_server names cluster %q, which is not defined", cluster)
	}

	// Each bucket, with sample values for what requests fill in.
	type bucket struct {
		where string
		want  uint32 // requests per minute of the limit it maps to
		s     *rlqsfilterv3.RateLimitQuotaBucketSettings
	}
	var buckets []bucket
	ml := fc.GetBucketMatchers()
	for i, m := range ml.GetMatcherList().GetMatchers() {
		buckets = append(buckets, bucket{fmt.Sprintf("matchers[%d]", i), 10, settingsOf(t, m.GetOnMatch().GetAction().GetTypedConfig())})
	}
	buckets = append(buckets, bucket{"on_no_match", 100, settingsOf(t, ml.GetOnNoMatch().GetAction().GetTypedConfig())})
	if len(buckets) != 2 {
		t.Fatalf("want a per-user bucket and a catch-all, got %d", len(buckets))
	}
	for _, bk := range buckets {
		entries := bucketDescriptor(t, bk.where, bk.s.GetBucketIdBuilder())
		m := cfg.match(entries...)
		if m == nil || m.Limit.RequestsPerUnit != bk.want || m.Limit.Unit != descriptors.Minute {
			t.Errorf("%s: bucket %v maps to %+v, want %d a minute", bk.where, entries, m, bk.want)
		}
		// Throttle reassigns every RLQS_INTERVAL (1s by default): report
		// at least three times as often.
		if d := bk.s.GetReportingInterval().AsDuration(); d.Seconds() > 1.0/3 {
			t.Errorf("%s: reporting_interval %v, want at most a third of RLQS_INTERVAL (1s)", bk.where, d)
		}
		if bk.s.GetNoAssignmentBehavior().GetFallbackRateLimit().GetBlanketRule() != typev3.RateLimitStrategy_ALLOW_ALL {
			t.Errorf("%s: no_assignment_behavior should allow all", bk.where)
		}
		if bk.s.GetExpiredAssignmentBehavior().GetReuseLastAssignment() == nil {
			t.Errorf("%s: expired_assignment_behavior should reuse the last assignment", bk.where)
		}
	}
}

func settingsOf(t *testing.T, a *anypb.Any) *rlqsfilterv3.RateLimitQuotaBucketSettings {
	t.Helper()
	var s rlqsfilterv3.RateLimitQuotaBucketSettings
	if err := a.UnmarshalTo(&s); err != nil {
		t.Fatalf("bucket action: %v", err)
	}
	return &s
}

// bucketDescriptor is the descriptor a bucket maps to in Throttle: its
// entries sorted by key, request values filled in with samples.
func bucketDescriptor(t *testing.T, where string, b *rlqsfilterv3.RateLimitQuotaBucketSettings_BucketIdBuilder) []descriptors.Entry {
	t.Helper()
	var es []descriptors.Entry
	for k, v := range b.GetBucketIdBuilder() {
		es = append(es, descriptors.Entry{Key: k, Value: sampleValue(t, where, v)})
	}
	sort.Slice(es, func(i, j int) bool { return es[i].Key < es[j].Key })
	return es
}

func sampleValue(t *testing.T, where string, v *rlqsfilterv3.RateLimitQuotaBucketSettings_BucketIdBuilder_ValueBuilder) string {
	t.Helper()
	if s := v.GetStringValue(); s != "" {
		return s
	}
	in, err := v.GetCustomValue().GetTypedConfig().UnmarshalNew()
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	switch in := in.(type) {
	case *matcherv3.HttpRequestHeaderMatchInput:
		return "alice from " + in.GetHeaderName()
	case *networkinputsv3.SourceIPInput:
		return "203.0.113.7"
	}
	t.Fatalf("%s: no sample for input %T", where, in)
	return ""
}

// Decoding is strict and validation reaches the bucket settings inside the
// matcher's typed_config.
func TestRLQSProxyRejectsMistakes(t *testing.T) {
	good := string(testkit.MustRead(t, "envoy-rlqs.yaml"))
	tests := []struct {
		name      string
		old, new_ string
	}{
		{"misspelled field", "reporting_interval: 0.3s", "reporting_intervall: 0.3s"},
		{"reporting interval below Envoy's 100ms", "reporting_interval: 0.3s", "reporting_interval: 0.05s"},
		{"unknown blanket rule", "blanket_rule: ALLOW_ALL", "blanket_rule: ALLOW_SOME"},
		{"unknown input type", "common_inputs.network.v3.SourceIPInput", "common_inputs.network.v3.SourceIpInput"},
		{"empty domain", "domain: edge", `domain: ""`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bad := strings.Replace(good, tt.old, tt.new_, 1)
			if bad == good {
				t.Fatalf("envoy-rlqs.yaml has no %q to replace", tt.old)
			}
			if _, err := envoy.LoadBootstrap([]byte(bad)); err == nil {
				t.Fatalf("LoadBootstrap accepted envoy-rlqs.yaml with %q → %q", tt.old, tt.new_)
			} else {
				t.Logf("rejected as expected: %v", err)
			}
		})
	}
}
