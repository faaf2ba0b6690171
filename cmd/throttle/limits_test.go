package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/descriptors"
	"github.com/throttle-rl/throttle/internal/testkit"
	"github.com/throttle-rl/throttle/internal/testkit/redistest"
	"github.com/throttle-rl/throttle/internal/testkit/throttletest"
)

// e2eAdminKey is ADMIN_API_KEY in these tests.
const e2eAdminKey = "operator-key-for-e2e-tests"

// issue17Setups are the two counter stores, each with its database.
func issue17Setups(t *testing.T, env ...string) map[string][]string {
	dir := t.TempDir()
	data, err := os.ReadFile("testdata/shop.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "shop.yaml"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	common := append([]string{"DESCRIPTORS_DIR=" + dir, "ADMIN_API_KEY=" + e2eAdminKey, "RATE_LIMIT_RESPONSE_HEADERS=true"}, env...)
	return map[string][]string{
		"memory": common,
		"redis":  append([]string{"REDIS_URL=" + redistest.SharedURL(t), "DATABASE_URL=" + freshPostgres(t), "BACKEND_TIMEOUT=2s"}, common...),
	}
}

// rlsClient is a rate-limit client of s.
func rlsClient(t *testing.T, s *throttletest.Server) rlsv3.RateLimitServiceClient {
	t.Helper()
	return rlsDial(t, s.GRPCAddr)
}

func rlsDesc(kv ...string) *rlcommon.RateLimitDescriptor {
	d := &rlcommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func rlsHits(d *rlcommon.RateLimitDescriptor, n uint64) *rlcommon.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

func askRLS(t *testing.T, c rlsv3.RateLimitServiceClient, domain string, ds ...*rlcommon.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds})
	if err != nil {
		t.Fatalf("ShouldRateLimit(%s, %v): %v", domain, ds, err)
	}
	return resp
}

// outcome is a response's overall code and each status's code and remaining,
// as "OK ok:99 over:0".
func outcome(resp *rlsv3.RateLimitResponse) string {
	parts := []string{resp.GetOverallCode().String()}
	for _, st := range resp.GetStatuses() {
		c := "ok"
		if st.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			c = "over"
		}
		parts = append(parts, c+":"+strconv.FormatUint(uint64(st.GetLimitRemaining()), 10))
	}
	return strings.Join(parts, " ")
}

func header(resp *rlsv3.RateLimitResponse, name string) string {
	for _, h := range resp.GetResponseHeadersToAdd() {
		if h.GetKey() == name {
			return h.GetValue()
		}
	}
	return ""
}

