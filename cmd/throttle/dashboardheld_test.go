package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/throttle-rl/throttle/internal/testkit/redistest"
	"github.com/throttle-rl/throttle/internal/testkit/throttletest"
)

// TestDashboardReservations: the dashboard's Reservations card shows, for a
// client with outstanding reservations on Redis, each counter's used quota
// and beside it what reservations hold of it — the numbers /stats gives,
// read by the built binary from Redis — and follows a commit on its next
// poll. In real headless Chromium; the screenshot goes to the test's temp
// dir (or THROTTLE_SCREENSHOT_DIR, to keep it).
func TestDashboardReservations(t *testing.T) {
	browser, err := exec.LookPath(chromiumPath)
	if err != nil {
		t.Fatalf("%s not found (%v): run the tests via scripts/with-test-services.sh (make test), which installs Debian's chromium package", chromiumPath, err)
	}
	s := throttletest.Start(t, "REDIS_URL="+redistest.SharedURL(t))
	code, _, reg := doJSON(t, "POST", s.URL+"/register", "", `{"name":"LLM gateway","email":"llm-ops@example.com"}`)
	key, _ := reg["api_key"].(string)
	if code != 201 || !strings.HasPrefix(key, "thr_") {
		t.Fatalf("register: %d %v", code, reg)
	}
	if code, _, body := doJSON(t, "POST", s.URL+"/rules", key, `{"name":"llm_tokens","algorithm":"fixed_window","limit":10000,"window":86400}`); code != 201 {
		t.Fatalf("rule: %d %v", code, body)
	}
	check := func(body string) map[string]any {
		t.Helper()
		code, _, reply := doJSON(t, "POST", s.URL+"/check", key, body)
		if code != 200 || reply["allowed"] != true {
			t.Fatalf("check %s: %d %v", body, code, reply)
		}
		return reply
	}
	// llm_user_42: 640 tokens used and committed, 1,000 and 500 reserved.
	check(`{"identifier":"llm_user_42","rule":"llm_tokens","hits":640}`)
	big := check(`{"identifier":"llm_user_42","rule":"llm_tokens","hits":1000,"reserve_ttl":60}`)
	check(`{"identifier":"llm_user_42","rule":"llm_tokens","hits":500,"reserve_ttl":60}`)
	// An inline limit with one reservation of 20. (Windows of a day: a
	// test run crosses the end of one only at midnight UTC.)
	check(`{"identifier":"batch-job","algorithm":"fixed_window","limit":100,"window":86400,"hits":20,"reserve_ttl":60}`)

	shots := t.TempDir()
	if dir := os.Getenv("THROTTLE_SCREENSHOT_DIR"); dir != "" {
		shots = dir
	}
	ctx := newBrowser(t, browser)
	console := watchConsole(t, ctx)
	shot := func(name string) {
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
	}
	waitFor := func(what, js string) {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](js, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(20*time.Second))); err != nil {
			shot("failed.png")
			t.Fatalf("waiting for %s (%s): %v\nbrowser console: %q", what, js, err, console())
		}
	}
	eval := func(what, js string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return v
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(s.URL+"/ui/"), chromedp.WaitVisible(chromedp.ID("api-key")),
		chromedp.SetValue(chromedp.ID("api-key"), key), chromedp.Click(chromedp.ID("login-submit"))); err != nil {
		t.Fatalf("sign in: %v", err)
	}
	waitFor("the dashboard", `document.getElementById('app').dataset.state === 'ready'`)
	row := func(ident string) string {
		return fmt.Sprintf(`[...document.querySelectorAll('#reservations tr[data-identifier=%q] td')].map(td => td.textContent).join('|')`, ident)
	}
	waitFor("llm_user_42's row", `document.querySelector('#reservations tr[data-identifier="llm_user_42"]') !== null`)
	if got, want := eval("llm_user_42's row", row("llm_user_42")), "llm_user_42|llm_tokens fixed_window|10,000 / 86,400 s|2,140|1,500|7,860||2|"; !strings.HasPrefix(got, want) {
		t.Errorf("llm_user_42's row = %q, want it to start %q (used 640 + 1,500 held, of which held 1,500)", got, want)
	}
	if got, want := eval("batch-job's row", row("batch-job")), "batch-job|inline fixed_window|100 / 86,400 s|20|20|80||1|"; !strings.HasPrefix(got, want) {
		t.Errorf("batch-job's row = %q, want it to start %q", got, want)
	}
	if got := eval("count", `document.getElementById('reservations-count').textContent`); got != "3 outstanding reservations" {
		t.Errorf("count = %q, want 3 outstanding reservations", got)
	}
	if err := chromedp.Do(ctx, chromedp.ScrollIntoView(chromedp.ID("reservations-card"))); err != nil {
		t.Fatal(err)
	}
	shot("reservations.png")

	// A commit of 700 of the 1,000: the next poll shows 500 held, 1,840 used.
	id, _ := big["reservation_id"].(string)
	if code, _, body := doJSON(t, "POST", s.URL+"/reservations/"+id+"/commit", key, `{"hits":700}`); code != 200 || body["held"] != float64(1000) {
		t.Fatalf("commit: %d %v", code, body)
	}
	waitFor("held 500 after the commit", `document.querySelector('#reservations tr[data-identifier="llm_user_42"] td[data-field="held"]').textContent === '500'`)
	if got := eval("used after the commit", `document.querySelector('#reservations tr[data-identifier="llm_user_42"] td[data-field="used"]').textContent`); got != "1,840" {
		t.Errorf("used after the commit = %q, want 1,840 (640 + 700 committed + 500 held)", got)
	}
	shot("reservations-after-commit.png")
	for _, m := range console() {
		t.Errorf("browser console: %s", m)
	}
}
