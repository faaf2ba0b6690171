package main

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/throttle-rl/throttle/internal/testkit"
	"github.com/throttle-rl/throttle/internal/testkit/redistest"
	"github.com/throttle-rl/throttle/internal/testkit/throttletest"
)

// repoRoot is the repository's root, seen from this package's folder.
const repoRoot = "../.."

// curlDoc is a document whose sh examples run in order, in one shell,
// against a fresh server, and what their output must show.
type curlDoc struct {
	file      string // from the repository's root
	section   string // "## Heading" whose examples run; "" = the whole file
	minBlocks int
	want      []string
	// runs is how many times the examples run in a row on one server and
	// database, each time in a new shell; 0 means once.
	runs int
	// env is set for the server and in the examples' shell (the settings
	// the document says its server runs with).
	env []string
}

var curlDocs = []curlDoc{
	{
		file: "README.md", section: "## REST API", minBlocks: 2,
		runs: 2, // a newcomer runs the example again: ./throttle.db keeps the first run's client
		want: []string{`"api_key":"thr_`, `"allowed":true`, `"allowed":false`},
	},
	{
		file: "docs/rest-tour.md", minBlocks: 3,
		runs: 2, // as the README's
		want: []string{`"api_key":"thr_`, `"allowed":true`, `"allowed":false`, `"name":"api_default"`, `"rule":"api_default"`},
	},
	{
		file: "docs/api.md", minBlocks: 14, // one per endpoint at least
		env: []string{"ADMIN_API_KEY=docs-operator-key-change-me", "JSON_ON_REST_PORT=true"},
		want: []string{
			`{"service":"throttle","dashboard":"/ui/",`,
			`{"status":"ok"}`,
			`"api_key":"thr_`,
			`"allowed":true`,
			`"allowed":false`,
			`"code":"METHOD_NOT_ALLOWED"`,
			`"code":"UNKNOWN_FIELD"`,
			`"code":"KEY_SCOPE"`,
			`{"message":"Key revoked","id":"`,
			`"keys_deleted":`,
			`"rate_limits":[{"name":"burst"`,
			`"code":"GLOBAL_SCOPE_UNAVAILABLE"`,
			`"matched":true,"key":"path_/search","limits":[{"name":"burst","requests_per_unit":10,"unit":"SECOND","unit_multiplier":1,"window":1,"algorithm":"fixed_window","remaining":10,`,
			`"total_checks":`,
			"throttle_decisions_total{",
			`"overallCode"`,
		},
	},
}

// TestDocsCurlExamples runs the REST API curl examples of the README, of
// the tour (docs/rest-tour.md) and of the reference, docs/api.md — each
// document's in order, in one shell, against the built binary — with the
// embedded default, and with Redis and PostgreSQL: the documentation must
// work as written. The README's and the tour's run twice in a row on one
// database, and must work the second time too.
func TestDocsCurlExamples(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is not installed: run the tests via scripts/with-test-services.sh (make test), which installs it")
	}
	setups := []struct {
		name string
		env  func(t *testing.T) []string
	}{
		{"embedded", func(*testing.T) []string { return nil }},
		{"redis+postgres", func(t *testing.T) []string {
			// Keys of its own in the shared Redis, as a new deployment's:
			// a run after others (go test -count=2) finds no register
			// limit spent and no counter of an earlier run.
			return []string{"REDIS_URL=" + redistest.SharedURL(t), "CACHE_KEY_PREFIX=docs_" + testkit.RandomHex(t, 4) + "_", "DATABASE_URL=" + freshPostgres(t), "BACKEND_TIMEOUT=2s"}
		}},
	}
	for _, doc := range curlDocs {
		blocks := shBlocks(t, doc)
		for _, setup := range setups {
			t.Run(doc.file+"/"+setup.name, func(t *testing.T) { runCurlExamples(t, doc, blocks, setup.env(t)) })
		}
	}
}

