package restapi

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/throttle-rl/throttle/internal/testkit"
	"github.com/throttle-rl/throttle/internal/testkit/pgtest"
	"github.com/throttle-rl/throttle/store"
)

// outcome is what one call got: its status and error code.
type outcome struct {
	status int
	code   string
}

// try sends one call and reports its outcome, or an error when the call
// itself failed (no reply) or an error reply was not the API's JSON.
func (e *testEnv) try(method, path, key, body string) (outcome, string, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		return outcome{}, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	res, err := e.srv.Client().Do(req)
	if err != nil {
		return outcome{}, "", fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return outcome{}, "", fmt.Errorf("%s %s: read reply: %w", method, path, err)
	}
	o := outcome{status: res.StatusCode}
	if res.StatusCode >= 400 {
		var er errorReply
		if err := json.Unmarshal(b, &er); err != nil {
			return o, string(b), fmt.Errorf("%s %s: %d reply %q is not JSON", method, path, res.StatusCode, b)
		}
		o.code = er.Code
		if res.StatusCode == http.StatusServiceUnavailable && res.Header.Get("Retry-After") != "1" {
			return o, string(b), fmt.Errorf("%s %s: 503 without Retry-After: 1", method, path)
		}
	}
	return o, string(b), nil
}

// endpoint is one kind of call of the outage load. call makes its n-th
// call; ok are its statuses on success.
type endpoint struct {
	name string
	ok   []int
	db   bool // reads or writes the database
	call func(n int) (outcome, string, error)
}

// tally counts outcomes by endpoint and phase.
type tally struct {
	mu sync.Mutex
	m  map[string]map[outcome]int // "phase endpoint" → outcome → calls
}

func (t *tally) add(phase, endpoint string, o outcome) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := phase + " " + endpoint
	if t.m[k] == nil {
		t.m[k] = map[outcome]int{}
	}
	t.m[k][o]++
}

// TestPostgresOutage stops a PostgreSQL of the test's own under load on
// every endpoint, then starts it again. Every call that reads or writes the
// database either succeeds or gets 503 STORE_UNAVAILABLE with Retry-After:
// never a 500; every one made wholly within the outage gets the 503; /check
// answers 200 from its caches throughout; every endpoint succeeds again
// once PostgreSQL is back; and nothing acknowledged is lost: every rule,
// exemption and client created with a 201 is there afterwards, every rule
// and exemption deleted with a 200 is gone, and the usage counts equal the
// /check decisions made (the recorder's failed flushes kept them).
func TestPostgresOutage(t *testing.T) {
	pg := pgtest.StartServer(t)
	e := newEnvAt(t, pg.URL, backend{name: "postgres+memory", limiter: "memory"}, func(d *Deps) {
		// A recorder that flushes often, so flushes fail during the outage.
		d.Usage = store.NewUsageRecorder(d.DB, 50*time.Millisecond, d.Log)
	})
	if err := e.db.RegisterMetrics(e.reg); err != nil {
		t.Fatal(err)
	}
	recCtx, stopRecorder := context.WithCancel(context.Background())
	recDone := make(chan struct{})
	go func() {
		defer close(recDone)
		_ = e.usage.Run(recCtx)
	}()
	defer func() { stopRecorder(); <-recDone }()

	load := newOutageLoad(t, e)
	endpoints := load.endpoints()
	counts := runThroughOutage(t, pg, endpoints)
	checkOutagePhases(t, counts, endpoints)
	var unavailable float64
	for _, op := range []string{"create_client", "create_rule", "update_rule", "delete_rule", "rules", "create_exemption",
		"delete_exemption", "exemptions", "usage", "top_identifiers", "add_usage", "snapshot", "client_by_id"} {
		unavailable += counterValue(t, e.reg, "throttle_store_unavailable_total", map[string]string{"op": op})
	}
	t.Logf("throttle_store_unavailable_total: %v", unavailable)
	if unavailable == 0 {
		t.Error("throttle_store_unavailable_total did not count the outage")
	}
	stopRecorder()
	<-recDone // its last flush
	load.checkKept(t)
}

// outageLoad is the load of TestPostgresOutage on one client, and what its
// calls acknowledged.
type outageLoad struct {
	e   *testEnv
	c   client
	run string // tells this run's registrations apart

	checks                       atomic.Int64 // /check decisions answered 200
	nextRule, nextExemption, reg atomic.Int64

	mu                        sync.Mutex
	rulesMade, exemptionsMade []string
	rulesGone, exemptionsGone []string
	keysMade                  []string
}

