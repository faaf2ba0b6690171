package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// TestRun: the command packages the chart where -out says and prints its
// path; without its flags it says how to call it.
func TestRun(t *testing.T) {
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	err := run([]string{"-version", "v1.2.3", "-image", "ghcr.io/o/throttle", "-chart", filepath.Join(repoRoot, "charts/throttle"), "-out", out}, &stdout, &stderr)
	if want := filepath.Join(out, "throttle-1.2.3.tgz") + "\n"; err != nil || stdout.String() != want {
		t.Errorf("run: %v, printed %q; want %q", err, stdout.String(), want)
	}
	if err := run([]string{"-version", "v1.2.3"}, &stdout, &stderr); err == nil || !strings.HasPrefix(err.Error(), "usage: releasechart") {
		t.Errorf("run without -image: %v, want the usage", err)
	}
}
