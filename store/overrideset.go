package store

import (
	"slices"
)

// overrideSet is one rule's overrides, indexed for Cache.Override: exact
// identifiers in a map, prefix patterns in a map by prefix, with the
// lengths of the prefixes, longest first, so a lookup tries only those.
type overrideSet struct {
	exact   map[string]Override
	prefix  map[string]Override
	lengths []int
}

func newOverrideSets(os []Override) map[ruleKey]*overrideSet {
	sets := map[ruleKey]*overrideSet{}
	for _, o := range os {
		k := ruleKey{o.ClientID, o.Rule}
		set := sets[k]
		if set == nil {
			set = &overrideSet{exact: map[string]Override{}, prefix: map[string]Override{}}
			sets[k] = set
		}
		if p, ok := o.Pattern(); ok {
			set.prefix[p] = o
			if !slices.Contains(set.lengths, len(p)) {
				set.lengths = append(set.lengths, len(p))
			}
			continue
		}
		set.exact[o.Identifier] = o
	}
	for _, set := range sets {
		slices.Sort(set.lengths)
		slices.Reverse(set.lengths)
	}
	return sets
}

// match returns the override of identifier: the exact one, else the
// pattern of the longest prefix of it.
func (s *overrideSet) match(identifier string) (Override, bool) {
	if o, ok := s.exact[identifier]; ok {
		return o, true
	}
	for _, n := range s.lengths {
		if n <= len(identifier) {
			if o, ok := s.prefix[identifier[:n]]; ok {
				return o, true
			}
		}
	}
	return Override{}, false
}

// Override returns the override of the client's rule that applies to
// identifier: an exact one beats a pattern, a longer prefix a shorter one.
func (c *Cache) Override(clientID, rule, identifier string) (Override, bool) {
	t := c.tenant(clientID)
	if t == nil || t.overrides[rule] == nil {
		return Override{}, false
	}
	return t.overrides[rule].match(identifier)
}