// TestIssue17EndToEnd drives the built binary, with memory counters and
// with Redis: burst + sustained limits on one descriptor, a rejected
// request consuming nothing, a 5-hour window, costs charged after the
// response, and the Envoy counters read and reset over REST.
func TestIssue17EndToEnd(t *testing.T) {
	for name, env := range issue17Setups(t) {
		t.Run(name, func(t *testing.T) {
			s := throttletest.Start(t, append(env, "RLCONFIG_ON_REST_PORT=true")...)
			c := rlsClient(t, s)
			run := strconv.FormatInt(time.Now().UnixNano(), 36) // fresh counters in the shared Redis

			// Burst (3/hour) and sustained (5/day) on one key: the fourth
			// request is refused by burst and not counted by daily.
			user := rlsDesc("user_id", "alice-"+run)
			for i, want := range []string{"OK ok:2", "OK ok:1", "OK ok:0", "OVER_LIMIT over:0"} {
				if got := outcome(askRLS(t, c, "shop", user)); got != want {
					t.Fatalf("user_id request %d: %s, want %s", i, got, want)
				}
			}
			resp := askRLS(t, c, "shop", user)
			if p := header(resp, "RateLimit-Policy"); p != `"burst";q=3;w=3600, "daily";q=5;w=86400` {
				t.Errorf("RateLimit-Policy = %q", p)
			}
			if r := header(resp, "RateLimit"); !strings.HasPrefix(r, `"burst";r=0;t=`) || !strings.Contains(r, `"daily";r=2;t=`) {
				t.Errorf("RateLimit = %q, want burst at 0 and daily at 2 (the rejected requests consumed nothing)", r)
			}
			if cl := resp.GetStatuses()[0].GetCurrentLimit(); cl.GetName() != "burst" {
				t.Errorf("status reports %v, want the burst limit that refused", cl)
			}

			// The issue's example: ip 100/hour, user 1/hour, four requests
			// carrying both: ip has 99 left.
			both := []*rlcommon.RateLimitDescriptor{rlsDesc("ip", "10.0.0.1-"+run), rlsDesc("user", "bob-"+run)}
			for i, want := range []string{"OK ok:99 ok:0", "OVER_LIMIT ok:99 over:0", "OVER_LIMIT ok:99 over:0", "OVER_LIMIT ok:99 over:0"} {
				if got := outcome(askRLS(t, c, "shop", both...)); got != want {
					t.Fatalf("ip+user request %d: %s, want %s", i, got, want)
				}
			}

			// Any window: 2 per 5 hours.
			resp = askRLS(t, c, "shop", rlsDesc("report", "r-"+run))
			if cl := resp.GetStatuses()[0].GetCurrentLimit(); cl.GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR || cl.GetUnitMultiplier().GetValue() != 5 || cl.GetRequestsPerUnit() != 2 {
				t.Errorf("current_limit = %v, want 2 per 5 HOUR", cl)
			}
			if p := header(resp, "RateLimit-Policy"); p != `"report";q=2;w=18000` {
				t.Errorf("RateLimit-Policy = %q, want w=18000", p)
			}
			if l := header(resp, "X-RateLimit-Limit"); l != "2, 2;w=18000" {
				t.Errorf("X-RateLimit-Limit = %q, want 2, 2;w=18000", l)
			}

			// Costs after the response: checks of 0, charges past what is left.
			tokens := func(n uint64) *rlcommon.RateLimitDescriptor { return rlsHits(rlsDesc("tokens", "acme-"+run), n) }
			for i, step := range []struct {
				hits uint64
				want string
			}{
				{0, "OK ok:300"}, {250, "OK ok:50"}, {0, "OK ok:50"}, {100, "OVER_LIMIT over:0"}, {0, "OVER_LIMIT over:0"}, {1, "OVER_LIMIT over:0"},
			} {
				if got := outcome(askRLS(t, c, "shop", tokens(step.hits))); got != step.want {
					t.Fatalf("tokens step %d (hits %d): %s, want %s", i, step.hits, got, step.want)
				}
			}

			// A charge is counted even when the over-limit cache knows the
			// budget is spent: it never answers one.
			cached := s.Metric(t, "throttle_overlimit_cache_hits_total")
			if got := outcome(askRLS(t, c, "shop", tokens(200))); got != "OVER_LIMIT over:0" {
				t.Errorf("a charge of 200 in debt: %s, want OVER_LIMIT over:0", got)
			}
			if got := s.Metric(t, "throttle_overlimit_cache_hits_total"); got != cached {
				t.Errorf("throttle_overlimit_cache_hits_total went from %v to %v on an always_count charge: it was not counted", cached, got)
			}

			// The operator reads and resets the YAML domain's counters.
			alice := `{"descriptors":[{"entries":[{"key":"user_id","value":"alice-` + run + `"}]}]}`
			code, _, body := doJSON(t, "POST", s.URL+"/descriptors/shop/counters", e2eAdminKey, alice)
			limits := counterLimits(t, body)
			if code != 200 || len(limits) != 2 || limits[0]["remaining"] != float64(0) || limits[1]["remaining"] != float64(2) {
				t.Fatalf("operator read = %d %v, want burst 0 and daily 2 remaining", code, body)
			}
			code, _, body = doJSON(t, "POST", s.URL+"/descriptors/shop/counters/reset", e2eAdminKey, alice)
			if code != 200 || body["keys_deleted"] != float64(2) {
				t.Fatalf("operator reset = %d %v, want 2 keys deleted", code, body)
			}
			if got := outcome(askRLS(t, c, "shop", user)); got != "OK ok:2" {
				t.Errorf("alice after the reset: %s, want OK ok:2 (the over-limit cache forgot her too)", got)
			}
			// A client key of the domain is not enough for the YAML's counters.
			key := s.Register(t, "shop owner "+run)
			if code, _, body := doJSON(t, "POST", s.URL+"/descriptors/shop/counters", key, alice); code != 403 {
				t.Errorf("a client key on a YAML domain = %d %v, want 403", code, body)
			}

			// /rlconfig: one line per limit.
			_, _, dump := testkit.GetText(t, s.URL+"/rlconfig")
			for _, line := range []string{
				"shop.user_id: unit=HOUR requests_per_unit=3, shadow_mode: false, name: burst\n",
				"shop.user_id: unit=DAY requests_per_unit=5, shadow_mode: false, name: daily\n",
				"shop.report: unit=HOUR requests_per_unit=2, shadow_mode: false, unit_multiplier: 5\n",
				"shop.tokens: unit=DAY requests_per_unit=300, shadow_mode: false, always_count: true\n",
			} {
				if !strings.Contains(dump, line) {
					t.Errorf("/rlconfig lacks %q:\n%s", line, dump)
				}
			}
		})
	}
}

