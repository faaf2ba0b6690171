package store

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/internal/testkit/logbuf"
)

// TestReleaseReserved: the domains reserved names are taken from their
// clients at once, and again whenever the reserved domains or the clients
// change; two replicas over one database release each domain once between
// them (the second finds it gone), and a client keeps its rules.
func TestReleaseReserved(t *testing.T) {
	eachDialect(t, func(t *testing.T, url string) {
		ctx := t.Context()
		db := mustOpen(t, url)
		client := func(name, domain string) Client {
			t.Helper()
			c, err := db.CreateClient(ctx, Client{Name: name, Email: name + "@example.com", Domain: domain}, keyHash(name))
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		domainOf := func(id string) string {
			t.Helper()
			c, err := db.ClientByID(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			return c.Domain
		}
		edge, shop := client("edge", "edge"), client("shop", "shop")
		if _, err := db.CreateRule(ctx, Rule{ClientID: edge.ID, Name: "r", Limit: algorithms.Limit{Limit: 1, Window: time.Minute}}); err != nil {
			t.Fatal(err)
		}

		var reserved atomic.Pointer[[]string]
		reserve := func(domains ...string) { reserved.Store(&domains) }
		reserve("edge")
		var logs logbuf.Buffer
		log := slog.New(slog.NewTextHandler(&logs, nil))
		runCtx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		t.Cleanup(func() { cancel(); wg.Wait() })
		for range 2 { // two replicas, each with its cache
			c := NewCache(db, 20*time.Millisecond, log)
			if err := c.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			wg.Go(func() { c.Run(runCtx) })
			wg.Go(func() { c.ReleaseReserved(runCtx, func() []string { return *reserved.Load() }, 20*time.Millisecond) })
		}

		eventually(t, "edge released", func() bool { return domainOf(edge.ID) == "" })
		if got := domainOf(shop.ID); got != "shop" {
			t.Errorf("shop's domain = %q, want shop: it is not reserved", got)
		}
		if rules, err := db.Rules(ctx, edge.ID); err != nil || len(rules) != 1 {
			t.Errorf("edge's rules after the release: %v, %v; want its one rule", rules, err)
		}

		reserve("edge", "shop") // the reserved domains change
		eventually(t, "shop released", func() bool { return domainOf(shop.ID) == "" })

		again := client("edge2", "edge") // the clients change
		eventually(t, "edge released again", func() bool { return domainOf(again.ID) == "" })

		cancel()
		wg.Wait()
		for domain, want := range map[string]int{"edge": 2, "shop": 1} {
			if got := strings.Count(logs.String(), "domain="+domain+" client_id="); got != want {
				t.Errorf("releases of %s logged %d times, want %d:\n%s", domain, got, want, logs.String())
			}
		}
	})
}
