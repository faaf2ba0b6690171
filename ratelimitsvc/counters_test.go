package ratelimitsvc_test

import (
	"context"
	"errors"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/google/go-cmp/cmp"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/internal/envoycounters"
	"github.com/throttle-rl/throttle/ratelimitsvc"
)

func counterDesc(kv ...string) envoycounters.Descriptor {
	var d envoycounters.Descriptor
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, envoycounters.Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// TestCounters: the REST API's read and reset of Envoy counters go through
// the same matching and the same engine keys as ShouldRateLimit: a read
// counts nothing, a reset makes the next request start afresh, and every
// limit of a descriptor is read and reset.
func TestCounters(t *testing.T) {
	eachServer(t, ratelimitsvc.Options{}, func(t *testing.T, s *ratelimitsvc.Server, c rlsv3.RateLimitServiceClient, clock *testClock) {
		ctx := context.Background()
		for range 2 {
			ask(t, c, limits(desc("user_id", "alice"), desc("ip", "10.0.0.1")))
		}
		ask(t, c, limits(desc("user", "bob")))
		burst := envoycounters.Limit{Name: "burst", RequestsPerUnit: 3, Unit: "SECOND", UnitMultiplier: 1, Window: time.Second, Algorithm: "fixed_window"}
		sustained := envoycounters.Limit{Name: "sustained", RequestsPerUnit: 5, Unit: "HOUR", UnitMultiplier: 1, Window: time.Hour, Algorithm: "fixed_window"}
		report := envoycounters.Limit{RequestsPerUnit: 2, Unit: "MINUTE", UnitMultiplier: 5, Window: 5 * time.Minute, Algorithm: "fixed_window"}
		read := func(want ...envoycounters.Counters) {
			t.Helper()
			for range 2 { // a read counts nothing
				got, err := s.ReadCounters(ctx, "limits", []envoycounters.Descriptor{
					counterDesc("user_id", "alice"), counterDesc("user", "bob"), counterDesc("nothing", "x"), counterDesc("report", "r"),
				})
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Fatalf("ReadCounters (-want +got):\n%s", diff)
				}
			}
		}
		with := func(l envoycounters.Limit, remaining int64, reset time.Duration) envoycounters.Limit {
			l.Remaining, l.ResetAfter = remaining, reset
			return l
		}
		fiveMin := 5*time.Minute - t0Offset(5*time.Minute)
		read(
			envoycounters.Counters{Matched: true, Key: "user_id", Limits: []envoycounters.Limit{with(burst, 1, time.Second), with(sustained, 3, time.Hour)}},
			envoycounters.Counters{Matched: true, Key: "user", Limits: []envoycounters.Limit{
				with(envoycounters.Limit{RequestsPerUnit: 1, Unit: "MINUTE", UnitMultiplier: 1, Window: time.Minute, Algorithm: "fixed_window"}, 0, time.Minute)}},
			envoycounters.Counters{},
			envoycounters.Counters{Matched: true, Key: "report", Limits: []envoycounters.Limit{with(report, 2, fiveMin)}},
		)

		got, n, err := s.ResetCounters(ctx, "limits", []envoycounters.Descriptor{counterDesc("user_id", "alice"), counterDesc("user", "bob")})
		if err != nil {
			t.Fatal(err)
		}
		if n != 3 || len(got) != 2 || len(got[0].Limits) != 2 || got[0].Limits[0].Name != "burst" {
			t.Errorf("ResetCounters = %+v, %d; want user_id's two limits and user's one, 3 counters", got, n)
		}
		wantCodes(t, 0, ask(t, c, limits(desc("user_id", "alice"))), OK, st(OK, 3, SEC, "burst", 2, time.Second))
		wantCodes(t, 1, ask(t, c, limits(desc("user", "bob"))), OK, st(OK, 1, MIN, "", 0, time.Minute))
		// Other counters are untouched.
		wantCodes(t, 2, ask(t, c, limits(desc("ip", "10.0.0.1"))), OK, st(OK, 100, MIN, "", 97, time.Minute))
		if _, n, err := s.ResetCounters(ctx, "limits", []envoycounters.Descriptor{counterDesc("user", "nobody")}); err != nil || n != 0 {
			t.Errorf("reset of a counter that does not exist = %d, %v; want 0, nil", n, err)
		}

		// A limit override has its own counter, read and reset as such.
		o := counterDesc("ip", "10.0.0.1")
		o.Limit = &envoycounters.Override{RequestsPerUnit: 10, Unit: "minute", UnitMultiplier: 2}
		got, err = s.ReadCounters(ctx, "limits", []envoycounters.Descriptor{o})
		if err != nil || len(got) != 1 || len(got[0].Limits) != 1 || got[0].Limits[0].Remaining != 10 || got[0].Limits[0].Window != 2*time.Minute {
			t.Errorf("read of an override = %+v, %v; want 10 of 10 per 2 minutes", got, err)
		}
	})
}

