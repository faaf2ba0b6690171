package store

import (
	"errors"
	"testing"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
)

// TestLimitJudgedByEngine: a rule's limit is refused by its owner,
// algorithms.Limit.Validate, with the engine's message, as an error of both
// kinds (store.ErrInvalid for the store's callers, algorithms.ErrInvalid as
// its cause); a client's default algorithm must be one of the engine's.
func TestLimitJudgedByEngine(t *testing.T) {
	limits := []algorithms.Limit{
		{Algorithm: "leaky_bucket", Limit: 1, Window: time.Second},
		{Algorithm: algorithms.FixedWindow, Limit: algorithms.MaxLimit + 1, Window: time.Second},
		{Algorithm: algorithms.SlidingWindow, Limit: 1, Window: algorithms.MaxWindow + time.Second},
		{Algorithm: algorithms.GCRA, Limit: 1},
		{Algorithm: algorithms.TokenBucket, Limit: 1, RefillRate: -1},
	}
	for _, l := range limits {
		want := l.Validate()
		if want == nil {
			t.Fatalf("%+v: the engine accepts it; the case is wrong", l)
		}
		_, got := normalizeRule(Rule{Name: "r", Limit: l})
		if got == nil || got.Error() != want.Error() {
			t.Errorf("normalizeRule(%+v) = %v, want the engine's %q", l, got, want)
		}
		if !errors.Is(got, ErrInvalid) || !errors.Is(got, algorithms.ErrInvalid) {
			t.Errorf("normalizeRule(%+v) = %v: errors.Is ErrInvalid %v, algorithms.ErrInvalid %v; want both", l, got,
				errors.Is(got, ErrInvalid), errors.Is(got, algorithms.ErrInvalid))
		}
	}
	_, err := normalizeClient(Client{Name: "a", Email: "a@b.c", DefaultAlgorithm: "leaky_bucket"})
	if want := "default_algorithm must be " + algorithms.Names(); err == nil || err.Error() != want || !errors.Is(err, ErrInvalid) {
		t.Errorf("normalizeClient(leaky_bucket) = %v, want %q (ErrInvalid)", err, want)
	}
	for _, a := range algorithms.Algorithms {
		if _, err := normalizeClient(Client{Name: "a", Email: "a@b.c", DefaultAlgorithm: a}); err != nil {
			t.Errorf("normalizeClient(default %s) = %v", a, err)
		}
	}
}

// TestGCRAStored: a client defaulting to gcra, and its rules, are stored and
// read back on both dialects (no schema constraint on algorithm names).
func TestGCRAStored(t *testing.T) {
	eachDialect(t, func(t *testing.T, url string) {
		db := mustOpen(t, url)
		ctx := t.Context()
		c, err := db.CreateClient(ctx, Client{Name: "Cells", Email: "cells@example.com", DefaultAlgorithm: algorithms.GCRA}, keyHash("gcra"))
		if err != nil {
			t.Fatalf("CreateClient: %v", err)
		}
		if got, err := db.ClientByID(ctx, c.ID); err != nil || got.DefaultAlgorithm != algorithms.GCRA {
			t.Fatalf("ClientByID = %+v, %v; want default_algorithm gcra", got, err)
		}
		byDefault, err := db.CreateRule(ctx, Rule{ClientID: c.ID, Name: "by_default", Limit: algorithms.Limit{Limit: 7, Window: time.Minute}})
		if err != nil {
			t.Fatalf("CreateRule: %v", err)
		}
		if byDefault.Limit.Algorithm != algorithms.GCRA {
			t.Errorf("rule without algorithm got %q, want the client's default gcra", byDefault.Limit.Algorithm)
		}
		if _, err := db.CreateRule(ctx, Rule{ClientID: c.ID, Name: "explicit", Limit: algorithms.Limit{Algorithm: algorithms.GCRA, Limit: 100, Window: time.Hour}}); err != nil {
			t.Fatalf("CreateRule: %v", err)
		}
		rules, err := db.Rules(ctx, c.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(rules) != 2 || rules[0].Limit.Algorithm != algorithms.GCRA || rules[1].Limit.Algorithm != algorithms.GCRA || rules[1].Limit.Window != time.Hour {
			t.Errorf("Rules = %+v, want two gcra rules", rules)
		}
	})
}