// deletable is how many rules and exemptions the load deletes, over and
// over: 200 the first time, 404 after.
const deletable = 200

// newOutageLoad registers the load's client, its rule "base", and the
// rules and exemptions it deletes.
func newOutageLoad(t *testing.T, e *testEnv) *outageLoad {
	t.Helper()
	l := &outageLoad{e: e, c: e.register(t, "outage"), run: testkit.RandomHex(t, 3)}
	e.call(t, "POST", "/rules", l.c.Key, `{"name":"base","algorithm":"fixed_window","limit":10,"window":60}`)
	for i := range deletable {
		for _, r := range []reply{
			e.call(t, "POST", "/rules", l.c.Key, fmt.Sprintf(`{"name":"del-%d","algorithm":"fixed_window","limit":10,"window":60}`, i)),
			e.call(t, "POST", "/exemptions", l.c.Key, fmt.Sprintf(`{"identifier":"del-%d"}`, i)),
		} {
			if r.status != http.StatusCreated {
				t.Fatalf("setup: %d %s", r.status, r.body)
			}
		}
	}
	return l
}

func (l *outageLoad) keep(list *[]string, v string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	*list = append(*list, v)
}

// endpoints are the calls of the load, one kind per endpoint.
func (l *outageLoad) endpoints() []endpoint {
	e, c := l.e, l.c
	return []endpoint{
		{"POST /register", []int{http.StatusCreated}, true, func(int) (outcome, string, error) {
			n := l.reg.Add(1)
			o, body, err := e.try("POST", "/register", "", fmt.Sprintf(`{"name":"load %d","email":"load-%d-%s@example.com"}`, n, n, l.run))
			if err == nil && o.status == http.StatusCreated {
				var r registerReply
				if err := json.Unmarshal([]byte(body), &r); err != nil {
					return o, body, err
				}
				l.keep(&l.keysMade, r.APIKey)
			}
			return o, body, err
		}},
		{"POST /rules", []int{http.StatusCreated}, true, func(int) (outcome, string, error) {
			name := fmt.Sprintf("load-%d", l.nextRule.Add(1))
			o, body, err := e.try("POST", "/rules", c.Key, `{"name":"`+name+`","algorithm":"sliding_window","limit":5,"window":10}`)
			if err == nil && o.status == http.StatusCreated {
				l.keep(&l.rulesMade, name)
			}
			return o, body, err
		}},
		{"PUT /rules/{name}", []int{http.StatusOK}, true, func(n int) (outcome, string, error) {
			return e.try("PUT", "/rules/base", c.Key, fmt.Sprintf(`{"algorithm":"fixed_window","limit":%d,"window":60}`, 10+n))
		}},
		{"DELETE /rules/{name}", []int{http.StatusOK, http.StatusNotFound}, true, func(n int) (outcome, string, error) {
			name := fmt.Sprintf("del-%d", n%deletable)
			o, body, err := e.try("DELETE", "/rules/"+name, c.Key, "")
			if err == nil && (o.status == http.StatusOK || o.code == "RULE_NOT_FOUND") {
				l.keep(&l.rulesGone, name)
			}
			return o, body, err
		}},
		{"GET /rules/list", []int{http.StatusOK}, true, func(int) (outcome, string, error) { return e.try("GET", "/rules/list", c.Key, "") }},
		{"POST /exemptions", []int{http.StatusCreated}, true, func(int) (outcome, string, error) {
			id := fmt.Sprintf("load-%d", l.nextExemption.Add(1))
			o, body, err := e.try("POST", "/exemptions", c.Key, `{"identifier":"`+id+`"}`)
			if err == nil && o.status == http.StatusCreated {
				l.keep(&l.exemptionsMade, id)
			}
			return o, body, err
		}},
		{"DELETE /exemptions/{identifier}", []int{http.StatusOK, http.StatusNotFound}, true, func(n int) (outcome, string, error) {
			id := fmt.Sprintf("del-%d", n%deletable)
			o, body, err := e.try("DELETE", "/exemptions/"+id, c.Key, "")
			if err == nil && (o.status == http.StatusOK || o.code == "EXEMPTION_NOT_FOUND") {
				l.keep(&l.exemptionsGone, id)
			}
			return o, body, err
		}},
		{"GET /exemptions/list", []int{http.StatusOK}, true, func(int) (outcome, string, error) { return e.try("GET", "/exemptions/list", c.Key, "") }},
		{"GET /stats/{client_id}", []int{http.StatusOK}, true, func(int) (outcome, string, error) { return e.try("GET", "/stats/"+c.ID, c.Key, "") }},
		{"POST /check", []int{http.StatusOK}, false, func(n int) (outcome, string, error) {
			o, body, err := e.try("POST", "/check", c.Key, fmt.Sprintf(`{"identifier":"user-%d","limit":1000000,"window":60,"algorithm":"fixed_window"}`, n%50))
			if err == nil && o.status == http.StatusOK {
				l.checks.Add(1)
			}
			return o, body, err
		}},
	}
}

