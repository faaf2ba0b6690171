package restapi

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/throttle-rl/throttle/internal/idempotency"
	"github.com/throttle-rl/throttle/internal/testkit"
	"github.com/throttle-rl/throttle/internal/testkit/logbuf"
	"github.com/throttle-rl/throttle/internal/testkit/openapitest"

	"github.com/throttle-rl/throttle/internal/testkit/pgtest"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/algorithms/redisstore"
	"github.com/throttle-rl/throttle/store"
)

// backend names a database and a limiter for a test environment.
type backend struct {
	name    string
	db      string // "sqlite" or "postgres"
	limiter string // "memory" or "redis"
}

// backends are the environments every API test runs in: together they cover
// both databases and both limiters.
func backends() []backend {
	return []backend{
		{"sqlite+memory", "sqlite", "memory"},
		{"postgres+redis", "postgres", "redis"},
	}
}

// eachBackend runs fn as a parallel subtest in every backend.
func eachBackend(t *testing.T, fn func(t *testing.T, b backend)) {
	t.Helper()
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			fn(t, b)
		})
	}
}

// testNow is the limiters' clock in tests: 30 seconds into a minute (and an
// hour), and it never moves, so windows never roll over and buckets never
// refill while a test runs, and reset times are exact.
var testNow = time.Date(2031, 3, 4, 5, 0, 30, 0, time.UTC)

func testClock() time.Time { return testNow }

// testEnv is the REST API over a real store and limiter, served by an
// httptest.Server.
type testEnv struct {
	srv     *httptest.Server
	handler http.Handler
	db      *store.DB
	cache   *store.Cache
	usage   *store.UsageRecorder
	limiter algorithms.Store
	reg     *prometheus.Registry
	logs    *logbuf.Buffer
	// adminKey is the handler's operator key (Deps.AdminKey).
	adminKey string
	// idempotency is the memory store of idempotent checks (nil on Redis).
	idempotency *memoryIdempotency
}

// newEnv starts the API in backend b; opts may change the Deps first.
func newEnv(t *testing.T, b backend, opts ...func(*Deps)) *testEnv {
	t.Helper()
	var dbURL string
	switch b.db {
	case "sqlite":
		dbURL = "sqlite://" + filepath.Join(t.TempDir(), "throttle.db")
	case "postgres":
		dbURL = pgtest.FreshDatabase(t, "restapi")
	default:
		t.Fatalf("unknown db %q", b.db)
	}
	return newEnvAt(t, dbURL, b, opts...)
}

// newEnvAt is newEnv with the database at dbURL (b.db is not read).
func newEnvAt(t *testing.T, dbURL string, b backend, opts ...func(*Deps)) *testEnv {
	t.Helper()
	logs := &logbuf.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	db, err := store.Open(ctx, dbURL, log)
	if err != nil {
		t.Fatalf("open store %s: %v", b.db, err)
	}
	t.Cleanup(func() { db.Close() })
	cache := store.NewCache(db, time.Hour, log)
	if err := cache.Refresh(ctx); err != nil {
		t.Fatalf("load cache: %v", err)
	}
	usage := store.NewUsageRecorder(db, time.Hour, log)

	var limiter algorithms.Store
	var idem IdempotencyStore // the memory store, or Redis
	var memIdem *memoryIdempotency
	var ready func(context.Context) map[string]error // memory: none, always ready
	var ledger ReservationLedger                     // memory: the handler's own
	switch b.limiter {
	case "memory":
		limiter = algorithms.NewMemoryStore(algorithms.MemoryOptions{Now: testClock})
		memIdem = newMemoryIdempotency(time.Now, IdempotencyQuota{Records: DefaultIdempotencyRecords, Bytes: DefaultIdempotencyBytes})
		idem = memIdem
	case "redis":
		// No sweeper: on its fixed clock (2031) it would give back every
		// hold of the shared Redis, other packages' tests' too.
		rs := redisstore.New(redisClient(t), redisstore.Options{Now: testClock, HoldSweepEvery: -1})
		limiter, ready, ledger = rs, rs.Ready, rs.Ledger()
		idem = idempotency.NewRedis(redisClient(t), "test-"+testkit.RandomHex(t, 8)+":", idempotency.Quota{Records: DefaultIdempotencyRecords, Bytes: DefaultIdempotencyBytes})
	default:
		t.Fatalf("unknown limiter %q", b.limiter)
	}

	reg := prometheus.NewRegistry()
	if rs, ok := limiter.(*redisstore.Store); ok {
		// The store's metrics beside the API's on one registry, as serve
		// has them: their names must not collide.
		if err := rs.RegisterMetrics(reg); err != nil {
			t.Fatal(err)
		}
	}
	d := Deps{
		Log:           log,
		DB:            db,
		Cache:         cache,
		Usage:         usage,
		Limiter:       limiter,
		LimiterReady:  ready,
		Registerer:    reg,
		Gatherer:      reg,
		RegisterLimit: algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: 100_000, Window: time.Hour},
		Now:           testClock,
		Idempotency:   idem,
		AdminKey:      testAdminKey,
		Reservations:  ReservationLimits{Ledger: ledger},
	}
	for _, o := range opts {
		o(&d)
	}
	h := NewHandler(d)
	// Every exchange of the suite must be one the OpenAPI document describes.
	srv := httptest.NewServer(contract(t).Handler(t, h))
	t.Cleanup(srv.Close)
	return &testEnv{srv: srv, handler: h, db: d.DB, cache: d.Cache, usage: d.Usage, limiter: d.Limiter, reg: reg, logs: logs, adminKey: d.AdminKey, idempotency: memIdem}
}

