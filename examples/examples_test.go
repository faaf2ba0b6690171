package examples_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/throttle-rl/throttle/internal/testkit/throttletest"
)

// The Python, Node and curl examples against a real Throttle. They need
// python3, node (18+), bash and curl: a missing one fails the test with what to
// install, rather than skipping it unnoticed.
func TestScripts(t *testing.T) {
	for _, tool := range []string{"python3", "node", "bash", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not on PATH; the examples are tested with it. Install it (Debian: apt-get install -y python3 nodejs curl)", tool)
		}
	}
	srv := throttletest.Start(t)

	checkLine := regexp.MustCompile(`^check (\d+): (allowed remaining=(\d+)|rejected retry_after=(\d+)) limit=3 reset_at=\d+$`)
	scripts := []struct {
		name string
		argv []string
	}{
		{"python", []string{"python3", "python/check.py"}},
		{"node", []string{"node", "node/check.js"}},
	}
	for _, s := range scripts {
		t.Run(s.name, func(t *testing.T) {
			args := func(count string) []string {
				return append(slices.Clone(s.argv), "--count", count, "--limit", "3", "--window", "3600",
					"--algorithm", "fixed_window", "--identifier", s.name+"-user")
			}

			// No key: the script registers, prints the key, then checks.
			stdout, stderr := run(t, env(srv.URL, ""), args("4")...)
			want := []string{"allowed remaining=2", "allowed remaining=1", "allowed remaining=0", "rejected"}
			assertChecks(t, checkLine, stdout, want)
			m := regexp.MustCompile(`export THROTTLE_API_KEY=(\S+)`).FindStringSubmatch(stderr)
			if m == nil {
				t.Fatalf("no API key printed on stderr:\n%s", stderr)
			}

			// With the key: the same client's counter, already over.
			stdout, _ = run(t, env(srv.URL, m[1]), args("1")...)
			assertChecks(t, checkLine, stdout, []string{"rejected"})

			// Run again without a key, on the same server and database: a
			// client of its own again, with a fresh counter.
			stdout, stderr = run(t, env(srv.URL, ""), args("1")...)
			assertChecks(t, checkLine, stdout, []string{"allowed remaining=2"})
			if m2 := regexp.MustCompile(`export THROTTLE_API_KEY=(\S+)`).FindStringSubmatch(stderr); m2 == nil || m2[1] == m[1] {
				t.Errorf("the second run did not register a client of its own:\n%s", stderr)
			}
		})
	}

	t.Run("curl", func(t *testing.T) {
		// Twice: the second run registers a client of its own too.
		for range 2 {
			e := append(env(srv.URL, ""), "COUNT=4", "LIMIT=3", "WINDOW=3600", "IDENTIFIER=curl-user")
			stdout, _ := run(t, e, "bash", "curl.sh")
			allowed := regexp.MustCompile(`"allowed":\s*true`).FindAllString(stdout, -1)
			rejected := regexp.MustCompile(`"allowed":\s*false`).FindAllString(stdout, -1)
			if len(allowed) != 3 || len(rejected) != 1 {
				t.Errorf("want 3 allowed then 1 rejected, got %d and %d:\n%s", len(allowed), len(rejected), stdout)
			}
			if !regexp.MustCompile(`(?im)^retry-after: [1-9]\d*\r?$`).MatchString(stdout) {
				t.Errorf("no Retry-After header in the output:\n%s", stdout)
			}
			if !strings.Contains(stdout, `"status"`) {
				t.Errorf("no /health reply in the output:\n%s", stdout)
			}
		}
	})
}

// TestScriptsFailOnRegister: when /register refuses (here its limit of one
// registration an hour per address is spent), each script stops with an
// error that gives the status, and checks nothing with an empty key.
func TestScriptsFailOnRegister(t *testing.T) {
	srv := throttletest.Start(t, "REGISTER_LIMIT_PER_HOUR=1")
	srv.Register(t, "the one registration")
	for _, argv := range [][]string{
		{"python3", "python/check.py"},
		{"node", "node/check.js"},
		{"bash", "curl.sh"},
	} {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = env(srv.URL, "")
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		if err == nil || !strings.Contains(errb.String(), "register: HTTP 429") {
			t.Errorf("%s with /register refusing: %v, stderr %q; want an exit with register: HTTP 429", strings.Join(argv, " "), err, errb.String())
		}
		if strings.Contains(out.String(), "check 1") || strings.Contains(out.String(), "/check") {
			t.Errorf("%s checked after register failed:\n%s", strings.Join(argv, " "), out.String())
		}
	}
}

// assertChecks compares the "check N: …" lines of stdout with want, in order.
func assertChecks(t *testing.T, line *regexp.Regexp, stdout string, want []string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(want), stdout)
	}
	for i, l := range lines {
		m := line.FindStringSubmatch(l)
		if m == nil || m[1] != fmt.Sprint(i+1) || !strings.HasPrefix(m[2], want[i]) {
			t.Errorf("line %d = %q, want %q", i+1, l, fmt.Sprintf("check %d: %s …", i+1, want[i]))
		}
	}
}

// env is the test's environment with the examples' settings replaced.
func env(url, key string) []string {
	var e []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "THROTTLE_URL=") && !strings.HasPrefix(kv, "THROTTLE_API_KEY=") {
			e = append(e, kv)
		}
	}
	e = append(e, "THROTTLE_URL="+url, "PYTHONDONTWRITEBYTECODE=1")
	if key != "" {
		e = append(e, "THROTTLE_API_KEY="+key)
	}
	return e
}

func run(t *testing.T, env []string, argv ...string) (stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(argv, " "), err, out.String(), errb.String())
	}
	return out.String(), errb.String()
}
