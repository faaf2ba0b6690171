package main

import (
	"testing"
	"time"

	"github.com/throttle-rl/throttle/internal/testkit/redistest"
	"github.com/throttle-rl/throttle/internal/testkit/throttletest"
)

// TestRESTGlobalRule: a REST rule of scope global, through the built binary
// with a regional Redis and a global one of their own: /check through it is
// counted in the global Redis only, a regional rule's in the regional one
// only; the global store's metrics carry the region; /ready names the
// global Redis.
func TestRESTGlobalRule(t *testing.T) {
	regional, global := redistest.Start(t), redistest.Start(t)
	s := throttletest.Start(t, "REDIS_URL="+regional.URL(), "GLOBAL_REDIS_URL="+global.URL(), "REGION=eu-west",
		"APPROXIMATE_SYNC_INTERVAL=100ms", "CLAIMABLE_DOMAINS=rest-global")
	key := s.RegisterDomain(t, "rest global", "rest-global", "")
	code, _, rule := doJSON(t, "POST", s.URL+"/rules", key, `{"name":"world","algorithm":"fixed_window","limit":500,"window":3600,"scope":"global"}`)
	if code != 201 || rule["scope"] != "global" || rule["accuracy"] != "approximate" {
		t.Fatalf("POST /rules global = %d %v", code, rule)
	}
	if code, _, rule = doJSON(t, "POST", s.URL+"/rules", key, `{"name":"here","algorithm":"fixed_window","limit":500,"window":3600}`); code != 201 || rule["scope"] != "regional" {
		t.Fatalf("POST /rules regional = %d %v", code, rule)
	}
	const n = 12
	for i := range n {
		for _, name := range []string{"world", "here"} {
			code, _, got := doJSON(t, "POST", s.URL+"/check", key, `{"identifier":"u","rule":"`+name+`"}`)
			if code != 200 || got["allowed"] != true {
				t.Fatalf("check %d of %s = %d %v", i, name, code, got)
			}
		}
	}
	grdb, rrdb := redistest.NewClient(t, global.URL()), redistest.NewClient(t, regional.URL())
	var g, r, gHere, rWorld int64
	var keys []string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		g, keys = ruleCount(t, grdb, ":u}:fw:n:rule:world@")
		gHere, _ = ruleCount(t, grdb, ":u}:fw:n:rule:here@")
		r, _ = ruleCount(t, rrdb, ":u}:fw:n:rule:here@")
		rWorld, _ = ruleCount(t, rrdb, ":u}:fw:n:rule:world@")
		if g == n || time.Now().After(deadline) {
			break
		}
	}
	if g != n || gHere != 0 || r != n || rWorld != 0 {
		t.Errorf("global Redis counts world %d (keys %q), here %d; regional counts here %d, world %d; want %d, 0, %d, 0", g, keys, gHere, r, rWorld, n, n)
	}
	if got := metricWith(t, s, "throttle_global_replicas", map[string]string{"region": "eu-west"}); got != 1 {
		t.Errorf("throttle_global_replicas{region=eu-west} = %v, want 1", got)
	}
}
