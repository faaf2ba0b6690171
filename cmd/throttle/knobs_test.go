package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/throttle-rl/throttle/internal/testkit"
	"github.com/throttle-rl/throttle/internal/testkit/throttletest"
)

const knobsYAML = `domain: edge
descriptors:
  - key: banned
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: service
    value: blue
    rate_limit: {unit: hour, requests_per_unit: 10}
    metadata: {backend: blue}
`

// knobsDump is GET /rlconfig under SHADOW_MODE: every limit in shadow mode.
const knobsDump = "edge.banned: unit=MINUTE requests_per_unit=0, shadow_mode: true\n" +
	"edge.service_blue: unit=HOUR requests_per_unit=10, shadow_mode: true\n"

// TestReferenceKnobs runs the binary with the reference service's knobs:
// FORCE_START_WITHOUT_INITIAL_CONFIG (starts before DESCRIPTORS_DIR exists,
// answers UNAVAILABLE until it loads, then picks it up), GET /rlconfig,
// SHADOW_MODE and RESPONSE_DYNAMIC_METADATA.
func TestReferenceKnobs(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "descriptors") // not there yet
	s := throttletest.Start(t, "DESCRIPTORS_DIR="+dir, "DESCRIPTORS_RELOAD_INTERVAL=50ms", "RLCONFIG_ON_REST_PORT=true",
		"FORCE_START_WITHOUT_INITIAL_CONFIG=true", "SHADOW_MODE=true", "RESPONSE_DYNAMIC_METADATA=true")

	if code, ct, body := testkit.GetText(t, s.URL+"/rlconfig"); code != 200 || ct != "text/plain; charset=utf-8" || body != "" {
		t.Errorf("GET /rlconfig before the configuration = %d %s %q, want 200 text/plain and no text", code, ct, body)
	}
	conn, err := grpc.NewClient(s.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rls := rlsv3.NewRateLimitServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{
		{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "banned", Value: "x"}}},
		{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "service", Value: "blue"}}},
	}}
	if _, err := rls.ShouldRateLimit(ctx, req); status.Code(err) != codes.Unavailable || status.Convert(err).Message() != "no rate limit configuration loaded" {
		t.Fatalf("before the configuration: err = %v, want Unavailable \"no rate limit configuration loaded\"", err)
	}

	// The directory appears whole (as a ConfigMap swap does) and is picked up.
	staging := filepath.Join(filepath.Dir(dir), "staging")
	if err := os.Mkdir(staging, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(staging, "edge.yaml"), []byte(knobsYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(staging, dir); err != nil {
		t.Fatal(err)
	}
	var dump string
	for deadline := time.Now().Add(15 * time.Second); dump != knobsDump && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		_, _, dump = testkit.GetText(t, s.URL+"/rlconfig")
	}
	if diff := cmp.Diff(knobsDump, dump); diff != "" {
		t.Fatalf("GET /rlconfig after the configuration appeared (-want +got):\n%s", diff)
	}

	// SHADOW_MODE: the banned descriptor is over, the answer is OK.
	resp, err := rls.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	sts := []rlsv3.RateLimitResponse_Code{resp.GetStatuses()[0].GetCode(), resp.GetStatuses()[1].GetCode()}
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || sts[0] != rlsv3.RateLimitResponse_OVER_LIMIT || sts[1] != rlsv3.RateLimitResponse_OK ||
		resp.GetStatuses()[1].GetLimitRemaining() != 9 {
		t.Errorf("shadow mode: overall %v, statuses %v (remaining %d); want OK, [OVER_LIMIT OK], 9",
			resp.GetOverallCode(), sts, resp.GetStatuses()[1].GetLimitRemaining())
	}
	// RESPONSE_DYNAMIC_METADATA: the request, and the metadata of what passed.
	want := &structpb.Struct{}
	if err := protojson.Unmarshal([]byte(`{"domain": "edge",
		"descriptors": [{"entries": ["banned=x"]}, {"entries": ["service=blue"]}],
		"metadata": {"backend": "blue"}}`), want); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, resp.GetDynamicMetadata(), protocmp.Transform()); diff != "" {
		t.Errorf("dynamic metadata (-want +got):\n%s", diff)
	}
	if got := s.Metric(t, "throttle_ratelimit_global_shadow_mode_total"); got != 1 {
		t.Errorf("throttle_ratelimit_global_shadow_mode_total = %v, want 1", got)
	}

	// SHADOW_MODE reaches the rate-limit quota service too: the banned
	// bucket (requests_per_unit 0, DENY_ALL otherwise) is allowed all.
	q, err := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "edge", BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{
		BucketId: &rlqsv3.BucketId{Bucket: map[string]string{"banned": "x"}}, TimeElapsed: &durationpb.Duration{}, NumRequestsAllowed: 1,
	}}}); err != nil {
		t.Fatal(err)
	}
	qr, err := q.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if as := qr.GetBucketAction(); len(as) != 1 || as[0].GetQuotaAssignmentAction().GetRateLimitStrategy().GetBlanketRule() != typev3.RateLimitStrategy_ALLOW_ALL {
		t.Errorf("RLQS under SHADOW_MODE: %v, want the banned bucket's ALLOW_ALL", qr)
	}
	if got := s.Metric(t, "throttle_rlqs_shadow_mode_total"); got != 1 {
		t.Errorf("throttle_rlqs_shadow_mode_total = %v, want 1", got)
	}
}

// TestServeRefusesMissingConfig: without FORCE_START_WITHOUT_INITIAL_CONFIG a
// DESCRIPTORS_DIR that is missing or does not load stops the start, naming
// the problem and the setting that starts anyway.
func TestServeRefusesMissingConfig(t *testing.T) {
	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, "bad.yaml"), []byte("domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "missing")
	for _, tc := range []struct {
		dir, want string
	}{
		{missing, "DESCRIPTORS_DIR: read descriptors directory: open " + missing + ": no such file or directory (FORCE_START_WITHOUT_INITIAL_CONFIG=true starts without it)"},
		{bad, "DESCRIPTORS_DIR: " + filepath.Join(bad, "bad.yaml") + `:4: domain "edge" › descriptors[0] › rate_limit: invalid rate limit unit 'fortnight' (FORCE_START_WITHOUT_INITIAL_CONFIG=true starts without it)`},
	} {
		getenv := env(map[string]string{
			"DESCRIPTORS_DIR": tc.dir, "BIND_ADDRESS": "127.0.0.1", "LOG_LEVEL": "error",
			"PORT": strconv.Itoa(testkit.FreePort(t)), "GRPC_PORT": strconv.Itoa(testkit.FreePort(t)),
			"DATABASE_URL": "sqlite://" + filepath.Join(t.TempDir(), "t.db"),
		})
		var out bytes.Buffer
		err := run(context.Background(), []string{"serve"}, getenv, &out, &out)
		if err == nil || err.Error() != tc.want {
			t.Errorf("serve with DESCRIPTORS_DIR=%s: err = %v\nwant %s", tc.dir, err, tc.want)
		}
	}
}
