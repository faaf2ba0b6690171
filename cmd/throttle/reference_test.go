package main

import (
	"slices"
	"testing"
)

// TestReferenceSettings: every setting of the reference service is either a
// row of serveSettings or ignored for a reason, never both, and named once.
func TestReferenceSettings(t *testing.T) {
	rows := map[string]bool{}
	for _, s := range serveSettings {
		if rows[s.env] {
			t.Errorf("serveSettings has two rows for %s", s.env)
		}
		rows[s.env] = true
	}
	seen := map[string]bool{}
	for _, r := range referenceSettings {
		if seen[r.env] {
			t.Errorf("referenceSettings names %s twice", r.env)
		}
		seen[r.env] = true
		switch {
		case rows[r.env] && r.ignored != "":
			t.Errorf("%s is a row of serveSettings and ignored (%q)", r.env, r.ignored)
		case !rows[r.env] && r.ignored == "":
			t.Errorf("%s is neither a row of serveSettings nor ignored for a reason", r.env)
		}
	}
}

// TestCommandLine: under the reference's name with no command, Throttle
// serves; under its own, or with a command, the arguments are the command.
func TestCommandLine(t *testing.T) {
	for _, tt := range []struct {
		argv0 string
		args  []string
		want  []string
	}{
		{"/bin/ratelimit", nil, []string{"serve"}},
		{"ratelimit", []string{"--help"}, []string{"serve", "--help"}},
		{"/usr/local/bin/ratelimit", []string{"version"}, []string{"version"}},
		{"/throttle", nil, nil},
		{"throttle", []string{"serve"}, []string{"serve"}},
		{"/bin/ratelimit-old", nil, nil},
	} {
		if got := commandLine(tt.argv0, tt.args); !slices.Equal(got, tt.want) {
			t.Errorf("commandLine(%q, %q) = %q, want %q", tt.argv0, tt.args, got, tt.want)
		}
	}
}
