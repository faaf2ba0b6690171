package descriptors

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/throttle-rl/throttle/algorithms"
)

// entries builds request entries from key, value pairs.
func entries(kv ...string) []Entry {
	var es []Entry
	for i := 0; i+1 < len(kv); i += 2 {
		es = append(es, Entry{Key: kv[i], Value: kv[i+1]})
	}
	return es
}

// result is what a lookup test compares; nil means no limit.
type result struct {
	RPU       uint32
	Unit      Unit
	Stats     string
	Name      string
	Unlimited bool
	Shadow    bool
}

func summarize(m *Match) *result {
	if m == nil {
		return nil
	}
	return &result{RPU: m.Limit.RequestsPerUnit, Unit: m.Limit.Unit, Stats: m.StatsKey, Name: m.Limit.Name,
		Unlimited: m.Limit.Unlimited, Shadow: m.ShadowMode}
}

type lookup struct {
	domain string
	kv     []string
	want   *result
}

func runLookups(t *testing.T, c *Config, tests []lookup) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.domain+"/"+strings.Join(tt.kv, ","), func(t *testing.T) {
			got := summarize(c.Match(tt.domain, entries(tt.kv...)))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Match(%q, %q) (-want +got):\n%s", tt.domain, tt.kv, diff)
			}
		})
	}
}

func kv(s ...string) []string { return s }

func TestMatchBasicConfig(t *testing.T) {
	c := mustLoad(t, Options{}, upstream+"basic_config.yaml")
	td := "test-domain"
	runLookups(t, c, []lookup{
		{"foo_domain", kv("key1", "value1"), nil},
		{td, nil, nil},
		{td, kv("key1", "something"), nil},
		{td, kv("key1", "value1"), nil},
		{td, kv("key1", "value1", "subkey1", "something"), &result{RPU: 5, Unit: Second, Stats: "test-domain.key1_value1.subkey1"}},
		{td, kv("key1", "value1", "subkey1", "subvalue1"), &result{RPU: 10, Unit: Second, Stats: "test-domain.key1_value1.subkey1_subvalue1"}},
		{td, kv("key2", "something"), &result{RPU: 20, Unit: Minute, Stats: "test-domain.key2"}},
		{td, kv("key2", ""), &result{RPU: 20, Unit: Minute, Stats: "test-domain.key2"}},
		{td, kv("key2", "value2"), &result{RPU: 30, Unit: Minute, Stats: "test-domain.key2_value2"}},
		{td, kv("key2", "value3"), nil},
		{td, kv("key2", "value2", "subkey", "subvalue"), nil},
		{td, kv("key3", "foo"), &result{RPU: 1, Unit: Hour, Stats: "test-domain.key3"}},
		{td, kv("key4", "foo"), &result{RPU: 1, Unit: Day, Stats: "test-domain.key4", Name: "key4_rate_limit"}},
		{td, kv("key5", "value5", "subkey5", "subvalue"), nil},
		{td, kv("key5", "value5", "subkey5", "subvalue5"), &result{RPU: 25, Unit: Day, Stats: "test-domain.key5_value5.subkey5_subvalue5"}},
		{td, kv("key5", "value5"), &result{RPU: 15, Unit: Day, Stats: "test-domain.key5_value5"}},
		{td, kv("key6", "foo"), &result{Unlimited: true, Stats: "test-domain.key6"}},
		{td, kv("key7", "unspecified_value"), &result{RPU: 70, Unit: Minute, Stats: "test-domain.key7_unspecified_value"}},
		{td, kv("key7", "other"), &result{RPU: 70, Unit: Minute, Stats: "test-domain.key7_other"}},
		// upstream's detailed metric writes key_value even for an empty value
		{td, kv("key7", ""), &result{RPU: 70, Unit: Minute, Stats: "test-domain.key7_"}},
	})
}

func TestMatchShadowMode(t *testing.T) {
	c := mustLoad(t, Options{}, upstream+"shadowmode_config.yaml")
	td := "test-domain"
	runLookups(t, c, []lookup{
		{td, kv("key1", "value1", "subkey1", "subvalue1"), &result{RPU: 10, Unit: Second, Stats: "test-domain.key1_value1.subkey1_subvalue1", Shadow: true}},
		{td, kv("key2", "anything"), &result{RPU: 20, Unit: Minute, Stats: "test-domain.key2", Shadow: true}},
		{td, kv("key2", "value2"), &result{RPU: 30, Unit: Minute, Stats: "test-domain.key2_value2"}},
		{td, kv("key1", "value1", "subkey1", "x"), &result{RPU: 5, Unit: Second, Stats: "test-domain.key1_value1.subkey1"}},
	})
}