// shBlocks returns the bodies of the ```sh blocks of doc's section.
func shBlocks(t *testing.T, doc curlDoc) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, doc.file))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	if doc.section != "" {
		start := strings.Index(text, "\n"+doc.section+"\n")
		if start < 0 {
			t.Fatalf("%s has no %q section", doc.file, doc.section)
		}
		text = text[start+1:]
		if end := strings.Index(text[len(doc.section):], "\n## "); end >= 0 {
			text = text[:len(doc.section)+end]
		}
	}
	var blocks []string
	for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(text, -1) {
		blocks = append(blocks, m[1])
	}
	if len(blocks) < doc.minBlocks {
		t.Fatalf("found %d sh examples in %s %s, want at least %d", len(blocks), doc.file, doc.section, doc.minBlocks)
	}
	return blocks
}

func runCurlExamples(t *testing.T, doc curlDoc, blocks []string, env []string) {
	s := throttletest.Start(t, append(env, doc.env...)...)
	var script strings.Builder
	script.WriteString("set -e\n")
	for _, b := range blocks {
		script.WriteString(strings.ReplaceAll(b, "http://localhost:8080", s.URL))
		script.WriteString("\necho\n")
	}
	for run := 1; run <= max(doc.runs, 1); run++ {
		cmd := exec.Command("bash", "-c", script.String())
		cmd.Env = append(os.Environ(), doc.env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s examples failed (run %d): %v\n%s", doc.file, run, err, out)
		}
		got := string(out)
		for _, want := range doc.want {
			if !strings.Contains(got, want) {
				t.Errorf("%s examples' output lacks %q (run %d)", doc.file, want, run)
			}
		}
		for _, bad := range []string{`"code":"INVALID_API_KEY"`, `"code":"MISSING_API_KEY"`, `"code":"CONFLICT"`, "no API key"} {
			if strings.Contains(got, bad) {
				t.Errorf("an example of %s ran into %s (run %d)", doc.file, bad, run)
			}
		}
		if t.Failed() {
			t.Fatalf("output of run %d:\n%s", run, got)
		}
	}
}

// TestSettingsDocumented: docs/settings.md has a row for every setting of
// throttle serve, with its flag and default as --help gives them, and no
// row for a setting serve does not have.
func TestSettingsDocumented(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "docs/settings.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string][]string{} // variable → its row's cells
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		rows[cells[0]] = cells
	}
	known := map[string]bool{}
	for _, s := range serveSettings {
		if s.flag == "" {
			continue // accepted without effect: docs/moving-from-envoy-ratelimit.md says why
		}
		env := "`" + s.env + "`"
		known[env] = true
		cells, ok := rows[env]
		if !ok {
			t.Errorf("docs/settings.md has no row for %s", s.env)
			continue
		}
		wantDef := "`" + s.def + "`"
		if s.def == "" {
			wantDef = "empty"
		}
		if got := cells[1]; got != "`--"+s.flag+"`" {
			t.Errorf("docs/settings.md: %s's flag is %s, want `--%s`", s.env, got, s.flag)
		}
		if got := cells[len(cells)-1]; !strings.HasPrefix(got, wantDef) {
			t.Errorf("docs/settings.md: %s's default is %s, want %s", s.env, got, wantDef)
		}
	}
	for env, cells := range rows {
		if !known[env] && cells[1] != "—" {
			t.Errorf("docs/settings.md has a row for %s, which throttle serve does not have", env)
		}
	}
}

