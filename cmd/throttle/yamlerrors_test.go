package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/throttle-rl/throttle/internal/testkit"
	"github.com/throttle-rl/throttle/internal/testkit/throttletest"
)

// syntaxCases are issue 32's two YAML syntax errors, the descriptors
// package's fixtures: each message must name the file and the line of the
// actual problem (not the start of the block that holds it).
var syntaxCases = []struct{ fixture, want string }{
	{"unclosed_brace.yaml", ":4: error loading config file: yaml: the flow mapping '{' opened at line 4, column 17 is not closed: did not find expected ',' or '}' at line 5, column 8"},
	{"bad_indentation.yaml", ":6: error loading config file: yaml: did not find expected key at line 6, column 6 (while parsing a block mapping that starts at line 3, column 5)"},
}

// syntaxDir copies the fixture into a folder of its own and returns the
// folder and the file's path there.
func syntaxDir(t *testing.T, fixture string) (dir, file string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "descriptors/testdata/throttle", fixture))
	if err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	file = filepath.Join(dir, fixture)
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, file
}

// TestConfigCheckSyntaxErrorLines: `throttle config check` names the file
// and line of a YAML syntax error, given the file or its folder (read as
// DESCRIPTORS_DIR is).
func TestConfigCheckSyntaxErrorLines(t *testing.T) {
	bin := throttletest.Binary(t)
	for _, tc := range syntaxCases {
		dir, file := syntaxDir(t, tc.fixture)
		for _, arg := range []string{file, dir} {
			out, err := exec.Command(bin, "config", "check", arg).CombinedOutput()
			want := "throttle: invalid descriptor configuration:\n" + file + tc.want + "\n"
			if err == nil || string(out) != want {
				t.Errorf("config check %s: %v\n%s\nwant %s", arg, err, out, want)
			}
		}
	}
	// A folder of good files: each is read, as DESCRIPTORS_DIR would.
	out, err := exec.Command(bin, "config", "check", filepath.Join(repoRoot, "envoy/descriptors")).CombinedOutput()
	if err != nil || string(out) != "1 file(s) OK\n" {
		t.Errorf("config check envoy/descriptors: %v %s; want 1 file(s) OK", err, out)
	}
	out, err = exec.Command(bin, "config", "check", t.TempDir()).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "no descriptor files (*.yaml, *.yml) in ") {
		t.Errorf("config check of an empty folder: %v %s; want an error", err, out)
	}
}

// TestServeSyntaxErrorLines: serve refuses to start on a YAML syntax error
// in DESCRIPTORS_DIR, and a reload keeps the last good configuration,
// naming the file and line in both cases.
func TestServeSyntaxErrorLines(t *testing.T) {
	for _, tc := range syntaxCases {
		dir, file := syntaxDir(t, tc.fixture)
		getenv := env(map[string]string{
			"DESCRIPTORS_DIR": dir, "BIND_ADDRESS": "127.0.0.1", "LOG_LEVEL": "error",
			"PORT": strconv.Itoa(testkit.FreePort(t)), "GRPC_PORT": strconv.Itoa(testkit.FreePort(t)),
			"DATABASE_URL": "sqlite://" + filepath.Join(t.TempDir(), "t.db"),
		})
		var out bytes.Buffer
		err := run(context.Background(), []string{"serve"}, getenv, &out, &out)
		want := "DESCRIPTORS_DIR: " + file + tc.want + " (FORCE_START_WITHOUT_INITIAL_CONFIG=true starts without it)"
		if err == nil || err.Error() != want {
			t.Errorf("serve: err = %v\nwant %s", err, want)
		}
	}

	dir := t.TempDir()
	edge := filepath.Join(dir, "edge.yaml")
	good, err := os.ReadFile("testdata/edge.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(edge, good, 0o644); err != nil {
		t.Fatal(err)
	}
	s := throttletest.Start(t, "DESCRIPTORS_DIR="+dir, "DESCRIPTORS_RELOAD_INTERVAL=100ms")
	for _, tc := range syntaxCases {
		bad, err := os.ReadFile(filepath.Join(repoRoot, "descriptors/testdata/throttle", tc.fixture))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(edge, bad, 0o644); err != nil {
			t.Fatal(err)
		}
		want := edge + tc.want
		for deadline := time.Now().Add(10 * time.Second); !strings.Contains(s.Logs.String(), want); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no reload error naming %s in the logs after 10s:\n%s", want, s.Logs.String())
			}
		}
	}
}
