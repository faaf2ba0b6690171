package store

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
)

// TestAlgorithmsMatchEngine keeps the store's algorithm names equal to the
// engine's, which own the list: the same names in the same order, and the
// messages that list them spelled by algorithms.Names. (Only this test
// imports the engine; the store itself does not.)
func TestAlgorithmsMatchEngine(t *testing.T) {
	var engine []string
	for _, a := range algorithms.Algorithms {
		engine = append(engine, string(a))
	}
	if got := algorithmNames(); !slices.Equal(got, engine) {
		t.Fatalf("store algorithms %v, engine algorithms %v: add or remove the difference in validate.go", got, engine)
	}
	for _, name := range engine {
		if !ValidAlgorithm(name) {
			t.Errorf("ValidAlgorithm(%q) = false", name)
		}
	}
	if ValidAlgorithm("leaky_bucket") {
		t.Error(`ValidAlgorithm("leaky_bucket") = true`)
	}
	if got, want := algorithmList(), algorithms.Names(); got != want {
		t.Errorf("algorithmList() = %q, want algorithms.Names() = %q", got, want)
	}
	_, errClient := normalizeClient(Client{Name: "a", Email: "a@b.c", DefaultAlgorithm: "leaky_bucket"})
	_, errRule := normalizeRule(Rule{Name: "r", Algorithm: "leaky_bucket", Limit: 1, Window: time.Second})
	for _, err := range []error{errClient, errRule} {
		if err == nil || !strings.Contains(err.Error(), algorithms.Names()) {
			t.Errorf("error %v does not list %q", err, algorithms.Names())
		}
	}
}
