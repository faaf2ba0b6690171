package ruledomain

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/descriptors"
	"github.com/throttle-rl/throttle/internal/testkit/logbuf"
	"github.com/throttle-rl/throttle/store"
)

// rules is a Source of fixed rules, for the cache's own logic (store.Cache,
// the real Source, is tested in package store).
type rules struct {
	clients  map[string]store.Client
	rules    map[string][]store.Rule
	revision int64
}

func (r *rules) ClientByDomain(domain string) (store.Client, bool) {
	c, ok := r.clients[domain]
	return c, ok
}
func (r *rules) DescriptorRules(id string) []store.Rule { return r.rules[id] }
func (r *rules) Override(string, string, string) (store.Override, bool) {
	return store.Override{}, false
}
func (r *rules) ClientRevision(string) int64 { return r.revision }

func TestCache(t *testing.T) {
	src := &rules{
		clients: map[string]store.Client{"app": {ID: "c1", Domain: "app"}, "empty": {ID: "c2", Domain: "empty"}},
		rules: map[string][]store.Rule{"c1": {{
			Name: "login", Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 5, Window: time.Minute},
			Descriptors: []store.DescriptorEntry{{Key: "path", Value: "/login"}},
		}}},
		revision: 1,
	}
	logs := &logbuf.Buffer{}
	c := New(src, slog.New(slog.NewTextHandler(logs, nil)))
	d := c.Domain("app")
	m := d.Match([]descriptors.Entry{{Key: "path", Value: "/login"}})
	if m == nil || m.Limit.RequestsPerUnit != 5 || m.Limit.Unit != descriptors.Minute {
		t.Fatalf("match = %+v, want 5 per minute", m)
	}
	if c.Domain("app") != d {
		t.Error("domain rebuilt without a change of the rules")
	}
	if c.Domain("nobody") != nil || c.Owned("nobody") {
		t.Error("a domain no client owns")
	}
	if c.Domain("empty") != nil || !c.Owned("empty") {
		t.Error("a client without descriptor rules: owned, no domain")
	}
	// A change of the rules builds it again; rules refused are logged and
	// give no domain.
	src.rules["c1"] = append(src.rules["c1"], src.rules["c1"][0])
	src.revision++
	if got := c.Domain("app"); got != nil {
		t.Errorf("duplicate rules gave a domain: %v", got)
	}
	if !strings.Contains(logs.String(), "client descriptor rules refused") {
		t.Errorf("refusal not logged: %s", logs.String())
	}
	if New(nil, slog.Default()).Domain("app") != nil {
		t.Error("no source, yet a domain")
	}
}

func TestRules(t *testing.T) {
	got := Rules([]store.Rule{
		{Name: "a", Limit: algorithms.Limit{Algorithm: algorithms.TokenBucket, Limit: 10, RefillRate: 0.5}, Descriptors: []store.DescriptorEntry{{Key: "k"}}},
		{Name: "b", Limit: algorithms.Limit{Algorithm: algorithms.GCRA, Limit: 1 << 40, Window: 90 * time.Second}, Descriptors: []store.DescriptorEntry{{Key: "k", Value: "v"}}},
	})
	// No window: a minute, the token bucket's own default (limit/60).
	if got[0].Limit.Unit != descriptors.Minute || got[0].Limit.Window != time.Minute || got[0].Limit.RefillRate != 0.5 || got[0].Entries[0] != (descriptors.Entry{Key: "k"}) {
		t.Errorf("token bucket rule = %+v", got[0])
	}
	if _, err := descriptors.NewDomain("d", got[:1]); err != nil {
		t.Errorf("a token bucket rule without a window is refused: %v", err)
	}
	if l := got[1].Limit; l.RequestsPerUnit != 1<<32-1 || l.Window != 90*time.Second || l.Unit != descriptors.Second || l.UnitMultiplier != 90 {
		t.Errorf("gcra rule = %+v (limit capped at Envoy's uint32, window 90 × SECOND)", got[1])
	}
}