// TestIssue17RESTRules: a client's rule with rate_limits and always_count
// limits Envoy requests on its domain; the client reads and resets its
// counters with its own key, and no other client can.
func TestIssue17RESTRules(t *testing.T) {
	for name, env := range issue17Setups(t) {
		t.Run(name, func(t *testing.T) {
			s := throttletest.Start(t, env...)
			c := rlsClient(t, s)
			run := strconv.FormatInt(time.Now().UnixNano(), 36)
			domain := "api-" + run
			code, _, reg := doJSON(t, "POST", s.URL+"/register", e2eAdminKey, `{"name":"api `+run+`","email":"api-`+run+`@example.com","domain":"`+domain+`"}`)
			key, _ := reg["api_key"].(string)
			if code != 201 {
				t.Fatalf("register: %d %v", code, reg)
			}
			other := s.Register(t, "other "+run)
			code, _, rule := doJSON(t, "POST", s.URL+"/rules", key, `{"name":"search","descriptors":[{"key":"path","value":"/search"}],
				"rate_limits":[{"name":"burst","algorithm":"fixed_window","limit":2,"window":3600},{"name":"daily","algorithm":"sliding_window","limit":4,"window":86400,"always_count":true}]}`)
			if code != 201 {
				t.Fatalf("POST /rules = %d %v", code, rule)
			}
			search := rlsDesc("path", "/search")
			for i, want := range []string{"OK ok:1", "OK ok:0", "OVER_LIMIT over:0"} {
				if got := outcome(askRLS(t, c, domain, search)); got != want {
					t.Fatalf("search %d: %s, want %s", i, got, want)
				}
			}
			resp := askRLS(t, c, domain, search)
			if p := header(resp, "RateLimit-Policy"); p != `"burst";q=2;w=3600, "daily";q=4;w=86400` {
				t.Errorf("RateLimit-Policy = %q", p)
			}

			body := `{"descriptors":[{"entries":[{"key":"path","value":"/search"}]}]}`
			path := s.URL + "/descriptors/" + domain + "/counters"
			code, _, read := doJSON(t, "POST", path, key, body)
			limits := counterLimits(t, read)
			// daily counts always (always_count): the two refused requests too.
			if code != 200 || len(limits) != 2 || limits[0]["remaining"] != float64(0) || limits[1]["remaining"] != float64(0) {
				t.Fatalf("owner read = %d %v, want burst 0 and daily 0", code, read)
			}
			if code, _, got := doJSON(t, "POST", path, other, body); code != 403 || got["code"] != "FORBIDDEN_DOMAIN" {
				t.Errorf("another client's read = %d %v, want 403 FORBIDDEN_DOMAIN", code, got)
			}
			if code, _, got := doJSON(t, "POST", path+"/reset", other, body); code != 403 {
				t.Errorf("another client's reset = %d %v, want 403", code, got)
			}
			if code, _, got := doJSON(t, "POST", path+"/reset", key, body); code != 200 || got["keys_deleted"] != float64(2) {
				t.Fatalf("owner reset = %d %v, want 2 keys deleted", code, got)
			}
			if got := outcome(askRLS(t, c, domain, search)); got != "OK ok:1" {
				t.Errorf("search after the reset: %s, want OK ok:1", got)
			}
		})
	}
}

