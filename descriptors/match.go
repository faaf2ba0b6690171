package descriptors

import (
	"slices"
	"strconv"
	"strings"

	"github.com/throttle-rl/throttle/algorithms"
)

// Entry is one (key, value) of a request descriptor, or of a rule's match.
// In a rule an empty Value matches any value of Key and '*' in Value is a
// wildcard; in a request both are plain strings.
type Entry struct {
	Key   string
	Value string
}

// Match returns the limit for the request descriptor entries in domain, or
// nil when none applies (unknown domain, no entries, no match, whitelisted
// value).
func (c *Config) Match(domain string, entries []Entry) *Match {
	return c.Domain(domain).Match(entries)
}

type matchKind int

const (
	byValue matchKind = iota
	byWildcard
	byDefault
)

// lookup finds the node for a request entry: exact value, then the first
// matching wildcard, then the key's default.
func (l *level) lookup(e Entry) (*node, matchKind) {
	if e.Value != "" {
		if n := l.exact[e]; n != nil {
			return n, byValue
		}
	}
	for _, n := range l.wildcards {
		if n.key == e.Key && wildcardMatch(n.value, e.Value) {
			return n, byWildcard
		}
	}
	if n := l.defaults[e.Key]; n != nil {
		return n, byDefault
	}
	return nil, byDefault
}

