package descriptors

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Rule is a limit on the descriptors that match Entries, for NewDomain: a
// rule made through the REST API. A rule is the Go form of a YAML descriptor
// path ending in a rate_limit.
type Rule struct {
	// Entries is required: the descriptor path, outermost first.
	Entries []Entry
	// Limit is required: the rule's limit, or the first of its limits.
	Limit RateLimit
	// More are the rule's further limits on the same descriptor (a REST
	// rule's rate_limits after the first; optional): a request passes only
	// when every limit admits it, as a YAML descriptor's rate_limits.
	More []RateLimit
	// ShadowMode: decide and count, never deny.
	ShadowMode bool
}

// Config is a validated set of domains. It is immutable once built, so one
// value is safely shared by any number of goroutines.
type Config struct {
	domains map[string]*Domain
}

// Domain is the descriptor tree of one domain.
type Domain struct {
	name string
	root level
	// handles are the keys the domain's limits reserve under
	// (RateLimit.Reserve.Handle), for Match.
	handles []string
}

// Name returns the domain's name.
func (d *Domain) Name() string { return d.name }

// Domain returns the domain named name, or nil.
func (c *Config) Domain(name string) *Domain {
	if c == nil {
		return nil
	}
	return c.domains[name]
}

// Domains returns the names of the domains, sorted.
func (c *Config) Domains() []string {
	if c == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(c.domains))
}

// DomainCount returns the number of domains.
func (c *Config) DomainCount() int {
	if c == nil {
		return 0
	}
	return len(c.domains)
}

// NewDomain builds a validated domain from rules, with the same matching as
// a YAML domain: rules form one tree, and at each level wildcard values are
// tried in rule order. Two rules with the same entries are refused, as a
// duplicate descriptor in YAML is. Errors wrap ErrInvalid.
func NewDomain(name string, rules []Rule) (*Domain, error) {
	if name == "" {
		return nil, fmt.Errorf("empty domain: %w", ErrInvalid)
	}
	d := &Domain{name: name}
	var errs []error
	for i, r := range rules {
		if err := d.addRule(r); err != nil {
			errs = append(errs, domainPlace(name, 0).problem(fmt.Sprintf("rule %d", i), err.Error()))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return d, nil
}

func (d *Domain) addRule(r Rule) error {
	if len(r.Entries) == 0 {
		return errors.New("rule has no descriptor entries")
	}
	limits := append([]RateLimit{r.Limit}, r.More...)
	for i, l := range limits {
		if err := l.validate(); err != nil {
			if len(limits) > 1 {
				return fmt.Errorf("rate_limits[%d]: %w", i, err)
			}
			return err
		}
	}
	if i, err := checkLimits(limits); err != nil {
		return fmt.Errorf("rate_limits[%d]: %w", i, err)
	}
	d.noteHandles(limits)
	lvl := &d.root
	fullKey := d.name
	for i, e := range r.Entries {
		last := i == len(r.Entries)-1
		spec := nodeSpec{key: e.Key, value: e.Value}
		if last {
			spec.limits = limits
			spec.shadowMode = r.ShadowMode
		}
		if err := spec.checkShape(); err != nil {
			return err
		}
		n := lvl.find(e.Key, e.Value)
		fullKey += "." + spec.segment()
		switch {
		case n == nil:
			n = lvl.add(spec, fullKey)
		case last && n.limits != nil:
			return fmt.Errorf("duplicate descriptor composite key '%s'", fullKey)
		case last:
			n.limits = spec.limits
			n.shadowMode = spec.shadowMode
		}
		lvl = &n.children
	}
	return nil
}

// nodeSpec is one descriptor as read from YAML or a rule, before it joins
// the tree.
type nodeSpec struct {
	key, value string
	// limits are the descriptor's limits, in configuration order; nil when
	// it has none (a key and value without one whitelists the value).
	limits         []RateLimit
	shadowMode     bool
	detailedMetric bool
	shareThreshold bool
	valueToMetric  bool
	quotaMode      bool
	metadata       map[string]any
}

// checkShape checks the descriptor but not its limit, which
// RateLimit.validate (or Build) checks.
func (s nodeSpec) checkShape() error {
	if s.key == "" {
		return errors.New("descriptor has empty key")
	}
	if s.shareThreshold && !strings.Contains(s.value, "*") {
		return fmt.Errorf("share_threshold can only be used with wildcard values (containing '*'), but found key '%s'", s.segment())
	}
	return nil
}

// segment is upstream's composite key of one descriptor: key, or key_value.
func (s nodeSpec) segment() string {
	if s.value == "" {
		return s.key
	}
	return s.key + "_" + s.value
}

type node struct {
	nodeSpec
	wildcard bool
	// fullKey is upstream's FullKey: domain.seg.seg…
	fullKey  string
	children level
}

// level is one level of a descriptor tree.
type level struct {
	exact     map[Entry]*node  // value != "" (wildcard values too, matched literally)
	defaults  map[string]*node // value == ""
	wildcards []*node          // value contains '*', in configuration order
}

// find returns the node configured with exactly this key and value.
func (l *level) find(key, value string) *node {
	if value == "" {
		return l.defaults[key]
	}
	return l.exact[Entry{key, value}]
}

func (l *level) add(s nodeSpec, fullKey string) *node {
	n := &node{nodeSpec: s, fullKey: fullKey}
	if s.value == "" {
		if l.defaults == nil {
			l.defaults = map[string]*node{}
		}
		l.defaults[s.key] = n
		return n
	}
	if l.exact == nil {
		l.exact = map[Entry]*node{}
	}
	l.exact[Entry{s.key, s.value}] = n
	if strings.Contains(s.value, "*") {
		n.wildcard = true
		l.wildcards = append(l.wildcards, n)
	}
	return n
}
