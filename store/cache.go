package store

import (
	"context"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Cache keeps an in-memory copy of every client, rule, exemption and
// override so that the hot path (/check, Envoy's ShouldRateLimit) never
// reads the database.
//
// The copy is an immutable index behind an atomic pointer: lookups take no
// lock, and a reload builds a new index and swaps it in. Run polls the
// database's revision and, when another writer (this replica or any other)
// changed something, reads the rows of the clients that changed since
// (DB.ChangesSince) into a new index sharing every other client's; Refresh
// does the same at once after a local write. Only the first load, or a
// cache too far behind the database's log of changes, reads every row.
type Cache struct {
	db      *DB
	every   time.Duration
	log     *slog.Logger
	metrics cacheMetrics

	cur    atomic.Pointer[index]
	loadMu sync.Mutex // one reload at a time, so an older snapshot never replaces a newer one
}

type ruleKey struct{ clientID, name string }

// NewCache returns a cache over db that Run refreshes every `every`
// (a non-positive value means 2s). It is empty until Refresh or Run loads it.
func NewCache(db *DB, every time.Duration, log *slog.Logger) *Cache {
	if every <= 0 {
		every = 2 * time.Second
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Cache{db: db, every: every, log: log, metrics: newCacheMetrics()}
}

// Run loads the cache if it is empty, then polls the revision every `every`
// and catches up on change. Errors are logged and retried at the next poll
// (the last good copy keeps serving). It returns nil when ctx ends.
func (c *Cache) Run(ctx context.Context) error {
	if c.cur.Load() == nil {
		if err := c.Refresh(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("load rules cache", "err", err)
		}
	}
	t := time.NewTicker(c.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := c.poll(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("refresh rules cache", "err", err)
		}
	}
}

// poll catches up when the database's revision differs from the loaded one.
func (c *Cache) poll(ctx context.Context) error {
	rev, err := c.db.Revision(ctx)
	if err != nil {
		return err
	}
	if cur := c.cur.Load(); cur != nil && cur.revision == rev {
		return nil
	}
	return c.Refresh(ctx)
}

// Refresh brings the cache up to date now: the rows of the clients changed
// since its revision, or every row on the first load (or when the database
// no longer knows what changed since).
func (c *Cache) Refresh(ctx context.Context) error {
	c.loadMu.Lock()
	defer c.loadMu.Unlock()
	prev := c.cur.Load()
	since := int64(-1)
	if prev != nil {
		since = prev.revision
	}
	ch, err := c.db.ChangesSince(ctx, since)
	if err != nil {
		return fmt.Errorf("refresh cache: %w", err)
	}
	switch {
	case prev != nil && ch.Revision == prev.revision:
		return nil
	case prev == nil || ch.Full:
		c.cur.Store(newIndex(ch.Snapshot))
		c.metrics.loaded("full", ch.Snapshot)
		c.log.Debug("rules cache loaded", "revision", ch.Revision, "clients", len(ch.Clients), "rules", len(ch.Rules),
			"exemptions", len(ch.Exemptions), "overrides", len(ch.Overrides))
	default:
		c.cur.Store(prev.with(ch.Snapshot, ch.Changed))
		c.metrics.loaded("changes", ch.Snapshot)
		c.log.Debug("rules cache updated", "revision", ch.Revision, "clients_changed", len(ch.Changed))
	}
	return nil
}

// load returns the current index, or an empty one before the first load.
func (c *Cache) load() *index {
	if ix := c.cur.Load(); ix != nil {
		return ix
	}
	return emptyIndex
}

// tenant returns the loaded rows of clientID, or nil.
func (c *Cache) tenant(clientID string) *tenant { return c.load().tenants[clientID] }

// Revision returns the revision of the loaded snapshot, -1 before the first load.
func (c *Cache) Revision() int64 { return c.load().revision }

// ClientRevision returns the revision that last changed the rows of
// clientID, -1 when it has none loaded.
func (c *Cache) ClientRevision(clientID string) int64 {
	if t := c.tenant(clientID); t != nil {
		return t.revision
	}
	return -1
}

// ClientByKeyHash returns the client whose own API key (the one made at
// registration, which may do everything) hashes to h; a scoped key is not
// found here (see KeyByHash).
func (c *Cache) ClientByKeyHash(h [32]byte) (Client, bool) {
	cl, scope, ok := c.KeyByHash(h)
	if !ok || scope != "" {
		return Client{}, false
	}
	return cl, true
}

// KeyByHash returns the client of the API key that hashes to h and the
// key's scope: "" for the client's own key, else the scope it was minted
// with (ScopeCheck). The stored hash is confirmed with a constant-time
// comparison, so the answer's timing says nothing about how much of a hash
// matched.
func (c *Cache) KeyByHash(h [32]byte) (_ Client, scope string, ok bool) {
	ix := c.load()
	ref := ix.byKeyHash[h]
	t := ix.tenants[ref.clientID]
	if t == nil || subtle.ConstantTimeCompare(ref.hash[:], h[:]) != 1 {
		return Client{}, "", false
	}
	return t.client, ref.scope, true
}

// ClientByDomain returns the client that owns the Envoy domain (none owns
// "").
func (c *Cache) ClientByDomain(domain string) (Client, bool) {
	ix := c.load()
	id, ok := ix.byDomain[domain]
	if !ok {
		return Client{}, false
	}
	return ix.tenants[id].client, true
}

// ClientByID returns the client with id.
func (c *Cache) ClientByID(id string) (Client, bool) {
	if t := c.tenant(id); t != nil {
		return t.client, true
	}
	return Client{}, false
}

// Rule returns the client's rule called name.
func (c *Cache) Rule(clientID, name string) (Rule, bool) {
	if t := c.tenant(clientID); t != nil {
		r, ok := t.rules[name]
		return r, ok
	}
	return Rule{}, false
}

// DescriptorRules returns the client's rules that have Descriptors, in
// creation order. The slice is shared: callers must not modify it.
func (c *Cache) DescriptorRules(clientID string) []Rule {
	if t := c.tenant(clientID); t != nil {
		return t.descriptorRules
	}
	return nil
}

// Exempt reports whether the client exempted identifier from rate limiting.
func (c *Cache) Exempt(clientID, identifier string) bool {
	if t := c.tenant(clientID); t != nil {
		_, ok := t.exempt[identifier]
		return ok
	}
	return false
}