func TestMatchWildcard(t *testing.T) {
	c := mustLoad(t, Options{}, upstream+"wildcard.yaml")
	td := "test-domain"
	min20 := func(stats string) *result { return &result{RPU: 20, Unit: Minute, Stats: stats} }
	runLookups(t, c, []lookup{
		{td, kv("noVal", "foo1"), min20("test-domain.noVal")},
		{td, kv("noVal", "foo2"), min20("test-domain.noVal")},
		{td, kv("wild", "foo1"), min20("test-domain.wild_foo*")},
		{td, kv("wild", "foo2"), min20("test-domain.wild_foo*")},
		{td, kv("wild", "foo"), min20("test-domain.wild_foo*")},
		{td, kv("wild", "bar"), nil},
		{td, kv("noWild", "foo1"), nil},
		{td, kv("noWild", "foo"), min20("test-domain.noWild_foo")},
		{td, kv("nestedWild", "val1", "wild", "goo2"), min20("test-domain.nestedWild_val1.wild_goo*")},
		{td, kv("nestedWild", "val1", "wild", "foo2"), nil},
		{td, kv("midWild", "barab"), min20("test-domain.midWild_bar*b")},
		{td, kv("midWild", "bar123b"), min20("test-domain.midWild_bar*b")},
		{td, kv("midWild", "barb"), min20("test-domain.midWild_bar*b")},
		{td, kv("midWild", "bara"), nil},
		{td, kv("midWild", "xbarb"), nil},
		{td, kv("multiWild", "foo123bar456baz"), &result{RPU: 10, Unit: Minute, Stats: "test-domain.multiWild_foo*bar*baz"}},
		{td, kv("multiWild", "foobarbaz"), &result{RPU: 10, Unit: Minute, Stats: "test-domain.multiWild_foo*bar*baz"}},
		{td, kv("multiWild", "foo123baz"), nil},
		{td, kv("multiWild", "bar456baz"), nil},
	})
	// Without share_threshold every value has its own counter.
	a, b := c.Match(td, entries("wild", "foo1")), c.Match(td, entries("wild", "foo2"))
	if a.Counter == b.Counter {
		t.Errorf("wild foo1 and foo2 share counter %q without share_threshold", a.Counter)
	}
}

func TestMatchShareThreshold(t *testing.T) {
	c := mustLoad(t, Options{}, upstream+"share_threshold.yaml")
	td := "test-domain"
	per := func(n uint32, stats string) *result { return &result{RPU: n, Unit: Minute, Stats: stats} }
	runLookups(t, c, []lookup{
		{td, kv("files", "files/a.pdf"), per(100, "test-domain.files_files/*")},
		{td, kv("files", "files/b.csv"), per(100, "test-domain.files_files/*")},
		{td, kv("nested", "parent", "files", "nested/x"), per(200, "test-domain.nested_parent.files_nested/*")},
		{td, kv("files", "top/x", "files", "nested/y"), per(300, "test-domain.files_top/*.files_nested/*")},
		{td, kv("route", "api/v1", "method", "GET"), per(60, "test-domain.route_api/*.method")},
		{td, kv("service", "svc/x", "endpoint", "get"), per(80, "test-domain.service_svc/*.endpoint_get")},
		{td, kv("path", "path/a", "file", "file/b", "type", "t"), per(120, "test-domain.path_path/*.file_file/*.type")},
		{td, kv("user", "user/1", "resource", "res/2", "action", "x"), per(150, "test-domain.user_user/*.resource_res/*.action")},
		{td, kv("file", "test1"), per(50, "test-domain.file_test1")},
		{td, kv("file", "test2"), per(100, "test-domain.file_test*")},
		{td, kv("file", "testX"), per(100, "test-domain.file_test*")},
		{td, kv("midpath", "/api/x/v1"), per(100, "test-domain.midpath_/api*v1")},
		{td, kv("midpath", "/api/v2"), nil},
		{td, kv("multiroute", "svc..ep..rpc"), per(50, "test-domain.multiroute_svc*ep*rpc")},
		{td, kv("multiroute", "svcABCrpc"), nil},
		{td, kv("midroute", "/api/x/v2"), per(80, "test-domain.midroute_/api*v2")},
		{td, kv("tenant", "t1prod", "resource", "res1v2"), per(60, "test-domain.tenant_t*prod.resource_res*v2")},
	})

	counter := func(kv ...string) string { return c.Match(td, entries(kv...)).Counter }
	same := [][2][]string{
		{kv("files", "files/a.pdf"), kv("files", "files/b.csv")},
		{kv("files", "files/a.pdf"), kv("files", "files/*")}, // the pattern itself, matched exactly
		{kv("file", "test2"), kv("file", "testX")},
		{kv("path", "path/a", "file", "file/b", "type", "t"), kv("path", "path/z", "file", "file/b", "type", "t")},
		{kv("user", "user/1", "resource", "res/2", "action", "x"), kv("user", "user/9", "resource", "res/8", "action", "x")},
		{kv("route", "api/v1", "method", "GET"), kv("route", "api/v2", "method", "GET")},
	}
	for _, p := range same {
		if a, b := counter(p[0]...), counter(p[1]...); a != b {
			t.Errorf("counters of %q and %q: %q != %q, want shared", p[0], p[1], a, b)
		}
	}
	differ := [][2][]string{
		{kv("file", "test1"), kv("file", "test2")},
		// The child wildcard without share_threshold counts each value.
		{kv("path", "path/a", "file", "file/b", "type", "t"), kv("path", "path/a", "file", "file/c", "type", "t")},
		{kv("route", "api/v1", "method", "GET"), kv("route", "api/v1", "method", "POST")},
	}
	for _, p := range differ {
		if a, b := counter(p[0]...), counter(p[1]...); a == b {
			t.Errorf("counters of %q and %q are both %q, want apart", p[0], p[1], a)
		}
	}
	m := c.Match(td, entries("path", "path/a", "file", "file/b", "type", "t"))
	if diff := cmp.Diff([]string{"path/*", "", ""}, m.SharePatterns); diff != "" {
		t.Errorf("SharePatterns (-want +got):\n%s", diff)
	}
	if got := c.Match(td, entries("file", "test1")).SharePatterns; got != nil {
		t.Errorf("SharePatterns of an exact value = %q, want nil", got)
	}
}

