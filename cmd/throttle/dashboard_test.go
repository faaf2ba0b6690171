package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/throttle-rl/throttle/internal/testkit/throttletest"
)

// chromiumPath is Debian's chromium, which scripts/with-test-services.sh
// installs.
const chromiumPath = "/usr/bin/chromium"

// TestDashboard drives the operator dashboard at /ui/ in a real headless
// Chromium against the built binary: sign in with a key, create and edit a
// rule, add an exemption, and watch checks made over HTTP show up in the
// chart and the top identifiers. Screenshots go to the test's temp dir (or
// THROTTLE_SCREENSHOT_DIR, to keep them); with THROTTLE_UPDATE_SCREENSHOT=1
// the last one also replaces docs/dashboard.png.
func TestDashboard(t *testing.T) {
	browser, err := exec.LookPath(chromiumPath)
	if err != nil {
		t.Fatalf("%s not found (%v): run the tests via scripts/with-test-services.sh (make test), which installs Debian's chromium package", chromiumPath, err)
	}
	descDir := t.TempDir()
	edgeYAML, err := os.ReadFile("testdata/edge.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(descDir, "edge.yaml"), edgeYAML, 0o644); err != nil {
		t.Fatal(err)
	}
	const admin = "dashboard-operator-key"
	s := throttletest.Start(t, "DESCRIPTORS_DIR="+descDir, "ADMIN_API_KEY="+admin)
	// The operator grants the shop gateway its domain (the YAML's edge is
	// the operator's own).
	code, _, reg := doJSON(t, "POST", s.URL+"/register", admin, `{"name":"Shop gateway","email":"shop-ops@example.com","domain":"shop","default_algorithm":"sliding_window"}`)
	key, _ := reg["api_key"].(string)
	if code != 201 || !strings.HasPrefix(key, "thr_") {
		t.Fatalf("register: %d %v", code, reg)
	}

	shots := t.TempDir()
	if dir := os.Getenv("THROTTLE_SCREENSHOT_DIR"); dir != "" {
		shots = dir // kept after the test, to look at
	}
	ctx := newBrowser(t, browser)
	console := watchConsole(t, ctx)
	shot := func(name string) []byte {
		t.Helper()
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		p := filepath.Join(shots, name)
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", p)
		return png
	}
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			shot("failed.png")
			t.Fatalf("%s: %v\nbrowser console: %q", what, err, console())
		}
	}
	// typeInto focuses the element sel selects and types text into it as key
	// presses. (Not chromedp.SendKeys: it reads the node's attributes
	// without their lock, a data race with DOM updates -race reports.)
	typeInto := func(sel, text string) chromedp.Action[chromedp.Void] {
		focus := chromedp.Evaluate[bool](fmt.Sprintf(`(() => { const e = document.querySelector(%q); e.focus(); e.select && e.select(); return true })()`, sel))
		return chromedp.Steps(
			func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
				_, err := focus(ctx, t)
				return chromedp.Void{}, err
			},
			chromedp.KeyEvent(text),
		)
	}
	eval := func(what, js string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return v
	}
	waitFor := func(what, js string) {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](js, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(20*time.Second))); err != nil {
			shot("failed.png")
			t.Fatalf("waiting for %s (%s): %v\nbrowser console: %q", what, js, err, console())
		}
	}

	// Sign in.
	do("load /ui/", chromedp.Navigate(s.URL+"/ui/"), chromedp.WaitVisible(chromedp.ID("api-key")))
	if title := eval("title", `document.title`); title != "Throttle · Dashboard" {
		t.Errorf("title = %q", title)
	}
	do("bad key", typeInto("#api-key", "thr_wrong"), chromedp.Click(chromedp.ID("login-submit")))
	waitFor("the bad key refused", `!document.getElementById('login-error').hidden`)
	if msg := eval("login error", `document.getElementById('login-error').textContent`); !strings.Contains(msg, "INVALID_API_KEY") {
		t.Errorf("login error = %q, want INVALID_API_KEY", msg)
	}
	do("paste the key", chromedp.SetValue(chromedp.ID("api-key"), key))
	shot("01-login.png")
	do("sign in", chromedp.Click(chromedp.ID("login-submit")))
	waitFor("the dashboard", `document.getElementById('app').dataset.state === 'ready'`)
	if who := eval("client", `document.getElementById('client-name').textContent + ' ' + document.getElementById('client-domain').textContent`); who != "Shop gateway shop" {
		t.Errorf("signed in as %q, want Shop gateway shop", who)
	}
	// The key is in this tab's session only: not in local storage, cookies or the URL.
	if got := eval("storage", `[sessionStorage.getItem('throttle.apiKey') === `+strconv.Quote(key)+`, localStorage.length, document.cookie, location.href].join('|')`); got != "true|0||"+s.URL+"/ui/" {
		t.Errorf("storage = %q, want the key in sessionStorage only", got)
	}

	// Create a rule, then edit it.
	do("create a rule",
		chromedp.Click(chromedp.ID("rule-new")),
		typeInto("#rule-name", "api_default"),
		chromedp.SetValue(chromedp.CSS(firstLimit("algorithm")), "fixed_window"),
		typeInto(firstLimit("limit"), "5"),
		typeInto(firstLimit("window"), "3600"),
		chromedp.Click(chromedp.ID("rule-submit")),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-rule="api_default"]`)),
	)
	if got := eval("rule row", `document.querySelector('tr[data-rule="api_default"]').innerText.replace(/\s+/g, ' ').trim()`); !strings.HasPrefix(got, "api_default fixed_window exact regional 5 3,600 s") {
		t.Errorf("rule row = %q, want api_default fixed_window exact regional 5 3,600 s", got)
	}
	// Overrides of the rule (made over HTTP) show in its row once the rules reload.
	for _, o := range []string{`{"identifier":"partner-*","limit":500,"window":3600}`, `{"identifier":"acme","limit":100}`} {
		if code, _, body := doJSON(t, "POST", s.URL+"/rules/api_default/overrides", key, o); code != 201 {
			t.Fatalf("override %s: %d %v", o, code, body)
		}
	}
	do("edit the rule",
		chromedp.Click(chromedp.CSS(`tr[data-rule="api_default"] button[data-action="edit"]`)),
		chromedp.WaitVisible(chromedp.ID("rule-form")),
		chromedp.SetValue(chromedp.CSS(firstLimit("limit")), "20"),
		chromedp.Click(chromedp.ID("rule-submit")),
	)
	waitFor("the edited limit", `(document.querySelector('tr[data-rule="api_default"] td[data-field="limit"]') || {}).textContent === '20'`)
	waitFor("the overrides", `document.querySelectorAll('tr[data-rule="api_default"] .override').length === 2`)
	if got := eval("overrides", `[...document.querySelectorAll('tr[data-rule="api_default"] .override')].map(e => e.textContent).join(' | ')`); got != "acme → 100× | partner-* → 500 / 3,600 s×" {
		t.Errorf("overrides of api_default = %q", got)
	}
	do("remove the override of acme", chromedp.Click(chromedp.CSS(`tr[data-rule="api_default"] [data-override="acme"] .override-del`)))
	waitFor("acme's override removed", `document.querySelectorAll('tr[data-rule="api_default"] .override').length === 1`)
	do("create a descriptor rule",
		chromedp.Click(chromedp.ID("rule-new")),
		typeInto("#rule-name", "login"),
		chromedp.SetValue(chromedp.CSS(firstLimit("algorithm")), "token_bucket"),
		typeInto(firstLimit("limit"), "5"),
		typeInto(firstLimit("refill_rate"), "0.1"),
		typeInto("#rule-descriptors", "path=/login, remote_address"),
		chromedp.Click(chromedp.ID("rule-submit")),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-rule="login"]`)),
	)
	// Burst and sustained on one descriptor: a rule of two limits, the
	// second always counting.
	do("create a rule of two limits",
		chromedp.Click(chromedp.ID("rule-new")),
		typeInto("#rule-name", "search"),
		chromedp.SetValue(chromedp.CSS(firstLimit("algorithm")), "fixed_window"),
		typeInto(firstLimit("limit"), "10"),
		typeInto(firstLimit("window"), "1"),
		typeInto("#rule-descriptors", "path=/search"),
		chromedp.Click(chromedp.ID("rule-add-limit")),
		chromedp.WaitVisible(chromedp.CSS(secondLimit(""))),
		chromedp.SetValue(chromedp.CSS(secondLimit("name")), "daily"),
		chromedp.SetValue(chromedp.CSS(secondLimit("algorithm")), "sliding_window"),
		chromedp.SetValue(chromedp.CSS(secondLimit("accuracy")), "approximate"),
		chromedp.SetValue(chromedp.CSS(secondLimit("limit")), "1000"),
		chromedp.SetValue(chromedp.CSS(secondLimit("window")), "86400"),
		chromedp.Click(chromedp.CSS(secondLimit("always_count"))),
		chromedp.Click(chromedp.ID("rule-submit")),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-rule="search"]`)),
	)
	if got := eval("rule of two limits", `document.querySelector('tr[data-rule="search"]').innerText.replace(/\s+/g, ' ').trim()`); !strings.HasPrefix(got, "search 2 limits, all must admit search[0] fixed_window daily sliding_window exact approximate regional regional 10 1,000 always counts 1 s 86,400 s") {
		t.Errorf("rule of two limits row = %q", got)
	}
	do("edit the rule of two limits",
		chromedp.Click(chromedp.CSS(`tr[data-rule="search"] button[data-action="edit"]`)),
		chromedp.WaitVisible(chromedp.CSS(secondLimit(""))),
	)
	if got := eval("the form of two limits", `[document.getElementById('rule-limits').dataset.count, document.querySelector('`+secondLimit("name")+`').value, document.querySelector('`+secondLimit("limit")+`').value, String(document.querySelector('`+secondLimit("always_count")+`').checked), document.querySelector('`+secondLimit("accuracy")+`').value, document.querySelector('`+firstLimit("limit")+`').value].join('|')`); got != "2|daily|1000|true|approximate|10" {
		t.Errorf("the edit form of the rule of two limits = %q, want 2|daily|1000|true|approximate|10", got)
	}
	shot("02-two-limits.png")
	do("save it unchanged", chromedp.Click(chromedp.ID("rule-submit")))
	waitFor("the form closed", `document.getElementById('rule-form').hidden`)
	// An approximate rule; approximate with a token bucket is refused, with
	// the server's reason in the form.
	do("create an approximate rule",
		chromedp.Click(chromedp.ID("rule-new")),
		typeInto("#rule-name", "feed"),
		chromedp.SetValue(chromedp.CSS(firstLimit("algorithm")), "fixed_window"),
		chromedp.SetValue(chromedp.CSS(firstLimit("accuracy")), "approximate"),
		typeInto(firstLimit("limit"), "6400"),
		typeInto(firstLimit("window"), "3600"),
		chromedp.Click(chromedp.ID("rule-submit")),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-rule="feed"]`)),
	)
	if got := eval("approximate rule row", `document.querySelector('tr[data-rule="feed"]').innerText.replace(/\s+/g, ' ').trim()`); !strings.HasPrefix(got, "feed fixed_window approximate regional 6,400 3,600 s") {
		t.Errorf("approximate rule row = %q, want feed fixed_window approximate regional 6,400 3,600 s", got)
	}
	do("edit the approximate rule", chromedp.Click(chromedp.CSS(`tr[data-rule="feed"] button[data-action="edit"]`)), chromedp.WaitVisible(chromedp.ID("rule-form")))
	if got := eval("the edit form's accuracy", `document.querySelector('`+firstLimit("accuracy")+`').value`); got != "approximate" {
		t.Errorf("the edit form of feed shows accuracy %q, want approximate", got)
	}
	do("cancel", chromedp.Click(chromedp.ID("rule-cancel")))
	do("try an approximate token bucket",
		chromedp.Click(chromedp.ID("rule-new")),
		typeInto("#rule-name", "bucket"),
		chromedp.SetValue(chromedp.CSS(firstLimit("algorithm")), "token_bucket"),
		chromedp.SetValue(chromedp.CSS(firstLimit("accuracy")), "approximate"),
		typeInto(firstLimit("limit"), "10"),
		chromedp.Click(chromedp.ID("rule-submit")),
	)
	waitFor("the refusal", `!document.getElementById('rule-error').hidden`)
	if got := eval("the refusal", `document.getElementById('rule-error').textContent`); !strings.Contains(got, "accuracy approximate applies to fixed_window and sliding_window, not token_bucket") {
		t.Errorf("rule form error = %q, want the server's reason", got)
	}
	do("cancel", chromedp.Click(chromedp.ID("rule-cancel")))
	// Scope global: choosing it chooses approximate, and this server,
	// without GLOBAL_REDIS_URL, refuses it, with its reason in the form.
	do("try a global rule",
		chromedp.Click(chromedp.ID("rule-new")),
		typeInto("#rule-name", "tenant"),
		chromedp.SetValue(chromedp.CSS(firstLimit("algorithm")), "fixed_window"),
		typeInto(firstLimit("limit"), "6000"),
		typeInto(firstLimit("window"), "60"),
	)
	// Chosen as a person chooses: the value, then the change event.
	eval("choose global", `(() => { const e = document.querySelector('`+firstLimit("scope")+`'); e.value = 'global'; e.dispatchEvent(new Event('change')); return 'ok' })()`)
	if got := eval("the global form's accuracy", `document.querySelector('`+firstLimit("accuracy")+`').value`); got != "approximate" {
		t.Errorf("accuracy after choosing scope global = %q, want approximate", got)
	}
	do("submit it", chromedp.Click(chromedp.ID("rule-submit")))
	waitFor("the refusal of global", `!document.getElementById('rule-error').hidden`)
	if got := eval("the refusal of global", `document.getElementById('rule-error').textContent`); !strings.Contains(got, `scope "global" needs GLOBAL_REDIS_URL`) {
		t.Errorf("rule form error = %q, want the server's GLOBAL_REDIS_URL sentence", got)
	}
	do("cancel", chromedp.Click(chromedp.ID("rule-cancel")))

	rules := getJSONList(t, s.URL+"/rules/list", key)
	if len(rules) != 4 || rules[0]["name"] != "api_default" || rules[0]["limit"] != float64(20) || rules[0]["accuracy"] != "exact" || rules[0]["scope"] != "regional" ||
		rules[1]["name"] != "feed" || rules[1]["accuracy"] != "approximate" ||
		rules[2]["name"] != "login" || rules[2]["refill_rate"] != 0.1 || fmt.Sprint(rules[2]["descriptors"]) != "[map[key:path value:/login] map[key:remote_address]]" ||
		rules[3]["name"] != "search" || fmt.Sprint(rules[3]["rate_limits"]) != "[map[accuracy:exact algorithm:fixed_window limit:10 scope:regional window:1] map[accuracy:approximate algorithm:sliding_window always_count:true limit:1000 name:daily scope:regional window:86400]]" {
		t.Errorf("rules over HTTP after the UI made them = %v", rules)
	}

	// An exemption.
	do("add an exemption",
		typeInto("#exemption-identifier", "internal-service"),
		typeInto("#exemption-reason", "health checker"),
		chromedp.Click(chromedp.ID("exemption-submit")),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-exemption="internal-service"]`)),
	)
	shot("03-rules.png")

	// Traffic over HTTP, in rounds across several polls: alice goes over
	// the rule's 20 per hour, the exempt identifier never does.
	perRound := func(id string, round int) int {
		switch id {
		case "alice":
			return 3 + round%3
		case "bob":
			return 1 + round%2
		case "carol":
			return 1
		case "dave":
			return min(1, round%3)
		}
		return 2 + round%2 // internal-service
	}
	var allowed, rejected, alice int
	const rounds = 10
	for round := range rounds {
		for _, id := range []string{"alice", "bob", "carol", "dave", "internal-service"} {
			for range perRound(id, round) {
				code, _, body := doJSON(t, "POST", s.URL+"/check", key, `{"identifier":"`+id+`","rule":"api_default"}`)
				if code != 200 {
					t.Fatalf("check %s: %d %v", id, code, body)
				}
				if body["allowed"] == true {
					allowed++
				} else {
					rejected++
				}
				if id == "alice" {
					alice++
				}
			}
		}
		if round < rounds-1 {
			time.Sleep(time.Second)
		}
	}
	if rejected != alice-20 {
		t.Fatalf("rejected %d checks, want %d (alice's beyond 20)", rejected, alice-20)
	}
	waitFor(fmt.Sprintf("the chart to count %d allowed and %d rejected", allowed, rejected),
		fmt.Sprintf(`(c => c.dataset.allowed === '%d' && c.dataset.rejected === '%d')(document.getElementById('chart'))`, allowed, rejected))

	if n := eval("chart bars", `String(document.querySelectorAll('#chart rect.bar-bad').length)`); n == "0" {
		t.Error("the chart draws no rejected bar")
	}
	if got := eval("top identifier", `document.querySelector('#identifiers tbody tr').innerText.replace(/\s+/g, ' ').trim()`); !strings.HasPrefix(got, fmt.Sprintf("alice %d 20 %d", alice, rejected)) {
		t.Errorf("top identifier row = %q, want alice %d 20 %d", got, alice, rejected)
	}
	if got := eval("rejected stat", `document.getElementById('stat-rejected').textContent`); got != strconv.Itoa(rejected) {
		t.Errorf("rejected stat = %q, want %d", got, rejected)
	}

	// The descriptor YAML is loaded and does not name the client's domain:
	// its rules decide it. The YAML itself is the operator's, never shown.
	if got := eval("descriptors", `document.getElementById('desc-badge').textContent + '|' + document.getElementById('desc-facts').textContent`); !strings.HasPrefix(got, "loaded|DomainshopSourceNo YAML file names this domain: your rules with descriptors apply") || strings.Contains(got, "generic_key") {
		t.Errorf("descriptors panel = %q, want loaded, shop decided by its rules, no YAML shown", got)
	}
	final := shot("04-dashboard.png")
	if os.Getenv("THROTTLE_UPDATE_SCREENSHOT") == "1" {
		if err := os.WriteFile("../../docs/dashboard.png", final, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// A check-only key for a browser app: minted in the UI, shown once
	// with a snippet, listed; it checks and does nothing else.
	do("mint a check-only key",
		chromedp.Click(chromedp.ID("key-new")),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-key]`)),
	)
	waitFor("the minted key shown", `!document.getElementById('key-minted').hidden`)
	checkKey := eval("the minted key", `document.getElementById('key-secret').textContent`)
	snippet := eval("its snippet", `document.getElementById('key-snippet').textContent`)
	if !strings.HasPrefix(checkKey, "thr_") || !strings.Contains(snippet, checkKey) || !strings.Contains(snippet, "/check") {
		t.Errorf("the minted key %q and its snippet %q", checkKey, snippet)
	}
	if code, _, body := doJSON(t, "POST", s.URL+"/check", checkKey, `{"identifier":"browser","limit":5,"window":60}`); code != 200 {
		t.Errorf("the check-only key's check: %d %v", code, body)
	}
	if code, _, body := doJSON(t, "GET", s.URL+"/rules/list", checkKey, ""); code != 403 || body["code"] != "KEY_SCOPE" {
		t.Errorf("the check-only key's /rules/list: %d %v, want 403 KEY_SCOPE", code, body)
	}
	// A reload of the tab keeps the session; signing out forgets the key.
	do("reload", chromedp.Reload())
	waitFor("the dashboard after a reload", `document.getElementById('app').dataset.state === 'ready'`)
	do("sign out", chromedp.Click(chromedp.ID("signout")), chromedp.WaitVisible(chromedp.ID("api-key")))
	if got := eval("storage after sign out", `String(sessionStorage.length + localStorage.length)`); got != "0" {
		t.Errorf("storage entries after sign out = %s, want 0", got)
	}

	for _, m := range console() {
		t.Errorf("browser console: %s", m)
	}
}