// TestDocsLinksResolve: every relative link of every Markdown file in the
// repository (README.md, docs/*.md, envoy/README.md, …) names a file or
// folder that exists, and a #fragment names a heading of the file it points
// to (as GitHub makes anchors of headings).
func TestDocsLinksResolve(t *testing.T) {
	var docs []string
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && path != repoRoot && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(name, ".md") {
			docs = append(docs, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"README.md", "docs/api.md", "envoy/README.md"} {
		if !containsPath(docs, filepath.Join(repoRoot, want)) {
			t.Fatalf("the walk found no %s (found %v)", want, docs)
		}
	}
	anchors := map[string]map[string]bool{} // file → its headings' anchors
	anchorsOf := func(file string) map[string]bool {
		if a, ok := anchors[file]; ok {
			return a
		}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		anchors[file] = headingAnchors(string(b))
		return anchors[file]
	}
	checked := 0
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(repoRoot, doc)
		for _, link := range relativeLinks(string(b)) {
			checked++
			target, fragment, _ := strings.Cut(link, "#")
			file := doc
			if target != "" {
				file = filepath.Join(filepath.Dir(doc), filepath.FromSlash(target))
				if _, err := os.Stat(file); err != nil {
					t.Errorf("%s: link %q: %v", rel, link, err)
					continue
				}
			}
			if fragment != "" && strings.HasSuffix(file, ".md") && !anchorsOf(file)[fragment] {
				t.Errorf("%s: link %q: no heading of %s has the anchor #%s", rel, link, filepath.Base(file), fragment)
			}
		}
	}
	if checked < 40 {
		t.Errorf("checked %d relative links in %d files; the docs have many more: is the link pattern broken?", checked, len(docs))
	}
}

func containsPath(paths []string, p string) bool {
	for _, q := range paths {
		if filepath.Clean(q) == filepath.Clean(p) {
			return true
		}
	}
	return false
}

var (
	fenceRE      = regexp.MustCompile("(?ms)^```.*?^```")
	codeSpanRE   = regexp.MustCompile("`[^`\n]*`")
	linkTargetRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	headingRE    = regexp.MustCompile(`(?m)^#{1,6} +(.+?) *$`)
)

// relativeLinks returns the targets of the Markdown links and images of
// text outside code that are neither URLs nor mail addresses.
func relativeLinks(text string) []string {
	text = codeSpanRE.ReplaceAllString(fenceRE.ReplaceAllString(text, ""), "")
	var links []string
	for _, m := range linkTargetRE.FindAllStringSubmatch(text, -1) {
		l := m[1]
		if strings.Contains(l, "://") || strings.HasPrefix(l, "mailto:") {
			continue
		}
		links = append(links, l)
	}
	return links
}

// headingAnchors returns the anchors GitHub gives the headings of text:
// lower case, spaces as '-', other punctuation but '-' and '_' dropped, and
// "-1", "-2", … after a repeated one.
func headingAnchors(text string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, m := range headingRE.FindAllStringSubmatch(fenceRE.ReplaceAllString(text, ""), -1) {
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			anchors[a+"-"+strconv.Itoa(n)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors
}

// TestArchitectureListsEveryPackage: the package table of
// docs/architecture.md has a row for every package of the module (go list
// ./...), and none for a package that is gone.
func TestArchitectureListsEveryPackage(t *testing.T) {
	const doc = "docs/architecture.md"
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}}", "./...")
	cmd.Dir = repoRoot
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./...: %v", err)
	}
	var pkgs []string
	for _, p := range strings.Fields(string(out)) {
		rel, ok := strings.CutPrefix(p, "github.com/throttle-rl/throttle/")
		if !ok {
			t.Fatalf("go list: %s is outside the module", p)
		}
		pkgs = append(pkgs, rel+"/")
	}
	b, err := os.ReadFile(filepath.Join(repoRoot, doc))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "\n## Packages\n")
	if !ok {
		t.Fatalf("%s has no section ## Packages", doc)
	}
	table, _, _ = strings.Cut(table, "\n## ")
	rows := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([^`]+)` \\|").FindAllStringSubmatch(table, -1) {
		if rows[m[1]] {
			t.Errorf("%s lists %s twice", doc, m[1])
		}
		rows[m[1]] = true
	}
	for _, p := range pkgs {
		if !rows[p] {
			t.Errorf("%s has no row for package %s", doc, p)
		}
		delete(rows, p)
	}
	for p := range rows {
		t.Errorf("%s has a row for %s, which is no package of the module", doc, p)
	}
	if len(pkgs) < 40 {
		t.Errorf("go list ./... listed %d packages; the module has more: is the output parsed right?", len(pkgs))
	}
}