func TestMatchValueToMetric(t *testing.T) {
	const y = `
domain: d
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: method
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: path
    value: /api/*
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 6}
  - key: exact
    value: v
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 7}
`
	c, err := Load(Options{}, Source{Name: "vtm.yaml", Data: []byte(y)})
	must(t, err)
	runLookups(t, c, []lookup{
		{"d", kv("route", "r1", "method", "GET"), &result{RPU: 5, Unit: Minute, Stats: "d.route_r1.method"}},
		{"d", kv("path", "/api/users"), &result{RPU: 6, Unit: Minute, Stats: "d.path_/api/users"}},
		{"d", kv("exact", "v"), &result{RPU: 7, Unit: Minute, Stats: "d.exact_v"}},
	})
}

func TestMatchMetadata(t *testing.T) {
	c := mustLoad(t, Options{}, upstream+"metadata.yaml")
	m := c.Match("test-domain", entries("key1", "value1", "subkey1", "x"))
	if diff := cmp.Diff(map[string]any{"name": "service_1"}, m.Metadata); diff != "" || m.Limit.RequestsPerUnit != 5 || m.Limit.Unit != Second {
		t.Errorf("key1/subkey1: %d/%s metadata (-want +got):\n%s", m.Limit.RequestsPerUnit, m.Limit.Unit, diff)
	}
	m = c.Match("test-domain", entries("key2", "x"))
	want := map[string]any{"service_with_quota": map[string]any{"name": "service_2"}}
	if diff := cmp.Diff(want, m.Metadata); diff != "" || m.Limit.RequestsPerUnit != 20 || m.Limit.Unit != Minute {
		t.Errorf("key2: %d/%s metadata (-want +got):\n%s", m.Limit.RequestsPerUnit, m.Limit.Unit, diff)
	}
}

func TestMatchMergedDomains(t *testing.T) {
	c := mustLoad(t, Options{MergeDomains: true}, upstream+"merge_domain_key1.yaml", upstream+"merge_domain_key2.yaml")
	runLookups(t, c, []lookup{
		{"test-domain", kv("key1", "value1"), &result{RPU: 10, Unit: Minute, Stats: "test-domain.key1_value1"}},
		{"test-domain", kv("key2", "value2"), &result{RPU: 20, Unit: Minute, Stats: "test-domain.key2_value2"}},
	})
}