func TestCountersRefused(t *testing.T) {
	s, _, _ := serveServer(t, ratelimitsvc.Options{Limiter: memoryAt(t0), Descriptors: loadConfig(t, "testdata/limits.yaml"), MaxDescriptors: 2})
	ctx := context.Background()
	if src := s.DomainSource("limits"); src != envoycounters.YAML {
		t.Errorf("DomainSource(limits) = %v, want YAML", src)
	}
	if src := s.DomainSource("elsewhere"); src != envoycounters.NoLimits {
		t.Errorf("DomainSource(elsewhere) = %v, want NoLimits", src)
	}
	badUnit := counterDesc("ip", "x")
	badUnit.Limit = &envoycounters.Override{RequestsPerUnit: 1, Unit: "fortnight"}
	for _, tc := range []struct {
		domain string
		ds     []envoycounters.Descriptor
		is     error
		msg    string
	}{
		{"elsewhere", []envoycounters.Descriptor{counterDesc("ip", "x")}, envoycounters.ErrNoLimits, `domain "elsewhere": neither the descriptor YAML nor a client's rules with descriptors limit it`},
		{"limits", nil, envoycounters.ErrInvalid, "rate limit descriptor list must not be empty"},
		{"limits", []envoycounters.Descriptor{{}}, envoycounters.ErrInvalid, "descriptor 0 has no entries"},
		{"limits", []envoycounters.Descriptor{counterDesc("", "x")}, envoycounters.ErrInvalid, "descriptor 0 entry 0 has an empty key"},
		{"limits", []envoycounters.Descriptor{counterDesc("a", "1"), counterDesc("a", "2"), counterDesc("a", "3")}, envoycounters.ErrInvalid,
			"rate limit request has 3 descriptors, more than the 2 allowed (MAX_DESCRIPTORS_PER_REQUEST)"},
		{"limits", []envoycounters.Descriptor{badUnit}, envoycounters.ErrInvalid, `descriptor 0 limit: unit "fortnight" is not one of second, minute, hour, day, week, month, year`},
	} {
		_, err := s.ReadCounters(ctx, tc.domain, tc.ds)
		if !errors.Is(err, tc.is) || err.Error() != tc.msg {
			t.Errorf("ReadCounters(%q, %v) = %v; want %q", tc.domain, tc.ds, err, tc.msg)
		}
		_, _, err = s.ResetCounters(ctx, tc.domain, tc.ds)
		if !errors.Is(err, tc.is) || err.Error() != tc.msg {
			t.Errorf("ResetCounters(%q, %v) = %v; want %q", tc.domain, tc.ds, err, tc.msg)
		}
	}
}

// memoryAt is a memory store whose clock stands at now.
func memoryAt(now time.Time) algorithms.Store {
	return algorithms.NewMemoryStore(algorithms.MemoryOptions{Now: func() time.Time { return now }})
}
