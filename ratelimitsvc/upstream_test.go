package ratelimitsvc_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/algorithms/redisstore"
	"github.com/throttle-rl/throttle/descriptors"
	"github.com/throttle-rl/throttle/ratelimitsvc"
)

// upstreamConfig is the reference service's own integration-test
// configuration directory (copied unchanged into descriptors/testdata).
const upstreamConfig = "../descriptors/testdata/test/integration/runtime/current/ratelimit"

// TestUpstreamIntegrationScenarios replays the request sequences of the
// reference service's integration tests (see the peer fixtures' INDEX.md)
// against Throttle loaded with the same files: the decisions must be the
// same. The counts too with COUNT_REJECTED_HITS; by default a request
// another descriptor rejects consumes nothing of the descriptors it passed.
func TestUpstreamIntegrationScenarios(t *testing.T) {
	for _, reference := range []bool{false, true} {
		for name, lim := range limiters(t) {
			t.Run(fmt.Sprintf("%s/count_rejected_hits=%v", name, reference), func(t *testing.T) {
				upstreamScenarios(t, lim, reference)
			})
		}
	}
}

func upstreamScenarios(t *testing.T, lim algorithms.Store, reference bool) {
	if _, ok := lim.(*redisstore.Store); ok {
		redisFlushDomains(t, "basic", "another", "share-threshold-test", "reload")
	}
	dir := t.TempDir()
	for _, f := range []string{"basic.yaml", "another.yaml", "share_threshold.yaml"} {
		copyFile(t, filepath.Join(upstreamConfig, "config", f), filepath.Join(dir, f))
	}
	r, err := descriptors.NewReloader(dir, time.Hour, descriptors.Options{}, quietLog(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	c, _ := serve(t, ratelimitsvc.Options{Limiter: lim, Descriptors: r.Current, CountRejectedHits: reference})

	// basic: (key1, foo) is 50 per second; an unknown domain has no limit.
	mustCall(t, c, 0, call{domain: "basic", descs: []*rlcommon.RateLimitDescriptor{desc("key1", "foo")},
		want: []*rlsv3.RateLimitResponse_DescriptorStatus{st(OK, 50, SEC, "", 49, time.Second)}})
	mustCall(t, c, 1, call{domain: "foo", descs: []*rlcommon.RateLimitDescriptor{desc("hello", "world")},
		want: []*rlsv3.RateLimitResponse_DescriptorStatus{none}})

	// another: 25 requests at 20 per minute: 20 OK counting down, then OVER_LIMIT.
	for i := 1; i <= 25; i++ {
		want := st(OK, 20, MIN, "", uint32(20-i), time.Minute)
		if i > 20 {
			want = st(OVER, 20, MIN, "", 0, time.Minute)
		}
		mustCall(t, c, i, call{domain: "another", descs: []*rlcommon.RateLimitDescriptor{desc("key2", "r1")},
			want: []*rlsv3.RateLimitResponse_DescriptorStatus{want}})
	}
	// Two descriptors, key3 at 10 per hour: OVER_LIMIT overall from
	// the 11th. The reference counts key2 on: 20-i left; Throttle's
	// default stops at 10 left, the requests key3 refused consumed
	// nothing.
	for i := 1; i <= 15; i++ {
		key3 := st(OK, 10, HOUR, "", uint32(10-i), time.Hour)
		if i > 10 {
			key3 = st(OVER, 10, HOUR, "", 0, time.Hour)
		}
		key2 := uint32(20 - min(i, 10))
		if reference {
			key2 = uint32(20 - i)
		}
		mustCall(t, c, i, call{domain: "another", descs: []*rlcommon.RateLimitDescriptor{desc("key2", "r2"), desc("key3", "r2")},
			want: []*rlsv3.RateLimitResponse_DescriptorStatus{st(OK, 20, MIN, "", key2, time.Minute), key3}})
	}

	// share_threshold: every files/* value shares one counter of 10 per hour.
	for i, v := range []string{"files/a.pdf", "files/a.pdf", "files/a.pdf", "files/a.pdf", "files/a.pdf",
		"files/b.csv", "files/b.csv", "files/b.csv", "files/b.csv", "files/b.csv"} {
		mustCall(t, c, i, call{domain: "share-threshold-test", descs: []*rlcommon.RateLimitDescriptor{desc("files", v)},
			want: []*rlsv3.RateLimitResponse_DescriptorStatus{st(OK, 10, HOUR, "", uint32(9-i), time.Hour)}})
	}
	mustCall(t, c, 10, call{domain: "share-threshold-test", descs: []*rlcommon.RateLimitDescriptor{desc("files", "files/c.txt")},
		want: []*rlsv3.RateLimitResponse_DescriptorStatus{st(OVER, 10, HOUR, "", 0, time.Hour)}})
	// Without share_threshold each value counts alone.
	for i := range 10 {
		mustCall(t, c, i, call{domain: "share-threshold-test", descs: []*rlcommon.RateLimitDescriptor{desc("files_no_share", "files_no_share/a.pdf")},
			want: []*rlsv3.RateLimitResponse_DescriptorStatus{st(OK, 10, HOUR, "", uint32(9-i), time.Hour)}})
	}
	mustCall(t, c, 10, call{domain: "share-threshold-test", descs: []*rlcommon.RateLimitDescriptor{desc("files_no_share", "files_no_share/b.csv")},
		want: []*rlsv3.RateLimitResponse_DescriptorStatus{st(OK, 10, HOUR, "", 9, time.Hour)}})

	// reload: reload.yaml copied in makes (block, foo) OVER_LIMIT;
	// removing it removes the domain again.
	block := call{domain: "reload", descs: []*rlcommon.RateLimitDescriptor{desc("block", "foo")}, want: []*rlsv3.RateLimitResponse_DescriptorStatus{none}}
	mustCall(t, c, 0, block)
	copyFile(t, filepath.Join(upstreamConfig, "reload.yaml"), filepath.Join(dir, "reload.yaml"))
	if changed, err := r.Reload(); !changed || err != nil {
		t.Fatalf("Reload() = %v, %v", changed, err)
	}
	block.want = []*rlsv3.RateLimitResponse_DescriptorStatus{st(OVER, 0, SEC, "", 0, time.Second)}
	mustCall(t, c, 1, block)
	if err := os.Remove(filepath.Join(dir, "reload.yaml")); err != nil {
		t.Fatal(err)
	}
	if changed, err := r.Reload(); !changed || err != nil {
		t.Fatalf("Reload() = %v, %v", changed, err)
	}
	block.want = []*rlsv3.RateLimitResponse_DescriptorStatus{none}
	mustCall(t, c, 2, block)
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o644); err != nil {
		t.Fatal(err)
	}
}