func TestMatchIntegrationConfigs(t *testing.T) {
	c := mustLoad(t, Options{}, runtime+"config/basic.yaml", runtime+"config/another.yaml",
		runtime+"config/share_threshold.yaml", runtime+"reload.yaml")
	runLookups(t, c, []lookup{
		{"basic", kv("key1", "foo"), &result{RPU: 50, Unit: Second, Stats: "basic.key1"}},
		{"basic", kv("one_per_minute", "x"), &result{RPU: 1, Unit: Minute, Stats: "basic.one_per_minute"}},
		{"foo", kv("hello", "world"), nil},
		{"another", kv("key2", "r"), &result{RPU: 20, Unit: Minute, Stats: "another.key2"}},
		{"another", kv("key3", "r"), &result{RPU: 10, Unit: Hour, Stats: "another.key3"}},
		{"another", kv("key4", "r"), &result{RPU: 20, Unit: Day, Stats: "another.key4"}},
		{"share-threshold-test", kv("files", "files/a.pdf"), &result{RPU: 10, Unit: Hour, Stats: "share-threshold-test.files_files/*"}},
		{"share-threshold-test", kv("files_no_share", "files_no_share/a.pdf"), &result{RPU: 10, Unit: Hour, Stats: "share-threshold-test.files_no_share_files_no_share/*"}},
		{"reload", kv("block", "foo"), &result{RPU: 0, Unit: Second, Stats: "reload.block"}},
	})
	st := "share-threshold-test"
	if a, b := c.Match(st, entries("files", "files/a.pdf")), c.Match(st, entries("files", "files/c.txt")); a.Counter != b.Counter {
		t.Errorf("shared files counters differ: %q, %q", a.Counter, b.Counter)
	}
	if a, b := c.Match(st, entries("files_no_share", "files_no_share/a.pdf")), c.Match(st, entries("files_no_share", "files_no_share/b.csv")); a.Counter == b.Counter {
		t.Errorf("files_no_share values share counter %q", a.Counter)
	}
	block := c.Match("reload", entries("block", "foo"))
	if !block.Limit.AlwaysOverLimit() {
		t.Error("reload block 0/s: AlwaysOverLimit() = false")
	}
	if _, err := block.Limit.EngineLimit(); err == nil {
		t.Error("reload block 0/s: EngineLimit() gave no error")
	}
}

func TestMatchExamples(t *testing.T) {
	c := mustLoad(t, Options{}, examples+"config.yaml", examples+"example.yaml")
	runLookups(t, c, []lookup{
		{"mongo_cps", kv("database", "users"), &result{RPU: 500, Unit: Second, Stats: "mongo_cps.database_users"}},
		{"mongo_cps", kv("database", "default"), &result{RPU: 500, Unit: Second, Stats: "mongo_cps.database_default"}},
		{"mongo_cps", kv("database", "other"), nil},
		{"rl", kv("foo", "x"), &result{RPU: 2, Unit: Minute, Stats: "rl.foo"}},
		{"rl", kv("foo", "x", "bar", "y"), &result{RPU: 3, Unit: Minute, Stats: "rl.foo.bar"}},
		{"rl", kv("foo", "x", "bar", "banned"), &result{RPU: 0, Unit: Minute, Stats: "rl.foo.bar_banned", Name: "banned_limit"}},
		{"rl", kv("foo", "x", "baz", "y"), &result{RPU: 1, Unit: Second, Stats: "rl.foo.baz"}},
		{"rl", kv("foo", "x", "baz", "shady"), &result{RPU: 3, Unit: Minute, Stats: "rl.foo.baz_shady", Shadow: true}},
		{"rl", kv("foo", "x", "bay", "y"), &result{Unlimited: true, Stats: "rl.foo.bay"}},
		{"rl", kv("qux", "y"), &result{Unlimited: true, Stats: "rl.qux"}},
		{"rl", kv("unspec", "abc"), &result{RPU: 2, Unit: Minute, Stats: "rl.unspec_abc"}},
		{"rl", kv("source_cluster", "proxy", "destination_cluster", "mock"), &result{RPU: 1, Unit: Minute, Stats: "rl.source_cluster_proxy.destination_cluster_mock"}},
	})
	m := c.Match("rl", entries("service", "service_1"))
	if !m.QuotaMode || m.Metadata == nil {
		t.Errorf("service_1: QuotaMode %v, Metadata %v", m.QuotaMode, m.Metadata)
	}
}

