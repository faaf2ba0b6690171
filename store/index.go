package store

// index is one loaded state of the database, indexed for the hot path's
// lookups. It is never modified once built: a change builds a new index that
// shares every tenant the change did not touch (with), so a write costs its
// own client's rows, not every client's.
type index struct {
	revision  int64
	tenants   map[string]*tenant  // by client id
	byKeyHash map[[32]byte]keyRef // API key hash → client and scope
	byDomain  map[string]string   // Envoy domain → client id
}

// tenant is one client's rows, indexed. Never modified once built.
type tenant struct {
	client  Client
	keyHash [32]byte
	// revision is the revision that last changed the tenant's rows (the
	// whole index's, for a tenant of a full load).
	revision        int64
	keys            []Key // minted with a scope (CreateKey)
	rules           map[string]Rule
	descriptorRules []Rule // in creation order
	exempt          map[string]struct{}
	overrides       map[string]*overrideSet // by rule name
}

// keyRef is what an API key's hash leads to: its client, and its scope
// ("" for the client's own key, which may do everything).
type keyRef struct {
	clientID string
	scope    string
	hash     [32]byte
}

// emptyIndex is the index before the first load.
var emptyIndex = &index{revision: -1}

// newIndex indexes a whole snapshot.
func newIndex(s Snapshot) *index {
	ix := &index{
		revision:  s.Revision,
		tenants:   make(map[string]*tenant, len(s.Clients)),
		byKeyHash: make(map[[32]byte]keyRef, len(s.Clients)),
		byDomain:  make(map[string]string, len(s.Clients)),
	}
	for _, t := range newTenants(s) {
		ix.add(t)
	}
	return ix
}

// with returns a copy of ix at revision s.Revision whose tenants changed
// are those of s (a changed client missing from s is gone); the others are
// shared.
func (ix *index) with(s Snapshot, changed []string) *index {
	next := &index{
		revision:  s.Revision,
		tenants:   make(map[string]*tenant, len(ix.tenants)+len(changed)),
		byKeyHash: make(map[[32]byte]keyRef, len(ix.byKeyHash)+len(changed)),
		byDomain:  make(map[string]string, len(ix.byDomain)+len(changed)),
	}
	gone := make(map[string]bool, len(changed))
	for _, id := range changed {
		gone[id] = true
	}
	for id, t := range ix.tenants {
		if !gone[id] {
			next.add(t)
		}
	}
	for _, t := range newTenants(s) {
		next.add(t)
	}
	return next
}

// add puts t into ix's maps (ix is being built).
func (ix *index) add(t *tenant) {
	ix.tenants[t.client.ID] = t
	ix.byKeyHash[t.keyHash] = keyRef{clientID: t.client.ID, hash: t.keyHash}
	for _, k := range t.keys {
		ix.byKeyHash[k.keyHash] = keyRef{clientID: t.client.ID, scope: k.Scope, hash: k.keyHash}
	}
	if t.client.Domain != "" {
		ix.byDomain[t.client.Domain] = t.client.ID
	}
}

// newTenants indexes the rows of s by client, each at revision s.Revision.
func newTenants(s Snapshot) []*tenant {
	out := make([]*tenant, 0, len(s.Clients))
	byID := make(map[string]*tenant, len(s.Clients))
	for _, ck := range s.Clients {
		t := &tenant{client: ck.Client, keyHash: ck.KeyHash, revision: s.Revision,
			rules: map[string]Rule{}, exempt: map[string]struct{}{}}
		byID[ck.Client.ID] = t
		out = append(out, t)
	}
	for _, r := range s.Rules { // in creation order within a client
		if t := byID[r.ClientID]; t != nil {
			t.rules[r.Name] = r
			if len(r.Descriptors) > 0 {
				t.descriptorRules = append(t.descriptorRules, r)
			}
		}
	}
	for _, e := range s.Exemptions {
		if t := byID[e.ClientID]; t != nil {
			t.exempt[e.Identifier] = struct{}{}
		}
	}
	for _, k := range s.Keys {
		if t := byID[k.ClientID]; t != nil {
			t.keys = append(t.keys, k)
		}
	}
	for k, set := range newOverrideSets(s.Overrides) {
		if t := byID[k.clientID]; t != nil {
			if t.overrides == nil {
				t.overrides = map[string]*overrideSet{}
			}
			t.overrides[k.name] = set
		}
	}
	return out
}

// rows is how many rows s holds, for the cache's metrics.
func rows(s Snapshot) int {
	return len(s.Clients) + len(s.Rules) + len(s.Exemptions) + len(s.Overrides) + len(s.Keys)
}