// contract is the validator of the embedded OpenAPI document, loaded once.
var contractOnce = sync.OnceValues(func() (*openapitest.Validator, error) { return openapitest.Load(openAPIYAML) })

func contract(t *testing.T) *openapitest.Validator {
	t.Helper()
	v, err := contractOnce()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func redisClient(t *testing.T) *redis.Client {
	t.Helper()
	u := os.Getenv("THROTTLE_TEST_REDIS_URL")
	if u == "" {
		t.Fatal("THROTTLE_TEST_REDIS_URL is empty: run via scripts/with-test-services.sh (make test)")
	}
	opt, err := redis.ParseURL(u)
	if err != nil {
		t.Fatalf("parse THROTTLE_TEST_REDIS_URL: %v", err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// newRequest makes a request for serving a handler directly.
func newRequest(t *testing.T, method, path, body string) *http.Request {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	return req
}

// serve runs h on req and returns what it wrote.
func serve(h http.Handler, req *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

// reply is a finished HTTP exchange.
type reply struct {
	status int
	header http.Header
	body   string
}

// json decodes the reply's body into a T.
func decodeReply[T any](t *testing.T, r reply) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(r.body), &v); err != nil {
		t.Fatalf("decode reply %q: %v", r.body, err)
	}
	return v
}

// call sends method path with body (JSON unless headers say otherwise) and
// the API key (when not empty). hdr are extra header pairs.
func (e *testEnv) call(t *testing.T, method, path, key, body string, hdr ...string) reply {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		t.Fatalf("new request: %v", err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("read reply of %s %s: %v", method, path, err)
	}
	return reply{status: res.StatusCode, header: res.Header, body: string(b)}
}

// client is a registered client as the tests use it.
type client struct {
	ID  string
	Key string
}

// testAdminKey is the operator key (Deps.AdminKey) of newEnv's handlers.
const testAdminKey = "restapi-test-operator-key"

// register creates a client named name with extra JSON fields (such as
// `"default_algorithm":"token_bucket"`); one asking for a domain is
// registered with the operator key, which grants it (a handler without one
// must have the domain claimable).
func (e *testEnv) register(t *testing.T, name string, extra ...string) client {
	t.Helper()
	fields := []string{`"name":"` + name + `"`, `"email":"` + name + "-" + testkit.RandomHex(t, 4) + `@example.com"`}
	fields = append(fields, extra...)
	key := ""
	if strings.Contains(strings.Join(extra, ","), `"domain"`) {
		key = e.adminKey
	}
	r := e.call(t, "POST", "/register", key, "{"+strings.Join(fields, ",")+"}")
	if r.status != http.StatusCreated {
		t.Fatalf("register %s: status %d %s", name, r.status, r.body)
	}
	got := decodeReply[registerReply](t, r)
	return client{ID: got.ClientID, Key: got.APIKey}
}

// check calls POST /check with body and decodes the decision.
func (e *testEnv) check(t *testing.T, c client, body string) (checkReply, reply) {
	t.Helper()
	r := e.call(t, "POST", "/check", c.Key, body)
	if r.status != http.StatusOK {
		t.Fatalf("POST /check %s: status %d %s", body, r.status, r.body)
	}
	return decodeReply[checkReply](t, r), r
}

// wantError fails unless r is an error reply with status and code.
func wantError(t *testing.T, r reply, status int, code string) {
	t.Helper()
	if r.status != status {
		t.Errorf("status = %d, want %d (body %s)", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	var e errorReply
	if err := json.Unmarshal([]byte(r.body), &e); err != nil {
		t.Fatalf("error body %q is not JSON: %v", r.body, err)
	}
	if e.Code != code {
		t.Errorf("code = %q, want %q (body %s)", e.Code, code, r.body)
	}
	if e.Error == "" {
		t.Errorf("error message is empty (body %s)", r.body)
	}
}

// counterValue returns the value of counter name with labels from reg.
func counterValue(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labelsMatch(m, labels) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func labelsMatch(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, lp := range m.GetLabel() {
		if v, ok := want[lp.GetName()]; ok {
			if v != lp.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(want)
}
