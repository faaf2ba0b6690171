// Package npxtest runs npm packages for tests (`npx --yes`, or installed
// into a test's folder), pinned to the versions the tests name: the OpenAPI
// linter, the TypeScript type generator and compiler. npx must be on PATH (scripts/with-test-services.sh
// installs node and npm): a test that needs it fails without it, it never
// skips.
package npxtest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Pinned versions of the packages the tests run.
const (
	RedoclyCLI        = "@redocly/cli@1.34.20" // 1.x: runs on Debian's node 18 too
	OpenAPITypeScript = "openapi-typescript@7.13.0"
	TypeScript        = "typescript@5.9.3"
	NodeTypes         = "@types/node@20.19.25"
)

// Timeout bounds one run, the first one's download included.
const Timeout = 5 * time.Minute

// Run runs `npx --yes -p PKG… CMD ARGS…` in dir and returns its combined
// output; it fails t when npx is missing or the command fails.
func Run(t testing.TB, dir string, pkgs []string, cmd string, args ...string) string {
	t.Helper()
	out, err := Try(t, dir, pkgs, cmd, args...)
	if err != nil {
		t.Fatalf("npx %s %s: %v\n%s", cmd, strings.Join(args, " "), err, out)
	}
	return out
}

// Try is Run that returns the command's error instead of failing t (npx
// missing still fails t).
func Try(t testing.TB, dir string, pkgs []string, cmd string, args ...string) (string, error) {
	t.Helper()
	if _, err := exec.LookPath("npx"); err != nil {
		t.Fatal("npx is not on PATH: install node and npm (scripts/with-test-services.sh does, make test runs it)")
	}
	argv := []string{"--yes"}
	for _, p := range pkgs {
		argv = append(argv, "-p", p)
	}
	argv = append(append(argv, cmd), args...)
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	c := exec.CommandContext(ctx, "npx", argv...)
	c.Dir = dir
	c.Env = append(os.Environ(), "npm_config_update_notifier=false", "npm_config_fund=false", "npm_config_audit=false", "NO_COLOR=1")
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	err := c.Run()
	return out.String(), err
}

// Install installs pkgs into dir/node_modules (dir gets a package.json of
// its own), so their programs are in dir/node_modules/.bin and TypeScript
// finds their types; it fails t when npm is missing or the install fails.
func Install(t testing.TB, dir string, pkgs ...string) {
	t.Helper()
	if _, err := exec.LookPath("npm"); err != nil {
		t.Fatal("npm is not on PATH: install node and npm (scripts/with-test-services.sh does, make test runs it)")
	}
	if err := os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"private": true}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	c := exec.CommandContext(ctx, "npm", append([]string{"install", "--no-audit", "--no-fund", "--no-package-lock"}, pkgs...)...)
	c.Dir = dir
	c.Env = append(os.Environ(), "npm_config_update_notifier=false")
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("npm install %s: %v\n%s", strings.Join(pkgs, " "), err, out)
	}
}
