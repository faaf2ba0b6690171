package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/throttle-rl/throttle/store"
)

// The database: opened and migrated at start, and checked for rules this
// server cannot serve.

// openStore opens the database, the cache of clients and rules that spares
// /check the database, and the usage recorder, which is flushed after the
// servers drained and the tasks started after it stopped.
func (a *app) openStore(ctx context.Context) error {
	openCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	db, err := store.Open(openCtx, a.cfg.DatabaseURL, a.log)
	cancel()
	if err != nil {
		return fmt.Errorf("open database %s: %w", redactURL(a.cfg.DatabaseURL), scrub(err, urlSecrets(a.cfg.DatabaseURL)))
	}
	a.db = db
	a.onClose(func() { db.Close() })
	if !a.cfg.GlobalScope() {
		if err := refuseGlobalRules(ctx, db); err != nil {
			return err
		}
	}
	if err := db.RegisterMetrics(a.reg); err != nil {
		return err
	}
	db.SetQuotas(a.cfg.Tenancy.Quotas)
	a.usage = store.NewUsageRecorder(db, time.Second, a.log)
	a.goBG("usage recorder", a.usage.Run)
	a.cache = store.NewCache(db, a.cfg.CacheRefresh, a.log)
	if err := a.cache.RegisterMetrics(a.reg); err != nil {
		return err
	}
	if err := a.cache.Refresh(ctx); err != nil {
		return fmt.Errorf("load clients and rules: %w", err)
	}
	a.goBG("cache", a.cache.Run)
	return nil
}

// refuseGlobalRules fails when the database holds rules with a limit of
// scope global, which a server without GLOBAL_REDIS_URL cannot keep: it
// names them (at most 10), by client, domain and rule.
func refuseGlobalRules(ctx context.Context, db *store.DB) error {
	rules, err := db.GlobalRules(ctx)
	if err != nil || len(rules) == 0 {
		return err
	}
	names := make([]string, 0, min(len(rules), 10)+1)
	for _, r := range rules[:min(len(rules), 10)] {
		n := fmt.Sprintf("client %q (%s) rule %q", r.Client, r.ClientID, r.Rule)
		if r.Domain != "" {
			n = fmt.Sprintf("client %q (domain %s) rule %q", r.Client, r.Domain, r.Rule)
		}
		names = append(names, n)
	}
	if len(rules) > len(names) {
		names = append(names, fmt.Sprintf("and %d more", len(rules)-len(names)))
	}
	return fmt.Errorf("the database holds %d rule(s) of scope global, which need GLOBAL_REDIS_URL, the Redis every region shares (this server has none): %s; set GLOBAL_REDIS_URL, or make those rules regional (PUT /rules/{name} without \"scope\": \"global\")",
		len(rules), strings.Join(names, ", "))
}