// TestCacheKeyPrefix: CACHE_KEY_PREFIX puts every key of a deployment
// under its prefix, so two deployments sharing one Redis keep apart.
func TestCacheKeyPrefix(t *testing.T) {
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	a, b := "blue-"+run+":", "green-"+run+":"
	setups := issue17Setups(t)
	sa := throttletest.Start(t, append(setups["redis"], "CACHE_KEY_PREFIX="+a)...)
	sb := throttletest.Start(t, append(setups["redis"], "CACHE_KEY_PREFIX="+b)...)
	ca, cb := rlsClient(t, sa), rlsClient(t, sb)
	user := rlsDesc("user", "carol-"+run)
	if got := outcome(askRLS(t, ca, "shop", user)); got != "OK ok:0" {
		t.Fatalf("blue: %s", got)
	}
	if got := outcome(askRLS(t, ca, "shop", user)); got != "OVER_LIMIT over:0" {
		t.Fatalf("blue again: %s", got)
	}
	if got := outcome(askRLS(t, cb, "shop", user)); got != "OK ok:0" {
		t.Errorf("green, same descriptor: %s, want OK ok:0 (its own counters)", got)
	}
	rdb := redistest.NewClient(t, redistest.SharedURL(t))
	ctx := context.Background()
	for _, prefix := range []string{a, b} {
		keys, err := rdb.Keys(ctx, prefix+"*").Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) == 0 {
			t.Errorf("no Redis key starts with %q", prefix)
		}
	}
	// The REST API's counters are prefixed too.
	key := sa.Register(t, "prefixed "+run)
	if code, _, body := doJSON(t, "POST", sa.URL+"/check", key, `{"identifier":"dave","limit":5,"window":3600,"algorithm":"fixed_window"}`); code != 200 || body["allowed"] != true {
		t.Fatalf("/check: %d %v", code, body)
	}
	keys, err := rdb.Keys(ctx, "throttle:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if strings.Contains(k, run) {
			t.Errorf("key %q of this run has no prefix", k)
		}
	}
}