// wildcardMatch reports whether s matches pattern, where '*' matches zero or
// more characters and every other byte matches itself.
func wildcardMatch(pattern, s string) bool {
	p, i := 0, 0
	star, mark := -1, 0
	for i < len(s) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, i
			p++
		case p < len(pattern) && pattern[p] == s[i]:
			p++
			i++
		case star >= 0:
			p = star + 1
			mark++
			i = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// Match is the limit that applies to one request descriptor.
type Match struct {
	// Domain is the request's domain.
	Domain string
	// Entries are the request's entries, without its handle entry when
	// Handle is set.
	Entries []Entry
	// Limits are the limits that apply, in configuration order: the
	// descriptor's rate_limit, or each of its rate_limits (a request passes
	// only when every one admits it). Never empty. Shared: do not modify.
	Limits []RateLimit
	// Limit is Limits[0]: the limit of a descriptor with a rate_limit.
	Limit RateLimit
	// ShadowMode: decide and count, never deny.
	ShadowMode bool
	// DetailedMetric is the descriptor's detailed_metric.
	DetailedMetric bool
	// QuotaMode is the descriptor's quota_mode, kept for the caller.
	QuotaMode bool
	// Metadata is the descriptor's metadata map (JSON-compatible values:
	// map[string]any, []any, string, float64/int, bool, nil), or nil. Shared:
	// do not modify.
	Metadata map[string]any
	// StatsKey is upstream's stats key for this match, the metric prefix
	// before .total_hits, .over_limit, …; with detailed_metric or
	// value_to_metric it carries the request's values.
	StatsKey string
	// ConfigKey is upstream's FullKey of the matched descriptor as
	// configured: domain and the configured key or key_value of each level
	// (the wildcard pattern for a wildcard). It is StatsKey without the
	// request values detailed_metric and value_to_metric add, so the number
	// of ConfigKeys is bounded by the configuration.
	ConfigKey string
	// SharePatterns has, when any matched descriptor has share_threshold, one
	// element per entry: the wildcard pattern that entry's value was counted
	// as, or "" (upstream's ShareThresholdKeyPattern). Nil otherwise.
	SharePatterns []string
	// Counter identifies the rate-limit state: every request whose Counter
	// (and Domain and Limit) is equal counts against the same state. It
	// encodes each entry's key and value (or share_threshold pattern) with
	// length prefixes, so unlike upstream's key_value joins, (a, b_c) and
	// (a_b, c) never share a counter.
	Counter string
	// Handle is the value of the request's handle entry when the limits
	// reserve (RateLimit.Reserve) and the request carries the entry they
	// name; "" otherwise. It names the request's hold; it is in neither
	// StatsKey nor Counter.
	Handle string
}

// Key returns the engine key of the match's counter: scope the domain's
// (algorithms.DomainScope), identifier Counter. Name is left empty so the limit itself (algorithm,
// limit, window, refill) also names the state, and a limit changed by a
// reload starts from fresh state instead of reusing a different window's.
func (m *Match) Key() algorithms.Key {
	return algorithms.Key{Scope: algorithms.DomainScope(m.Domain), Identifier: m.Counter}
}

// Match returns the limit for the request descriptor entries, or nil when
// none applies. d may be nil (unknown domain).
//
// In a domain whose limits reserve (RateLimit.Reserve), the entries whose
// key is a handle are first taken out: when the rest match limits that
// reserve under one of those keys, that is the match, its Handle the
// entry's value, and the handle is in neither its StatsKey nor its Counter
// (a descriptor with the handle entry counts where it counts without).
// Otherwise the entries match as they are.
func (d *Domain) Match(entries []Entry) *Match {
	if d == nil || len(entries) == 0 {
		return nil
	}
	if len(d.handles) > 0 {
		if m := d.matchHandle(entries); m != nil {
			return m
		}
	}
	return d.match(entries)
}

// match is Match without taking handles out.
func (d *Domain) match(entries []Entry) *Match {
	var (
		buf      [8]step // no allocation for the few entries of a usual descriptor
		steps    = buf[:0]
		patterns []string
		lvl      = &d.root
	)
	for i, e := range entries {
		n, how := lvl.lookup(e)
		if n == nil {
			return nil
		}
		if n.shareThreshold && n.wildcard && how != byDefault {
			if patterns == nil {
				patterns = make([]string, len(entries))
			}
			patterns[i] = n.value
		}
		steps = append(steps, step{n, how})
		if i < len(entries)-1 && len(n.children.exact)+len(n.children.defaults) == 0 {
			return nil // the request is deeper than the configuration
		}
		lvl = &n.children
	}
	found := steps[len(steps)-1].node
	if found.limits == nil {
		return nil // key/value with no rate_limit: whitelisted
	}
	m := &Match{
		Domain:         d.name,
		Entries:        entries,
		Limits:         found.limits,
		Limit:          found.limits[0],
		ShadowMode:     found.shadowMode,
		DetailedMetric: found.detailedMetric,
		QuotaMode:      found.quotaMode,
		Metadata:       found.metadata,
		ConfigKey:      found.fullKey,
		SharePatterns:  patterns,
	}
	m.StatsKey, m.Counter = matchKeys(d.name, entries, steps, patterns, found.detailedMetric)
	return m
}

// step is how one request entry matched: the descriptor found, and by what.
type step struct {
	node *node
	how  matchKind
}

// matchKeys returns a match's StatsKey and Counter, written into one
// allocation.
func matchKeys(domain string, entries []Entry, steps []step, patterns []string, detailed bool) (stats, counter string) {
	size := len(domain)
	for i, e := range entries {
		k, sep, v := statsPart(e, steps[i], patterns, i, detailed)
		size += 1 + len(k) + len(sep) + len(v)
	}
	statsLen := size
	for i, e := range entries {
		v := counterValue(e, patterns, i)
		size += digits(len(e.Key)) + 1 + len(e.Key) + digits(len(v)) + 1 + len(v)
	}
	var sb strings.Builder
	sb.Grow(size)
	sb.WriteString(domain)
	for i, e := range entries {
		k, sep, v := statsPart(e, steps[i], patterns, i, detailed)
		sb.WriteByte('.')
		sb.WriteString(k)
		sb.WriteString(sep)
		sb.WriteString(v)
	}
	// The counter encodes entries unambiguously, len:key len:value each.
	var num [20]byte
	for i, e := range entries {
		v := counterValue(e, patterns, i)
		sb.Write(strconv.AppendInt(num[:0], int64(len(e.Key)), 10))
		sb.WriteByte(':')
		sb.WriteString(e.Key)
		sb.Write(strconv.AppendInt(num[:0], int64(len(v)), 10))
		sb.WriteByte(':')
		sb.WriteString(v)
	}
	s := sb.String()
	return s[:statsLen], s[statsLen:]
}

// statsPart is entry i's part of the stats key, as key, separator and
// value, as upstream writes it.
func statsPart(e Entry, s step, patterns []string, i int, detailed bool) (k, sep, v string) {
	switch {
	case patterns != nil && patterns[i] != "":
		return e.Key, "_", patterns[i]
	case detailed && patterns != nil:
		return keyValue(e.Key, e.Value)
	case detailed: // upstream writes key_value even for an empty value
		return e.Key, "_", e.Value
	case s.node.valueToMetric && s.how != byValue:
		return keyValue(e.Key, e.Value)
	case s.how == byDefault:
		return e.Key, "", ""
	}
	return keyValue(s.node.key, s.node.value) // as configured: the pattern of a wildcard
}

// keyValue is key_value, or key alone for an empty value.
func keyValue(k, v string) (string, string, string) {
	if v == "" {
		return k, "", ""
	}
	return k, "_", v
}

// counterValue is what entry i counts by: its value, or the share_threshold
// pattern it matched.
func counterValue(e Entry, patterns []string, i int) string {
	if patterns != nil && patterns[i] != "" {
		return patterns[i]
	}
	return e.Value
}

// digits is the number of decimal digits of n ≥ 0.
func digits(n int) int {
	d := 1
	for ; n >= 10; n /= 10 {
		d++
	}
	return d
}

// ApplyReplaces drops, as upstream does, every limit whose Name is listed in
// the Replaces of a limit of another match of the same request (a limit
// never replaces one of its own descriptor: the configuration check refuses
// it). A match left without limits is dropped. Like slices.DeleteFunc it
// works in place: it sets each dropped match of ms to nil, replaces a match
// that lost some of its limits with a copy holding the rest, and returns
// ms, so positions still line up with the request's descriptors.
func ApplyReplaces(ms []*Match) []*Match {
	replaced := map[string]bool{}
	for _, m := range ms {
		if m != nil {
			for _, l := range m.Limits {
				for _, r := range l.Replaces {
					replaced[r] = true
				}
			}
		}
	}
	if len(replaced) == 0 {
		return ms
	}
	drop := func(l RateLimit) bool { return l.Name != "" && replaced[l.Name] }
	for i, m := range ms {
		if m == nil || !slices.ContainsFunc(m.Limits, drop) {
			continue
		}
		kept := slices.DeleteFunc(slices.Clone(m.Limits), drop)
		if len(kept) == 0 {
			ms[i] = nil
			continue
		}
		c := *m
		c.Limits, c.Limit = kept, kept[0]
		ms[i] = &c
	}
	return ms
}