// TestApplyReplaces follows upstream's example.yaml: the account limit
// (replaces bkthomps and fake_name) and the bkthomps limit both match.
func TestApplyReplaces(t *testing.T) {
	c := mustLoad(t, Options{}, examples+"example.yaml")
	names := func(ms []*Match) []string {
		var out []string
		for _, m := range ms {
			if m == nil {
				out = append(out, "-")
			} else {
				out = append(out, m.StatsKey)
			}
		}
		return out
	}
	tests := []struct {
		name string
		reqs [][]string
		want []string
	}{
		{"account replaces bkthomps",
			[][]string{kv("category", "account"), kv("foo", "f", "bar", "bkthomps")},
			[]string{"rl.category_account", "-"}},
		{"account replaces fake_name",
			[][]string{kv("category", "account"), kv("source_cluster", "proxy", "destination_cluster", "fake")},
			[]string{"rl.category_account", "-"}},
		{"override replaces the ban",
			[][]string{kv("source_cluster", "proxy", "destination_cluster", "override"), kv("foo", "f", "bar", "banned")},
			[]string{"rl.source_cluster_proxy.destination_cluster_override", "-"}},
		{"a limit named in replaces of another descriptor's limit that did not match stays",
			[][]string{kv("foo", "f", "bar", "bkthomps"), kv("nothing", "x")},
			[]string{"rl.foo.bar_bkthomps", "-"}},
		{"bkthomps replaces its own name only in others",
			[][]string{kv("source_cluster", "proxy", "destination_cluster", "bkthomps"), kv("foo", "f", "bar", "bkthomps")},
			[]string{"rl.source_cluster_proxy.destination_cluster_bkthomps", "-"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ms []*Match
			for _, r := range tt.reqs {
				ms = append(ms, c.Match("rl", entries(r...)))
			}
			got := ApplyReplaces(ms)
			if diff := cmp.Diff(tt.want, names(got)); diff != "" {
				t.Errorf("ApplyReplaces (-want +got):\n%s", diff)
			}
			if &got[0] != &ms[0] {
				t.Errorf("ApplyReplaces returned a copy, want ms itself")
			}
		})
	}
}

// TestCounterUnambiguous: upstream joins key and value with '_', so
// (a, b_c) and (a_b, c) share a cache key there; here they must not.
func TestCounterUnambiguous(t *testing.T) {
	d, err := NewDomain("d", []Rule{
		{Entries: entries("a", ""), Limit: RateLimit{RequestsPerUnit: 1, Unit: Second}},
		{Entries: entries("a_b", ""), Limit: RateLimit{RequestsPerUnit: 1, Unit: Second}},
		{Entries: entries("x", "", "y", ""), Limit: RateLimit{RequestsPerUnit: 1, Unit: Second}},
		{Entries: entries("x", "1:y"), Limit: RateLimit{RequestsPerUnit: 1, Unit: Second}},
	})
	must(t, err)
	pairs := [][2][]Entry{
		{entries("a", "b_c"), entries("a_b", "c")},
		{entries("x", "", "y", ""), entries("x", "1:y")},
	}
	for _, p := range pairs {
		a, b := d.Match(p[0]), d.Match(p[1])
		if a == nil || b == nil {
			t.Fatalf("no match for %v or %v", p[0], p[1])
		}
		if a.Counter == b.Counter || a.Key() == b.Key() {
			t.Errorf("%v and %v share counter %q", p[0], p[1], a.Counter)
		}
	}
	// And the same request keeps its counter.
	if a, b := d.Match(entries("a", "b_c")), d.Match(entries("a", "b_c")); a.Key() != b.Key() {
		t.Errorf("one request, two keys: %v, %v", a.Key(), b.Key())
	}
	if got, want := d.Match(entries("a", "v")).Key(), (algorithms.Key{Scope: "domain/d", Identifier: "1:a1:v"}); got != want {
		t.Errorf("Key() = %+v, want %+v", got, want)
	}
}

func TestWildcardMatch(t *testing.T) {
	tests := []struct {
		pattern, s string
		want       bool
	}{
		{"*", "", true}, {"*", "abc", true}, {"a*", "a", true}, {"a*", "ab", true}, {"a*", "ba", false},
		{"*a", "ba", true}, {"*a", "ab", false}, {"a*b*c", "abc", true}, {"a*b*c", "aXbYc", true},
		{"a*b*c", "aXbY", false}, {"a**b", "ab", true}, {"a*b", "abab", true}, {"a*ab", "aab", true},
		{"abc", "abc", true}, {"abc", "abcd", false}, {"", "", true}, {"", "a", false},
	}
	for _, tt := range tests {
		if got := wildcardMatch(tt.pattern, tt.s); got != tt.want {
			t.Errorf("wildcardMatch(%q, %q) = %v, want %v", tt.pattern, tt.s, got, tt.want)
		}
	}
}
