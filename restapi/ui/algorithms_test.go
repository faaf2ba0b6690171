package ui

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/throttle-rl/throttle/algorithms"
)

// TestAlgorithmsMatchEngine: the rule form's one list of algorithms
// (app.js's ALGORITHMS) is the engine's, in its order, and every one has
// its pill colour.
func TestAlgorithmsMatchEngine(t *testing.T) {
	script, err := static.ReadFile("static/app.js")
	if err != nil {
		t.Fatal(err)
	}
	css, err := static.ReadFile("static/app.css")
	if err != nil {
		t.Fatal(err)
	}
	list := regexp.MustCompile(`const ALGORITHMS = \[(.*?)\];`).FindSubmatch(script)
	if list == nil {
		t.Fatal(`app.js has no const ALGORITHMS = [...];`)
	}
	if n := strings.Count(string(script), "'fixed_window'"); n != 1 {
		t.Errorf("app.js names 'fixed_window' %d times, want once (in ALGORITHMS)", n)
	}
	var got []string
	for _, m := range regexp.MustCompile(`'([a-z_]+)'`).FindAllSubmatch(list[1], -1) {
		got = append(got, string(m[1]))
	}
	var want []string
	for _, a := range algorithms.Algorithms {
		want = append(want, string(a))
		if !strings.Contains(string(css), ".pill."+string(a)+" {") {
			t.Errorf("app.css has no .pill.%s", a)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("rule editor offers %v, the engine has %v", got, want)
	}
}

// TestScopesMatchEngine: the rule form's scopes (app.js's SCOPES) are the
// engine's, the default (regional) first, and the rules table styles the
// global one.
func TestScopesMatchEngine(t *testing.T) {
	script, err := static.ReadFile("static/app.js")
	if err != nil {
		t.Fatal(err)
	}
	css, err := static.ReadFile("static/app.css")
	if err != nil {
		t.Fatal(err)
	}
	list := regexp.MustCompile(`const SCOPES = \[(.*?)\];`).FindSubmatch(script)
	if list == nil {
		t.Fatal(`app.js has no const SCOPES = [...];`)
	}
	var got []string
	for _, m := range regexp.MustCompile(`'([a-z_]+)'`).FindAllSubmatch(list[1], -1) {
		got = append(got, string(m[1]))
	}
	if want := []string{algorithms.ScopeRegional, algorithms.ScopeGlobal}; !slices.Equal(got, want) {
		t.Errorf("rule editor offers scopes %v, the engine has %v", got, want)
	}
	if !strings.Contains(string(css), ".scope."+algorithms.ScopeGlobal+" {") {
		t.Errorf("app.css has no .scope.%s", algorithms.ScopeGlobal)
	}
}
