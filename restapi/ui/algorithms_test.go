package ui

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/throttle-rl/throttle/algorithms"
)

// TestAlgorithmsMatchEngine: the rule editor offers exactly the engine's
// algorithms, in its order, and every one has its pill colour.
func TestAlgorithmsMatchEngine(t *testing.T) {
	page, err := static.ReadFile("static/index.html")
	if err != nil {
		t.Fatal(err)
	}
	css, err := static.ReadFile("static/app.css")
	if err != nil {
		t.Fatal(err)
	}
	sel := regexp.MustCompile(`(?s)<select name="algorithm" id="rule-algorithm">(.*?)</select>`).FindSubmatch(page)
	if sel == nil {
		t.Fatal(`index.html has no <select id="rule-algorithm">`)
	}
	var got []string
	for _, m := range regexp.MustCompile(`<option value="([a-z_]+)">`).FindAllSubmatch(sel[1], -1) {
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
