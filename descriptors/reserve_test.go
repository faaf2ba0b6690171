package descriptors

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestMatchReserveHandle: a descriptor carrying its limit's handle entry
// matches the limit and counter it matches without it, wherever the entry
// is, and the match names the handle's value; other descriptors match as
// they always did.
func TestMatchReserveHandle(t *testing.T) {
	c := mustLoad(t, Options{}, ours+"reserve.yaml")
	plain := c.Match("llm", []Entry{{"generic_key", "tokens"}})
	if plain == nil || plain.Handle != "" || plain.Limit.Reserve == nil {
		t.Fatalf("match without the handle = %+v, want the reserve limit and no handle", plain)
	}
	want := Reserve{Hits: 1000, TTL: time.Minute, Handle: "request_id"}
	if diff := cmp.Diff(want, *plain.Limit.Reserve); diff != "" {
		t.Errorf("reserve (-want +got):\n%s", diff)
	}
	for _, es := range [][]Entry{
		{{"generic_key", "tokens"}, {"request_id", "r-1"}},
		{{"request_id", "r-1"}, {"generic_key", "tokens"}},
	} {
		m := c.Match("llm", es)
		if m == nil {
			t.Fatalf("Match(%v) = nil", es)
		}
		if m.Handle != "r-1" || m.Counter != plain.Counter || m.StatsKey != plain.StatsKey || m.ConfigKey != plain.ConfigKey {
			t.Errorf("Match(%v) = handle %q counter %q stats %q; want r-1, %q, %q", es, m.Handle, m.Counter, m.StatsKey, plain.Counter, plain.StatsKey)
		}
		if diff := cmp.Diff([]Entry{{"generic_key", "tokens"}}, m.Entries); diff != "" {
			t.Errorf("entries (-want +got):\n%s", diff)
		}
	}
	tenant := c.Match("llm", []Entry{{"tenant", "acme"}, {"request_id", "r-2"}})
	if tenant == nil || tenant.Handle != "r-2" || len(tenant.Limits) != 2 || tenant.Counter != c.Match("llm", []Entry{{"tenant", "acme"}}).Counter {
		t.Errorf("tenant match = %+v, want both limits, handle r-2 and the counter without it", tenant)
	}
	// A handle entry alone, or beside entries that match no reserving
	// limit, matches as it always did: here nothing.
	for _, es := range [][]Entry{{{"request_id", "r-3"}}, {{"generic_key", "other"}, {"request_id", "r-3"}}} {
		if m := c.Match("llm", es); m != nil {
			t.Errorf("Match(%v) = %+v, want nil", es, m)
		}
	}
}

// TestMatchHandleOnlyWhereReserved: the handle's key is taken out only
// for limits that reserve under it; elsewhere it is an entry like any.
func TestMatchHandleOnlyWhereReserved(t *testing.T) {
	c, err := Load(Options{}, Source{Name: "f", Data: []byte(`domain: d
descriptors:
  - key: k
    value: reserved
    rate_limit: {unit: hour, requests_per_unit: 10, reserve: {hits: 2, ttl: 10, handle: rid}}
  - key: k
    value: per_request
    descriptors:
      - key: rid
        rate_limit: {unit: hour, requests_per_unit: 1}
`)})
	if err != nil {
		t.Fatal(err)
	}
	m := c.Match("d", []Entry{{"k", "per_request"}, {"rid", "a"}})
	if m == nil || m.Handle != "" || m.Limit.RequestsPerUnit != 1 || !strings.Contains(m.Counter, "rid") {
		t.Fatalf("match = %+v, want the per-request limit, counted by rid", m)
	}
}

func TestDumpReserve(t *testing.T) {
	c := mustLoad(t, Options{}, ours+"reserve.yaml")
	want := `llm.generic_key_tokens: unit=HOUR requests_per_unit=10000, shadow_mode: false, always_count: true, reserve: hits=1000 ttl=1m0s handle=request_id
llm.tenant: unit=HOUR requests_per_unit=5000, shadow_mode: false, algorithm: token_bucket, reserve: hits=500 ttl=30s handle=request_id
llm.tenant: unit=MINUTE requests_per_unit=800, shadow_mode: false
`
	if got := c.Dump(); got != want {
		t.Errorf("Dump:\n got %s\nwant %s", got, want)
	}
}

// TestNewDomainReserve: rules reserve as YAML does, checked the same way.
func TestNewDomainReserve(t *testing.T) {
	limit := RateLimit{Unit: Hour, RequestsPerUnit: 100, Reserve: &Reserve{Hits: 10, TTL: 30 * time.Second, Handle: "rid"}}
	d, err := NewDomain("d", []Rule{{Entries: []Entry{{Key: "user"}}, Limit: limit}})
	if err != nil {
		t.Fatal(err)
	}
	if m := d.Match([]Entry{{"user", "u"}, {"rid", "x"}}); m == nil || m.Handle != "x" || m.Counter != d.Match([]Entry{{"user", "u"}}).Counter {
		t.Errorf("match = %+v, want handle x on the user's counter", m)
	}
	bad := limit
	bad.Reserve = &Reserve{Hits: 101, TTL: time.Second, Handle: "rid"}
	_, err = NewDomain("d", []Rule{{Entries: []Entry{{Key: "user"}}, Limit: bad}})
	if want := `rule 0: domain "d": reserve hits 101 must be between 1 and the limit, 100`; err == nil || err.Error() != want {
		t.Errorf("NewDomain error = %v, want %s", err, want)
	}
}
