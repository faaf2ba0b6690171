package main

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/throttle-rl/throttle/internal/redistest"
	"github.com/throttle-rl/throttle/internal/throttletest"
)

// TestREADMECurlExamples runs the README's REST API curl examples, in order,
// in one shell, against the built binary — with the embedded default, and
// with Redis and PostgreSQL: the documentation must work as written.
func TestREADMECurlExamples(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is not installed: run the tests via scripts/with-test-services.sh (make test), which installs it")
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	start, end := strings.Index(text, "\n## REST API\n"), strings.Index(text, "\n## Run with Envoy\n")
	if start < 0 || end < start {
		t.Fatal("README has no '## REST API' section followed by '## Run with Envoy'")
	}
	blocks := regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(text[start:end], -1)
	if len(blocks) < 14 {
		t.Fatalf("found %d sh examples in the REST API section, want one per endpoint at least", len(blocks))
	}
	setups := map[string][]string{
		"embedded":       nil,
		"redis+postgres": {"REDIS_URL=" + redistest.SharedURL(t), "DATABASE_URL=" + freshPostgres(t), "BACKEND_TIMEOUT=2s"},
	}
	for name, env := range setups {
		t.Run(name, func(t *testing.T) { runREADMEExamples(t, blocks, env) })
	}
}

func runREADMEExamples(t *testing.T, blocks [][]string, env []string) {
	s := throttletest.Start(t, env...)
	var script strings.Builder
	script.WriteString("set -e\n")
	for _, b := range blocks {
		script.WriteString(strings.ReplaceAll(b[1], "http://localhost:8080", s.URL))
		script.WriteString("\necho\n")
	}
	out, err := exec.Command("bash", "-c", script.String()).CombinedOutput()
	if err != nil {
		t.Fatalf("README examples failed: %v\n%s", err, out)
	}
	got := string(out)
	for _, want := range []string{
		`{"status":"ok"}`,
		`"api_key":"thr_`,
		`"allowed":true`,
		`"allowed":false`,
		`"code":"METHOD_NOT_ALLOWED"`,
		`"code":"UNKNOWN_FIELD"`,
		`"keys_deleted":`,
		`"total_checks":`,
		"throttle_decisions_total{",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("README examples' output lacks %q", want)
		}
	}
	if strings.Contains(got, `"code":"INVALID_API_KEY"`) || strings.Contains(got, `"code":"MISSING_API_KEY"`) {
		t.Errorf("an example ran without a valid key:\n%s", got)
	}
	if t.Failed() {
		t.Logf("output:\n%s", got)
	}
}