// runThroughOutage calls endpoints from 6 workers for a second, stops pg
// for 3 seconds, starts it again, waits until every endpoint succeeds
// again, and 2 seconds later stops the load. It checks each call's outcome
// as it comes and returns them counted by phase: "outage" for a call that
// started after PostgreSQL was gone and ended before it was started again,
// "up" for one made wholly while it was up, "edge" for the others.
func runThroughOutage(t *testing.T, pg *pgtest.Server, endpoints []endpoint) *tally {
	t.Helper()
	var down atomic.Int32 // 0 up, 1 stopped, 2 starting again
	var outageEpoch atomic.Int64
	phaseOf := func(startDown int32, startEpoch int64) string {
		if startDown == 1 && down.Load() == 1 && outageEpoch.Load() == startEpoch {
			return "outage"
		}
		if startDown == 0 && down.Load() == 0 {
			return "up"
		}
		return "edge"
	}

	counts := &tally{m: map[string]map[outcome]int{}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	const workers = 6
	for w := range workers {
		wg.Go(func() {
			for i := w; ; i += workers {
				select {
				case <-stop:
					return
				default:
				}
				ep := endpoints[i%len(endpoints)]
				startDown, startEpoch := down.Load(), outageEpoch.Load()
				o, body, err := ep.call(i / len(endpoints))
				phase := phaseOf(startDown, startEpoch)
				if err != nil {
					t.Errorf("%s (%s): %v", ep.name, phase, err)
					return
				}
				counts.add(phase, ep.name, o)
				switch {
				case slices.Contains(ep.ok, o.status):
				case ep.db && o.status == http.StatusServiceUnavailable && o.code == "STORE_UNAVAILABLE":
				default:
					t.Errorf("%s (%s): %d %s, want %v or 503 STORE_UNAVAILABLE", ep.name, phase, o.status, body, ep.ok)
				}
				if phase == "outage" && ep.db && o.status != http.StatusServiceUnavailable {
					t.Errorf("%s during the outage: %d %s, want 503", ep.name, o.status, body)
				}
			}
		})
	}
	defer wg.Wait()
	defer close(stop)

	time.Sleep(time.Second)
	pg.Stop(t)
	// The outage starts once PostgreSQL is gone: a call in flight while it
	// shut down (fast: committing what it could) may have succeeded.
	outageEpoch.Add(1)
	down.Store(1)
	time.Sleep(3 * time.Second)
	down.Store(2)
	pg.Start(t)
	back := time.Now()
	for _, ep := range endpoints {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			o, body, err := ep.call(0)
			if err == nil && slices.Contains(ep.ok, o.status) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s 30s after PostgreSQL came back: %v %v %s", ep.name, o, err, body)
			}
		}
	}
	t.Logf("every endpoint answered again %v after PostgreSQL was started", time.Since(back).Round(time.Millisecond))
	down.Store(0)
	time.Sleep(2 * time.Second)
	return counts
}

// checkOutagePhases logs the counts and checks that every endpoint that
// reads or writes the database got a 503 within the outage, and that every
// endpoint succeeded while PostgreSQL was up.
func checkOutagePhases(t *testing.T, counts *tally, endpoints []endpoint) {
	t.Helper()
	var phases []string
	for k := range counts.m {
		phases = append(phases, k)
	}
	slices.Sort(phases)
	for _, k := range phases {
		t.Logf("%-40s %v", k, counts.m[k])
	}
	for _, ep := range endpoints {
		out := counts.m["outage "+ep.name]
		if ep.db && out[outcome{http.StatusServiceUnavailable, "STORE_UNAVAILABLE"}] == 0 {
			t.Errorf("%s: no call made wholly within the outage (%v)", ep.name, out)
		}
		if up := counts.m["up "+ep.name]; up[outcome{status: ep.ok[0]}] == 0 {
			t.Errorf("%s: no success while PostgreSQL was up (%v)", ep.name, up)
		}
	}
}

