package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/throttle-rl/throttle/internal/testkit"
	"github.com/throttle-rl/throttle/internal/testkit/throttletest"
)

// envoyQuickStarts are the docs' Envoy quick starts: the first sh block of
// each section makes a descriptor folder, checks it, and serves it.
var envoyQuickStarts = []curlDoc{
	{file: "README.md", section: "## Envoy and Istio", minBlocks: 1},
	{file: "envoy/README.md", section: "## Drop-in for the reference service", minBlocks: 1},
}

var quickStartServe = regexp.MustCompile(`^DESCRIPTORS_DIR=(\S+) go run \./cmd/throttle serve$`)

// TestEnvoyQuickStart runs the Envoy quick starts of the README and
// envoy/README.md as written (from a copy of the files they read, with the
// built binary for go run): the folder they make is no Go package and git
// ignores it, `config check` passes on it, and serve loads it.
func TestEnvoyQuickStart(t *testing.T) {
	bin := throttletest.Binary(t)
	ignore, err := os.ReadFile(filepath.Join(repoRoot, ".gitignore"))
	if err != nil {
		t.Fatal(err)
	}
	edge, err := os.ReadFile(filepath.Join(repoRoot, "envoy/descriptors/edge.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range envoyQuickStarts {
		t.Run(doc.file, func(t *testing.T) {
			lines := strings.Split(strings.TrimSpace(shBlocks(t, doc)[0]), "\n")
			m := quickStartServe.FindStringSubmatch(lines[len(lines)-1])
			if m == nil {
				t.Fatalf("the quick start's last line %q does not serve DESCRIPTORS_DIR", lines[len(lines)-1])
			}
			dir := strings.TrimSuffix(m[1], "/")
			if gos, _ := filepath.Glob(filepath.Join(repoRoot, dir, "*.go")); len(gos) > 0 {
				t.Errorf("the quick start writes into %s/, a Go package of the repository", dir)
			}
			if !slices.Contains(strings.Split(string(ignore), "\n"), "/"+dir+"/") {
				t.Errorf(".gitignore does not ignore the quick start's folder: no line /%s/", dir)
			}

			work := t.TempDir()
			if err := os.MkdirAll(filepath.Join(work, "envoy/descriptors"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(work, "envoy/descriptors/edge.yaml"), edge, 0o644); err != nil {
				t.Fatal(err)
			}
			script := strings.ReplaceAll(strings.Join(lines[:len(lines)-1], "\n"), "go run ./cmd/throttle", bin)
			cmd := exec.Command("bash", "-ec", script)
			cmd.Dir = work
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.HasSuffix(string(out), "1 file(s) OK\n") {
				t.Fatalf("the quick start's commands: %v\n%s", err, out)
			}
			s := throttletest.Start(t, "DESCRIPTORS_DIR="+filepath.Join(work, dir), "RLCONFIG_ON_REST_PORT=true")
			if _, _, dump := testkit.GetText(t, s.URL+"/rlconfig"); !strings.Contains(dump, "edge.generic_key_api.user_id: unit=MINUTE requests_per_unit=10") {
				t.Errorf("serve did not load the quick start's folder; /rlconfig:\n%s", dump)
			}
		})
	}
}