// TestRulesAccuracy: a rule's accuracy, and each of its rate_limits', is
// its descriptor limits' (so an Envoy request it matches is decided
// approximately), and an override keeps it.
func TestRulesAccuracy(t *testing.T) {
	approx := algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 640, Window: time.Hour, Accuracy: algorithms.Approximate}
	got := Rules([]store.Rule{
		{Name: "one", Limit: approx, Descriptors: []store.DescriptorEntry{{Key: "user"}}},
		{Name: "two", Descriptors: []store.DescriptorEntry{{Key: "path"}}, RateLimits: []store.RuleLimit{
			{Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 10, Window: time.Second}},
			{Limit: algorithms.Limit{Algorithm: algorithms.SlidingWindow, Limit: 1000, Window: 24 * time.Hour, Accuracy: algorithms.Approximate}},
		}},
	})
	if got[0].Limit.Accuracy != algorithms.Approximate || got[1].Limit.Accuracy != algorithms.Exact || got[1].More[0].Accuracy != algorithms.Approximate {
		t.Errorf("accuracies = %q, %q, %q; want approximate, exact, approximate", got[0].Limit.Accuracy, got[1].Limit.Accuracy, got[1].More[0].Accuracy)
	}
	d, err := descriptors.NewDomain("d", got)
	if err != nil {
		t.Fatal(err)
	}
	m := d.Match([]descriptors.Entry{{Key: "user", Value: "acme"}})
	if m == nil {
		t.Fatal("no match for user=acme")
	}
	el, err := m.Limit.EngineLimit()
	if err != nil || el != approx {
		t.Errorf("engine limit of the match = %+v, %v; want %+v", el, err, approx)
	}
	over, err := WithOverride(m.Limit, store.Override{Limit: 6400}).EngineLimit()
	if want := (algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 6400, Window: time.Hour, Accuracy: algorithms.Approximate}); err != nil || over != want {
		t.Errorf("engine limit with an override = %+v, %v; want %+v", over, err, want)
	}
}

// TestRulesScope: a rule's scope, and each of its rate_limits', is its
// descriptor limits' (so an Envoy request it matches is counted in the
// global Redis), and an override keeps it.
func TestRulesScope(t *testing.T) {
	global := algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 6000, Window: time.Minute, Accuracy: algorithms.Approximate, Global: true}
	got := Rules([]store.Rule{
		{Name: "one", Limit: global, Descriptors: []store.DescriptorEntry{{Key: "tenant"}}},
		{Name: "two", Descriptors: []store.DescriptorEntry{{Key: "path"}}, RateLimits: []store.RuleLimit{
			{Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 10, Window: time.Second}},
			{Limit: algorithms.Limit{Algorithm: algorithms.SlidingWindow, Limit: 1000, Window: 24 * time.Hour, Accuracy: algorithms.Approximate, Global: true}},
		}},
	})
	if !got[0].Limit.Global || got[1].Limit.Global || !got[1].More[0].Global {
		t.Errorf("scopes = %v, %v, %v; want global, regional, global", got[0].Limit.Global, got[1].Limit.Global, got[1].More[0].Global)
	}
	d, err := descriptors.NewDomain("d", got)
	if err != nil {
		t.Fatal(err)
	}
	m := d.Match([]descriptors.Entry{{Key: "tenant", Value: "acme"}})
	if m == nil {
		t.Fatal("no match for tenant=acme")
	}
	el, err := m.Limit.EngineLimit()
	if err != nil || el != global {
		t.Errorf("engine limit of the match = %+v, %v; want %+v", el, err, global)
	}
	over, err := WithOverride(m.Limit, store.Override{Limit: 60_000}).EngineLimit()
	want := global
	want.Limit = 60_000
	if err != nil || over != want {
		t.Errorf("engine limit with an override = %+v, %v; want %+v", over, err, want)
	}
}