// checkKept checks that nothing the load saw acknowledged is lost: rules,
// exemptions and keys created are there, rules and exemptions deleted are
// gone, and the usage in the database counts every /check answered. The
// usage recorder must have stopped (flushed) first.
func (l *outageLoad) checkKept(t *testing.T) {
	t.Helper()
	ctx, e := t.Context(), l.e
	rules, err := e.db.Rules(ctx, l.c.ID)
	if err != nil {
		t.Fatal(err)
	}
	ruleNames := map[string]bool{}
	for _, r := range rules {
		ruleNames[r.Name] = true
	}
	checkMadeAndGone(t, "rule", ruleNames, l.rulesMade, l.rulesGone)
	exemptions, err := e.db.Exemptions(ctx, l.c.ID)
	if err != nil {
		t.Fatal(err)
	}
	exempt := map[string]bool{}
	for _, x := range exemptions {
		exempt[x.Identifier] = true
	}
	checkMadeAndGone(t, "exemption", exempt, l.exemptionsMade, l.exemptionsGone)
	if err := e.cache.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	for _, key := range l.keysMade {
		if r, _, err := e.try("GET", "/me", key, ""); err != nil || r.status != http.StatusOK {
			t.Errorf("a key registered (201) does not work: %v %v", r, err)
		}
	}
	u, err := e.db.Usage(ctx, l.c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if u.TotalChecks != l.checks.Load() {
		t.Errorf("usage in the database: %d checks, want the %d answered", u.TotalChecks, l.checks.Load())
	}
	t.Logf("acknowledged and kept: %d clients, %d rules, %d exemptions, %d deletions, %d checks counted",
		len(l.keysMade), len(l.rulesMade), len(l.exemptionsMade), len(l.rulesGone)+len(l.exemptionsGone), u.TotalChecks)
}

// checkMadeAndGone checks that every name of made is in stored and none of gone is.
func checkMadeAndGone(t *testing.T, what string, stored map[string]bool, made, gone []string) {
	t.Helper()
	for _, n := range made {
		if !stored[n] {
			t.Errorf("%s %s was created (201) and is gone", what, n)
		}
	}
	for _, n := range gone {
		if stored[n] {
			t.Errorf("%s %s was deleted (200) and is there", what, n)
		}
	}
}

// TestSQLiteLocked: while another process holds SQLite's write lock, a
// write gets 503 STORE_UNAVAILABLE (with Retry-After) once it has waited
// Timeout (its own wait for the lock, or for SQLite's one connection, held
// by the other write). A read is let past the lock (WAL) unless it queues
// behind a waiting write for the connection: 200 or 503, never a 500. Once
// the lock is gone, writes succeed.
func TestSQLiteLocked(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "throttle.db")
	e := newEnvAt(t, "sqlite://"+path, backend{name: "sqlite+memory", limiter: "memory"})
	c := e.register(t, "locked")

	other, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(0)")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	tx, err := other.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`UPDATE revision SET value = value WHERE id = 1`); err != nil {
		t.Fatalf("take the write lock: %v", err)
	}
	var wg sync.WaitGroup
	for _, call := range [][3]string{
		{"POST", "/rules", `{"name":"r","algorithm":"fixed_window","limit":1,"window":60}`},
		{"GET", "/rules/list", ""},
		{"POST", "/exemptions", `{"identifier":"x"}`},
	} {
		wg.Go(func() {
			start := time.Now()
			o, body, err := e.try(call[0], call[1], c.Key, call[2])
			t.Logf("%s %s while locked: %d %s after %v", call[0], call[1], o.status, o.code, time.Since(start).Round(time.Millisecond))
			unavailable := err == nil && o.status == http.StatusServiceUnavailable && o.code == "STORE_UNAVAILABLE"
			if !unavailable && !(call[0] == "GET" && err == nil && o.status == http.StatusOK) {
				t.Errorf("%s %s while locked: %v %v %s, want 503 STORE_UNAVAILABLE", call[0], call[1], o, err, body)
			}
		})
	}
	wg.Wait()
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if r := e.call(t, "POST", "/rules", c.Key, `{"name":"r","algorithm":"fixed_window","limit":1,"window":60}`); r.status != http.StatusCreated {
		t.Errorf("POST /rules after the lock: %d %s", r.status, r.body)
	}
	if r := e.call(t, "GET", "/rules/list", c.Key, ""); r.status != http.StatusOK || !strings.Contains(r.body, `"name":"r"`) {
		t.Errorf("GET /rules/list after the lock: %d %s", r.status, r.body)
	}
}
