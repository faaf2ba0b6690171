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
// override so that
// the hot path (/check, Envoy's ShouldRateLimit) never reads the database.
//
// The copy is an immutable index behind an atomic pointer: lookups take no
// lock, and a reload builds a new index and swaps it in. Run polls the
// database's revision and reloads when another writer (this replica or any
// other) changed something; Refresh reloads at once after a local write.
type Cache struct {
	db    *DB
	every time.Duration
	log   *slog.Logger

	cur    atomic.Pointer[index]
	loadMu sync.Mutex // one reload at a time, so an older snapshot never replaces a newer one
}

type ruleKey struct{ clientID, name string }

// index is one loaded Snapshot, indexed for lookups. Never modified.
type index struct {
	revision        int64
	byKeyHash       map[[32]byte]ClientKey
	byDomain        map[string]Client
	byID            map[string]Client
	rules           map[ruleKey]Rule
	descriptorRules map[string][]Rule
	exempt          map[ruleKey]struct{}
	overrides       map[ruleKey]*overrideSet // by client and rule
}

// NewCache returns a cache over db that Run refreshes every `every`
// (a non-positive value means 2s). It is empty until Refresh or Run loads it.
func NewCache(db *DB, every time.Duration, log *slog.Logger) *Cache {
	if every <= 0 {
		every = 2 * time.Second
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Cache{db: db, every: every, log: log}
}

// Run loads the cache if it is empty, then polls the revision every `every`
// and reloads on change. Errors are logged and retried at the next poll (the
// last good copy keeps serving). It returns nil when ctx ends.
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

// poll reloads when the database's revision differs from the loaded one.
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

// Refresh reloads the cache from the database now.
func (c *Cache) Refresh(ctx context.Context) error {
	c.loadMu.Lock()
	defer c.loadMu.Unlock()
	s, err := c.db.Snapshot(ctx)
	if err != nil {
		return fmt.Errorf("refresh cache: %w", err)
	}
	prev := c.cur.Load()
	c.cur.Store(newIndex(s))
	if prev == nil || prev.revision != s.Revision {
		c.log.Debug("rules cache loaded", "revision", s.Revision,
			"clients", len(s.Clients), "rules", len(s.Rules), "exemptions", len(s.Exemptions), "overrides", len(s.Overrides))
	}
	return nil
}

func newIndex(s Snapshot) *index {
	ix := &index{
		revision:        s.Revision,
		byKeyHash:       make(map[[32]byte]ClientKey, len(s.Clients)),
		byDomain:        make(map[string]Client, len(s.Clients)),
		byID:            make(map[string]Client, len(s.Clients)),
		rules:           make(map[ruleKey]Rule, len(s.Rules)),
		descriptorRules: map[string][]Rule{},
		exempt:          make(map[ruleKey]struct{}, len(s.Exemptions)),
	}
	for _, ck := range s.Clients {
		ix.byKeyHash[ck.KeyHash] = ck
		if ck.Client.Domain != "" {
			ix.byDomain[ck.Client.Domain] = ck.Client
		}
		ix.byID[ck.Client.ID] = ck.Client
	}
	for _, r := range s.Rules { // in creation order within a client
		ix.rules[ruleKey{r.ClientID, r.Name}] = r
		if len(r.Descriptors) > 0 {
			ix.descriptorRules[r.ClientID] = append(ix.descriptorRules[r.ClientID], r)
		}
	}
	for _, e := range s.Exemptions {
		ix.exempt[ruleKey{e.ClientID, e.Identifier}] = struct{}{}
	}
	ix.overrides = newOverrideSets(s.Overrides)
	return ix
}

// load returns the current index, or an empty one before the first load.
func (c *Cache) load() *index {
	if ix := c.cur.Load(); ix != nil {
		return ix
	}
	return &index{revision: -1}
}

// Revision returns the revision of the loaded snapshot, -1 before the first load.
func (c *Cache) Revision() int64 { return c.load().revision }

// ClientByKeyHash returns the client whose API key hashes to h. The stored
// hash is confirmed with a constant-time comparison, so the answer's timing
// says nothing about how much of a hash matched.
func (c *Cache) ClientByKeyHash(h [32]byte) (Client, bool) {
	ck, ok := c.load().byKeyHash[h]
	if !ok || subtle.ConstantTimeCompare(ck.KeyHash[:], h[:]) != 1 {
		return Client{}, false
	}
	return ck.Client, true
}

// ClientByDomain returns the client that owns the Envoy domain (none owns
// "").
func (c *Cache) ClientByDomain(domain string) (Client, bool) {
	cl, ok := c.load().byDomain[domain]
	return cl, ok
}

// ClientByID returns the client with id.
func (c *Cache) ClientByID(id string) (Client, bool) {
	cl, ok := c.load().byID[id]
	return cl, ok
}

// Rule returns the client's rule called name.
func (c *Cache) Rule(clientID, name string) (Rule, bool) {
	r, ok := c.load().rules[ruleKey{clientID, name}]
	return r, ok
}

// DescriptorRules returns the client's rules that have Descriptors, in
// creation order. The slice is shared: callers must not modify it.
func (c *Cache) DescriptorRules(clientID string) []Rule {
	return c.load().descriptorRules[clientID]
}

// Exempt reports whether the client exempted identifier from rate limiting.
func (c *Cache) Exempt(clientID, identifier string) bool {
	_, ok := c.load().exempt[ruleKey{clientID, identifier}]
	return ok
}
