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

// TestGCRAStored: a client defaulting to gcra, and its rules, are stored and
// read back on both dialects (no schema constraint on algorithm names).
func TestGCRAStored(t *testing.T) {
	eachDialect(t, func(t *testing.T, url string) {
		db := mustOpen(t, url)
		ctx := t.Context()
		c, err := db.CreateClient(ctx, Client{Name: "Cells", Email: "cells@example.com", DefaultAlgorithm: GCRA}, keyHash("gcra"))
		if err != nil {
			t.Fatalf("CreateClient: %v", err)
		}
		if got, err := db.ClientByID(ctx, c.ID); err != nil || got.DefaultAlgorithm != GCRA {
			t.Fatalf("ClientByID = %+v, %v; want default_algorithm gcra", got, err)
		}
		byDefault, err := db.CreateRule(ctx, Rule{ClientID: c.ID, Name: "by_default", Limit: 7, Window: time.Minute})
		if err != nil {
			t.Fatalf("CreateRule: %v", err)
		}
		if byDefault.Algorithm != GCRA {
			t.Errorf("rule without algorithm got %q, want the client's default gcra", byDefault.Algorithm)
		}
		if _, err := db.CreateRule(ctx, Rule{ClientID: c.ID, Name: "explicit", Algorithm: GCRA, Limit: 100, Window: time.Hour}); err != nil {
			t.Fatalf("CreateRule: %v", err)
		}
		rules, err := db.Rules(ctx, c.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(rules) != 2 || rules[0].Algorithm != GCRA || rules[1].Algorithm != GCRA || rules[1].Window != time.Hour {
			t.Errorf("Rules = %+v, want two gcra rules", rules)
		}
	})
}
