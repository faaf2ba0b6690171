package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/internal/testkit"
	"github.com/throttle-rl/throttle/internal/testkit/redistest"
	"github.com/throttle-rl/throttle/internal/testkit/throttletest"
	"github.com/throttle-rl/throttle/store"
)

// TestServeRefusesGlobalScope: without GLOBAL_REDIS_URL, serve refuses to
// start on descriptor files with scope: global (at file:line), and on a
// database that holds rules of scope global, naming each by client, domain
// and rule.
func TestServeRefusesGlobalScope(t *testing.T) {
	serveEnv := func(extra map[string]string) func(string) string {
		m := map[string]string{
			"BIND_ADDRESS": "127.0.0.1", "LOG_LEVEL": "error",
			"PORT": strconv.Itoa(testkit.FreePort(t)), "GRPC_PORT": strconv.Itoa(testkit.FreePort(t)),
			"DATABASE_URL": "sqlite://" + filepath.Join(t.TempDir(), "t.db"),
		}
		for k, v := range extra {
			m[k] = v
		}
		return env(m)
	}
	dir := t.TempDir()
	global, err := os.ReadFile("testdata/global.yaml")
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, map[string]string{"global.yaml": string(global)})
	var out bytes.Buffer
	err = run(context.Background(), []string{"serve"}, serveEnv(map[string]string{"DESCRIPTORS_DIR": dir}), &out, &out)
	want := "DESCRIPTORS_DIR: " + filepath.Join(dir, "global.yaml") + `:4: domain "edge" › descriptors[0] › rate_limit: scope: global needs GLOBAL_REDIS_URL, the Redis every region shares (this server has none)`
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("serve with scope: global in DESCRIPTORS_DIR: err = %v\nwant %s…", err, want)
	}

	dbPath := filepath.Join(t.TempDir(), "global.db")
	db, err := store.Open(t.Context(), "sqlite://"+dbPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	shop, err := db.CreateClient(t.Context(), store.Client{Name: "Shop", Email: "shop@example.com", Domain: "shop"}, [32]byte{1})
	if err != nil {
		t.Fatal(err)
	}
	limit := algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 6000, Window: time.Minute, Accuracy: algorithms.Approximate, Global: true}
	for _, name := range []string{"tenant", "checkout"} {
		if _, err := db.CreateRule(t.Context(), store.Rule{ClientID: shop.ID, Name: name, Limit: limit}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.CreateRule(t.Context(), store.Rule{ClientID: shop.ID, Name: "regional", Limit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 10, Window: time.Second}}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	err = run(context.Background(), []string{"serve"}, serveEnv(map[string]string{"DATABASE_URL": "sqlite://" + dbPath}), &out, &out)
	want = `the database holds 2 rule(s) of scope global, which need GLOBAL_REDIS_URL, the Redis every region shares (this server has none): ` +
		`client "Shop" (domain shop) rule "checkout", client "Shop" (domain shop) rule "tenant"; set GLOBAL_REDIS_URL, or make those rules regional (PUT /rules/{name} without "scope": "global")`
	if err == nil || err.Error() != want {
		t.Errorf("serve with global rules: err = %v\nwant %s", err, want)
	}
}

// TestRLConfigShowsScope: with GLOBAL_REDIS_URL, the built binary serves
// descriptor files with scope: global, and GET /rlconfig shows the scope
// of a global limit as it shows accuracy approximate.
func TestRLConfigShowsScope(t *testing.T) {
	dir := t.TempDir()
	global, err := os.ReadFile("testdata/global.yaml")
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, map[string]string{"global.yaml": string(global)})
	redisURL := redistest.SharedURL(t)
	s := throttletest.Start(t, "DESCRIPTORS_DIR="+dir, "RLCONFIG_ON_REST_PORT=true", "REDIS_URL="+redisURL, "GLOBAL_REDIS_URL="+redisURL,
		"CACHE_KEY_PREFIX=scope-"+testkit.RandomHex(t, 4)+":")
	want := "edge.tenant: unit=MINUTE requests_per_unit=6000, shadow_mode: false, accuracy: approximate, scope: global\n"
	if code, _, body := testkit.GetText(t, s.URL+"/rlconfig"); code != http.StatusOK || body != want {
		t.Errorf("GET /rlconfig = %d %q, want 200 %q", code, body, want)
	}
}
