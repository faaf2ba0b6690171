package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/throttle-rl/throttle/internal/testkit/throttletest"
)

// TestAgainstThrottle runs the client against a real Throttle loaded with the
// Envoy demo's descriptors: OK until the per-user limit, then OVER_LIMIT.
func TestAgainstThrottle(t *testing.T) {
	dir := t.TempDir()
	data, err := os.ReadFile("../../envoy/descriptors/edge.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	s := throttletest.Start(t, "DESCRIPTORS_DIR="+dir)
	// A minute boundary inside the 11 calls would legitimately reset the
	// window: a second attempt, as another user, cannot hit one too.
	var problems string
	for _, user := range []string{"alice", "bob"} {
		problems = sequence(t, s.GRPCAddr, user)
		if problems == "" {
			break
		}
	}
	if problems != "" {
		t.Fatal(problems)
	}
	var out bytes.Buffer
	if err := run([]string{"-addr", s.GRPCAddr}, &out, &out); err == nil {
		t.Error("no descriptor accepted")
	}
}

// sequence makes 11 calls as user and describes what differs from 10 OK
// then OVER_LIMIT, or returns "".
func sequence(t *testing.T, addr, user string) string {
	t.Helper()
	var out bytes.Buffer
	if err := run([]string{"-addr", addr, "-domain", "edge", "-d", "generic_key=api,user_id=" + user, "-n", "11"}, &out, &out); err != nil {
		t.Fatal(err)
	}
	lines := regexp.MustCompile(`(?m)^(\d+) (OK|OVER_LIMIT) \[(OK|OVER_LIMIT) 10/MINUTE remaining=(\d+) `).FindAllStringSubmatch(out.String(), -1)
	if len(lines) != 11 {
		return "got " + strconv.Itoa(len(lines)) + " result lines, want 11:\n" + out.String()
	}
	for i, l := range lines {
		want, remaining := "OK", 9-i
		if i == 10 {
			want, remaining = "OVER_LIMIT", 0
		}
		if l[2] != want || l[4] != strconv.Itoa(remaining) {
			return "call " + strconv.Itoa(i+1) + ": " + l[2] + " remaining " + l[4] + ", want " + want + " remaining " + strconv.Itoa(remaining) + "\n" + out.String()
		}
	}
	return ""
}
