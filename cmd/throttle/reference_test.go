package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestReferenceSettings: every setting of the reference service
// (testdata/reference-settings.txt, its settings.go's list: `make
// reference-settings REFERENCE_SRC=…` writes it anew from a checkout) is one
// row of serveSettings with the reference's default in its ref column, and
// no other row claims to be the reference's; a row that takes any value
// (no set) is one the log names as without effect, with no flag.
func TestReferenceSettings(t *testing.T) {
	rows := map[string]setting{}
	for _, s := range serveSettings {
		if _, ok := rows[s.env]; ok {
			t.Errorf("serveSettings has two rows for %s", s.env)
		}
		rows[s.env] = s
		if s.set == nil && (s.flag != "" || s.ref.inert == nil || s.ref.inert(&config{}) == "") {
			t.Errorf("%s takes any value: it must have no flag and say why it changes nothing", s.env)
		}
	}
	upstream := referenceList(t)
	named := map[string]bool{}
	for _, r := range upstream {
		named[r.env] = true
		s, ok := rows[r.env]
		switch {
		case !ok:
			t.Errorf("the reference's %s is no row of serveSettings", r.env)
		case !s.ref.named || s.ref.def != r.def:
			t.Errorf("%s: the row's reference column is %+v, want the reference's default %q", r.env, s.ref, r.def)
		}
	}
	for _, s := range serveSettings {
		if s.ref.named && !named[s.env] {
			t.Errorf("%s says it is the reference's, which has no such setting", s.env)
		}
	}
}

// referenceSetting is a line of testdata/reference-settings.txt.
type referenceSetting struct{ env, def string }

// referenceList reads testdata/reference-settings.txt: the reference's
// settings in its order, each NAME and its default there (none: empty).
func referenceList(t *testing.T) []referenceSetting {
	t.Helper()
	b, err := os.ReadFile("testdata/reference-settings.txt")
	if err != nil {
		t.Fatal(err)
	}
	var out []referenceSetting
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		env, def, _ := strings.Cut(line, " ")
		out = append(out, referenceSetting{env, def})
	}
	if len(out) < 100 {
		t.Fatalf("testdata/reference-settings.txt names %d settings; the reference has over 100", len(out))
	}
	return out
}

// TestInertSettingsLogged: the settings given that change nothing are
// named for the log, whichever way they change nothing: always (QUOTA_MODE,
// REDIS_PIPELINE_WINDOW, RUNTIME_WATCH_ROOT), or with another setting
// (RUNTIME_* under CONFIG_TYPE=GRPC_XDS_SOTW); the same with CONFIG_TYPE=FILE
// leaves the RUNTIME_* that apply out.
func TestInertSettingsLogged(t *testing.T) {
	given := map[string]string{"QUOTA_MODE": "true", "REDIS_URL": "r:6379", "REDIS_PIPELINE_WINDOW": "1ms", "RUNTIME_WATCH_ROOT": "false",
		"RUNTIME_ROOT": "/data", "RUNTIME_SUBDIRECTORY": "ratelimit", "BACKEND_TYPE": "redis"}
	for _, tt := range []struct {
		configType string
		want       []string
	}{
		{"FILE", []string{"REDIS_PIPELINE_WINDOW", "RUNTIME_WATCH_ROOT", "QUOTA_MODE"}},
		{"GRPC_XDS_SOTW", []string{"REDIS_PIPELINE_WINDOW", "RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_WATCH_ROOT", "QUOTA_MODE"}},
	} {
		given["CONFIG_TYPE"] = tt.configType
		c, err := parseServe(nil, func(k string) string { return given[k] }, &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(c.Inert, tt.want) {
			t.Errorf("CONFIG_TYPE=%s: named as without effect %q, want %q", tt.configType, c.Inert, tt.want)
		}
	}
}

// referenceTable is the table of docs/moving-from-envoy-ratelimit.md: every
// setting of the reference in its order, its default there, and what
// Throttle does with it (its row's help and default, or why it changes
// nothing).
func referenceTable(t *testing.T) string {
	rows := map[string]setting{}
	for _, s := range serveSettings {
		rows[s.env] = s
	}
	var b strings.Builder
	b.WriteString("| setting | the reference's default | in Throttle |\n| --- | --- | --- |\n")
	for _, r := range referenceList(t) {
		s := rows[r.env]
		does := fmt.Sprintf("%s (default %s)", s.usage, markdownValue(s.def))
		if s.set == nil {
			does = "accepted and ignored (named in the log at start): " + s.ref.inert(&config{})
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", r.env, markdownValue(r.def), strings.ReplaceAll(does, "|", `\|`))
	}
	return b.String()
}

// markdownValue is a default as the docs show it.
func markdownValue(v string) string {
	if v == "" {
		return "empty"
	}
	return "`" + v + "`"
}

// TestCommandLine: under the reference's name with no command, Throttle
// serves; under its own, or with a command, the arguments are the command.
func TestCommandLine(t *testing.T) {
	for _, tt := range []struct {
		argv0     string
		args      []string
		want      []string
		reference bool
	}{
		{"/bin/ratelimit", nil, []string{"serve"}, true},
		{"ratelimit", []string{"--help"}, []string{"serve", "--help"}, true},
		{"/usr/local/bin/ratelimit", []string{"version"}, []string{"version"}, false},
		{"/throttle", nil, nil, false},
		{"throttle", []string{"serve"}, []string{"serve"}, false},
		{"/bin/ratelimit-old", nil, nil, false},
	} {
		if got, ref := commandLine(tt.argv0, tt.args); !slices.Equal(got, tt.want) || ref != tt.reference {
			t.Errorf("commandLine(%q, %q) = %q, %v; want %q, %v", tt.argv0, tt.args, got, ref, tt.want, tt.reference)
		}
	}
	getenv := referenceDefaults(func(name string) string {
		return map[string]string{"PORT": "9000"}[name]
	})
	if got := getenv("DATABASE_URL"); got != "sqlite://:memory:" {
		t.Errorf("DATABASE_URL under the reference's name = %q, want sqlite://:memory:", got)
	}
	if got := getenv("PORT"); got != "9000" {
		t.Errorf("PORT = %q, want what is given", got)
	}
}

// TestReferenceTableDocumented: docs/moving-from-envoy-ratelimit.md holds
// referenceTable between its markers; THROTTLE_UPDATE_DOCS=1 writes it.
func TestReferenceTableDocumented(t *testing.T) {
	const begin, end = "<!-- reference settings: begin (generated by THROTTLE_UPDATE_DOCS=1 go test ./cmd/throttle -run TestReferenceTableDocumented) -->\n", "<!-- reference settings: end -->"
	path := filepath.Join(repoRoot, "docs/moving-from-envoy-ratelimit.md")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i < 0 || j < i {
		t.Fatalf("%s has no markers %q … %q", path, begin, end)
	}
	got, want := doc[i+len(begin):j], referenceTable(t)
	if got == want {
		return
	}
	if os.Getenv("THROTTLE_UPDATE_DOCS") == "1" {
		if err := os.WriteFile(path, []byte(doc[:i+len(begin)]+want+doc[j:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("the table of reference settings in %s is not referenceTable's; run THROTTLE_UPDATE_DOCS=1 go test ./cmd/throttle -run TestReferenceTableDocumented", path)
}