// TestConfigCheckRateLimits: `throttle config check` takes the extensions
// and names the file, line and path of a problem in rate_limits.
func TestConfigCheckRateLimits(t *testing.T) {
	bin := throttletest.Binary(t)
	out, err := exec.Command(bin, "config", "check", "testdata/shop.yaml").CombinedOutput()
	if err != nil || string(out) != "1 file(s) OK\n" {
		t.Errorf("config check shop.yaml: %v %s", err, out)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("domain: d\ndescriptors:\n  - key: user\n    rate_limits:\n      - {unit: minute, requests_per_unit: 10}\n      - {unit: minute, unit_multiplier: 0, requests_per_unit: 100}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(bin, "config", "check", bad).CombinedOutput()
	want := bad + `:6: domain "d" › descriptors[0] › rate_limits[1]: unit_multiplier must be a whole number between 1 and 4294967295, not 0`
	if err == nil || !strings.Contains(string(out), want) {
		t.Errorf("config check bad.yaml: %v\n%s\nwant %s", err, out, want)
	}
}

// counterLimits returns the limits of the first descriptor of a counters
// reply.
func counterLimits(t *testing.T, body map[string]any) []map[string]any {
	t.Helper()
	ds, _ := body["descriptors"].([]any)
	if len(ds) == 0 {
		return nil
	}
	d, _ := ds[0].(map[string]any)
	ls, _ := d["limits"].([]any)
	var out []map[string]any
	for _, l := range ls {
		m, _ := l.(map[string]any)
		out = append(out, m)
	}
	return out
}

// TestYAMLExtensionsDoc: the YAML of docs/yaml-extensions.md loads, with a
// burst + sustained descriptor, a 5-minute window and an approximate limit.
func TestYAMLExtensionsDoc(t *testing.T) {
	const doc = "docs/yaml-extensions.md"
	b, err := os.ReadFile(filepath.Join(repoRoot, doc))
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```yaml\n(domain: .*?)```").FindAllStringSubmatch(string(b), -1)
	if len(blocks) != 1 {
		t.Fatalf("found %d YAML blocks of a domain in %s, want 1", len(blocks), doc)
	}
	cfg, err := descriptors.Load(descriptors.Options{}, descriptors.Source{Name: doc, Data: []byte(blocks[0][1])})
	if err != nil {
		t.Fatalf("the YAML of %s does not load: %v", doc, err)
	}
	m := cfg.Match("shop", []descriptors.Entry{{Key: "user_id", Value: "alice"}})
	if m == nil || len(m.Limits) != 2 || m.Limits[0].WindowLength() != time.Second || m.Limits[1].WindowLength() != 24*time.Hour {
		t.Errorf("user_id: %+v, want burst per second and sustained per day", m)
	}
	m = cfg.Match("shop", []descriptors.Entry{{Key: "report", Value: "weekly"}})
	if m == nil || m.Limit.WindowLength() != 5*time.Minute || m.Limit.RequestsPerUnit != 100 {
		t.Errorf("report: %+v, want 100 per 5 minutes", m)
	}
	m = cfg.Match("shop", []descriptors.Entry{{Key: "tenant", Value: "acme"}})
	if m == nil || m.Limit.Accuracy != algorithms.Approximate || m.Limit.RequestsPerUnit != 50000 {
		t.Errorf("tenant: %+v, want 50,000 a minute, approximate", m)
	}
}

// TestIssue17Cluster: on a Redis Cluster of three masters, with
// CACHE_KEY_PREFIX, a request whose descriptors' keys live on two masters
// consumes nothing of the one that admitted it when the other refuses (the
// engine refunds across masters), and every key carries the prefix.
func TestIssue17Cluster(t *testing.T) {
	masters := redistest.StartClusterServers(t)
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	prefix := "shop-" + run + ":"
	env := issue17Setups(t)["memory"] // the YAML and settings, with a Cluster for counters
	s := throttletest.Start(t, append(env, "REDIS_URL="+clusterURL(masters), "BACKEND_TIMEOUT=2s", "CACHE_KEY_PREFIX="+prefix)...)
	c := rlsClient(t, s)

	ip := "ip-" + run
	if got := outcome(askRLS(t, c, "shop", rlsDesc("ip", ip))); got != "OK ok:99" {
		t.Fatalf("ip alone: %s", got)
	}
	ipMaster := masterOf(t, masters, ip)
	var user string
	for i := 0; ; i++ {
		if i == 200 {
			t.Fatal("200 users all on the ip's master")
		}
		user = fmt.Sprintf("user-%s-%d", run, i)
		if got := outcome(askRLS(t, c, "shop", rlsDesc("user", user))); got != "OK ok:0" {
			t.Fatalf("user alone: %s", got)
		}
		if m := masterOf(t, masters, user); m >= 0 && m != ipMaster {
			break
		}
	}
	for i := range 3 {
		if got := outcome(askRLS(t, c, "shop", rlsDesc("ip", ip), rlsDesc("user", user))); got != "OVER_LIMIT ok:99 over:0" {
			t.Errorf("ip and user on two masters, request %d: %s, want OVER_LIMIT ok:99 over:0 (ip refunded)", i, got)
		}
	}
	if got := outcome(askRLS(t, c, "shop", rlsDesc("ip", ip))); got != "OK ok:98" {
		t.Errorf("ip alone after the refused requests: %s, want OK ok:98", got)
	}
	for _, m := range masters {
		rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
		keys, err := rdb.Keys(context.Background(), "*"+run+"*").Result()
		rdb.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if !strings.HasPrefix(k, prefix) {
				t.Errorf("key %q on %s lacks the prefix %q", k, m.Addr(), prefix)
			}
		}
	}
}