// newBrowser starts headless Chromium with a fresh profile; it is stopped
// when the test ends.
func newBrowser(t *testing.T, path string) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox, // CI runs as root
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1360, 900),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("force-device-scale-factor", "1"),
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start %s: %v", path, err)
	}
	return ctx
}

// watchConsole collects the page's console errors, uncaught exceptions and
// browser log errors (a Content-Security-Policy violation is one); the
// returned func lists those seen so far.
func watchConsole(t *testing.T, ctx context.Context) func() []string {
	t.Helper()
	var (
		mu   sync.Mutex
		seen []string
	)
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			// The refused sign-in with a bad key is expected to 401, the
			// refused approximate token bucket rule to 400.
			expected := m.Source == "network" && (strings.Contains(m.Text, "status of 401") ||
				strings.Contains(m.Text, "status of 400") && strings.HasSuffix(m.URL, "/rules"))
			if (m.Type == chromedp.ConsoleError || m.IsException()) && !expected {
				mu.Lock()
				seen = append(seen, m.String())
				mu.Unlock()
			}
		}
	}()
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

// getJSONList GETs url with key and decodes a JSON array of objects.
func getJSONList(t *testing.T, url, key string) []map[string]any {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-API-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	var list []map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return list
}

// limitField selects the input of field in row i of the rule form's
// limits (0: the rule's own limit), or the row itself when field is "".
func limitField(i int, field string) string {
	row := fmt.Sprintf(`#rule-limits .limit-row[data-limit="%d"]`, i)
	if field == "" {
		return row
	}
	return row + ` [data-field="` + field + `"]`
}

func firstLimit(field string) string  { return limitField(0, field) }
func secondLimit(field string) string { return limitField(1, field) }
