package ratelimitheader

import (
	"testing"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
)

func TestFormatPolicy(t *testing.T) {
	for _, tt := range []struct {
		name string
		ps   []Policy
		want string
	}{
		{"one", []Policy{{Name: "default", Quota: 100, Window: 10}}, `"default";q=100;w=10`},
		{"several, in order", []Policy{{Name: "burst", Quota: 100, Window: 60}, {Name: "daily", Quota: 1000, Window: 86400}},
			`"burst";q=100;w=60, "daily";q=1000;w=86400`},
		{"no window", []Policy{{Name: "n", Quota: 5}}, `"n";q=5`},
		{"quota 0 is a quota", []Policy{{Name: "banned", Quota: 0, Window: 60}}, `"banned";q=0;w=60`},
		{"quote and backslash escaped", []Policy{{Name: `a"b\c`, Quota: 1, Window: 1}}, `"a\"b\\c";q=1;w=1`},
		{"non-ASCII, controls and % percent-encoded", []Policy{{Name: "é\t100%", Quota: 1, Window: 1}}, `"%C3%A9%09100%25";q=1;w=1`},
		{"printable ASCII kept", []Policy{{Name: " ~:*/_.-", Quota: 1, Window: 1}}, `" ~:*/_.-";q=1;w=1`},
		{"empty name is an empty String", []Policy{{Quota: 1, Window: 1}}, `"";q=1;w=1`},
		{"integers clamped to 15 digits", []Policy{{Name: "big", Quota: 1 << 62, Window: 1_000_000_000_000_000}}, `"big";q=999999999999999;w=999999999999999`},
		{"nothing", nil, ``},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := FormatPolicy(tt.ps...); got != tt.want {
				t.Errorf("FormatPolicy(%+v) = %s, want %s", tt.ps, got, tt.want)
			}
		})
	}
}

func TestFormatServiceLimit(t *testing.T) {
	for _, tt := range []struct {
		name string
		ls   []ServiceLimit
		want string
	}{
		{"one", []ServiceLimit{{Name: "default", Remaining: 50, Reset: 30}}, `"default";r=50;t=30`},
		{"several, in order", []ServiceLimit{{Name: "a", Remaining: 0, Reset: 7}, {Name: "b.c", Remaining: 9, Reset: 3600}}, `"a";r=0;t=7, "b.c";r=9;t=3600`},
		{"t 0 is sent", []ServiceLimit{{Name: "x", Remaining: 1, Reset: 0}}, `"x";r=1;t=0`},
		{"negative t left out", []ServiceLimit{{Name: "x", Remaining: 1, Reset: -1}}, `"x";r=1`},
		{"negative r clamped", []ServiceLimit{{Name: "x", Remaining: -3, Reset: 1}}, `"x";r=0;t=1`},
		{"escaped", []ServiceLimit{{Name: `q"\`, Remaining: 1, Reset: 1}}, `"q\"\\";r=1;t=1`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := FormatServiceLimit(tt.ls...); got != tt.want {
				t.Errorf("FormatServiceLimit(%+v) = %s, want %s", tt.ls, got, tt.want)
			}
		})
	}
}

func TestParseSets(t *testing.T) {
	for _, tt := range []struct {
		in          string
		want        Sets
		x, ietf     bool
		wantInvalid bool
	}{
		{in: "both", want: Both, x: true, ietf: true},
		{in: "x", want: X, x: true},
		{in: "ietf", want: IETF, ietf: true},
		{in: "", wantInvalid: true},
		{in: "X", wantInvalid: true},
		{in: "draft", wantInvalid: true},
	} {
		got, err := ParseSets(tt.in)
		if tt.wantInvalid {
			if err == nil {
				t.Errorf("ParseSets(%q) = %v, want an error", tt.in, got)
			}
			continue
		}
		if err != nil || got != tt.want || got.SendsX() != tt.x || got.SendsIETF() != tt.ietf || got.String() != tt.in {
			t.Errorf("ParseSets(%q) = %v (x %v, ietf %v), %v; want %v (x %v, ietf %v)", tt.in, got, got.SendsX(), got.SendsIETF(), err, tt.want, tt.x, tt.ietf)
		}
	}
	if got := Sets(0); got != Both {
		t.Errorf("zero Sets = %v, want both", got)
	}
}

func TestWindow(t *testing.T) {
	for _, tt := range []struct {
		name string
		l    algorithms.Limit
		want int64
	}{
		{"fixed window", algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 100, Window: time.Minute}, 60},
		{"sliding window", algorithms.Limit{Algorithm: algorithms.SlidingWindow, Limit: 100, Window: time.Hour}, 3600},
		{"gcra", algorithms.Limit{Algorithm: algorithms.GCRA, Limit: 3, Window: 60 * time.Second}, 60},
		{"sub-second window rounds up to 1", algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 1, Window: 250 * time.Millisecond}, 1},
		{"partial second rounds up", algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 1, Window: 1500 * time.Millisecond}, 2},
		{"token bucket, default rate: its window", algorithms.Limit{Algorithm: algorithms.TokenBucket, Limit: 7, Window: 30 * time.Second}, 30},
		{"token bucket, no window: a minute", algorithms.Limit{Algorithm: algorithms.TokenBucket, Limit: 7}, 60},
		{"token bucket, rate: limit/rate", algorithms.Limit{Algorithm: algorithms.TokenBucket, Limit: 100, RefillRate: 5}, 20},
		{"token bucket, rate: rounded up", algorithms.Limit{Algorithm: algorithms.TokenBucket, Limit: 10, RefillRate: 3}, 4},
		{"token bucket, rate: float noise is not a second", algorithms.Limit{Algorithm: algorithms.TokenBucket, Limit: 100, RefillRate: 100 / 3.0}, 3},
		{"token bucket, fast: at least 1", algorithms.Limit{Algorithm: algorithms.TokenBucket, Limit: 2, RefillRate: 1000}, 1},
		{"token bucket, slow: window ignored", algorithms.Limit{Algorithm: algorithms.TokenBucket, Limit: 2, Window: time.Minute, RefillRate: 0.001}, 2000},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := Window(tt.l); got != tt.want {
				t.Errorf("Window(%+v) = %d, want %d", tt.l, got, tt.want)
			}
		})
	}
}
