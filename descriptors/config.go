// Package descriptors holds Envoy rate-limit descriptor configuration: the
// YAML format of Envoy's reference rate-limit service
// (github.com/envoyproxy/ratelimit), read strictly and with the same meaning,
// plus Throttle's extensions (algorithm, refill_rate); domains built from Go
// values (rules made through the REST API); the matcher that turns a request
// descriptor into a limit, a stats key and a counter identity; and a Reloader
// that follows a directory of YAML files (a Kubernetes ConfigMap).
//
// Matching follows upstream exactly. A request descriptor is an ordered list
// of entries (key, value). At each level of the configuration tree the entry
// is looked up as, in order: the descriptor with that exact key and value;
// the first descriptor, in configuration order, with that key whose value is
// a wildcard matching the value ('*' matches zero or more characters,
// anywhere in the value); the descriptor with that key and no value (the
// default). A limit applies only when the lookup succeeds for every entry and
// the descriptor found for the last entry has a rate_limit. A descriptor with
// a key and value and no rate_limit therefore exempts (whitelists) that value.
package descriptors

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/throttle-rl/throttle/algorithms"
)

// ErrInvalid marks configuration Throttle refuses. Every *ConfigError
// wraps it, so callers map it to a client error with errors.Is.
var ErrInvalid = errors.New("invalid descriptor configuration")

// Unit is the length of a rate-limit window. The values are those of
// envoy.service.ratelimit.v3.RateLimitResponse.RateLimit.Unit, so a Unit
// converts to the proto enum with a plain conversion.
type Unit int32

// The units of the descriptor YAML (case-insensitive there).
const (
	UnitUnknown Unit = 0
	Second      Unit = 1
	Minute      Unit = 2
	Hour        Unit = 3
	Day         Unit = 4
	Month       Unit = 5
	Year        Unit = 6
	Week        Unit = 7
)

var unitNames = map[Unit]string{
	UnitUnknown: "UNKNOWN",
	Second:      "SECOND",
	Minute:      "MINUTE",
	Hour:        "HOUR",
	Day:         "DAY",
	Month:       "MONTH",
	Year:        "YEAR",
	Week:        "WEEK",
}

// ParseUnit returns the unit named s, compared case-insensitively with the
// proto enum names (second, MINUTE, Hour, …). UNKNOWN and anything else is an
// error.
func ParseUnit(s string) (Unit, error) {
	up := strings.ToUpper(s)
	for u, name := range unitNames {
		if u != UnitUnknown && name == up {
			return u, nil
		}
	}
	return UnitUnknown, fmt.Errorf("invalid rate limit unit '%s'", s)
}

// String returns the proto enum name of u (SECOND, MINUTE, …).
func (u Unit) String() string {
	if name, ok := unitNames[u]; ok {
		return name
	}
	return "Unit(" + strconv.Itoa(int(u)) + ")"
}

// Window returns the window length of u, as upstream's UnitToDivider: a
// month is 30 days and a year 365 days. It returns 0 for an unknown unit.
func (u Unit) Window() time.Duration {
	const day = 24 * time.Hour
	switch u {
	case Second:
		return time.Second
	case Minute:
		return time.Minute
	case Hour:
		return time.Hour
	case Day:
		return day
	case Week:
		return 7 * day
	case Month:
		return 30 * day
	case Year:
		return 365 * day
	}
	return 0
}

// RateLimit is a limit as configured: a descriptor's rate_limit, or a rule's
// limit.
type RateLimit struct {
	// RequestsPerUnit is the number of requests allowed per Unit. 0 is
	// allowed and means every request is over the limit (a ban); see
	// AlwaysOverLimit.
	RequestsPerUnit uint32
	// Unit is the window. Required unless Unlimited (or Window is set).
	Unit Unit
	// Window, optional, overrides Unit's length. Only rules built from Go
	// values use it (REST rules carry arbitrary windows); YAML always sets
	// Unit.
	Window time.Duration
	// Unlimited means the descriptor is never limited (and never counted).
	Unlimited bool
	// Name is optional; other limits name it in Replaces.
	Name string
	// Replaces lists names of limits this one replaces when both match one
	// request (see ApplyReplaces).
	Replaces []string
	// Algorithm is Throttle's extension; empty means FixedWindow, as
	// upstream counts.
	Algorithm algorithms.Algorithm
	// RefillRate is the token bucket's refill in tokens per second; 0 means
	// RequestsPerUnit per window. Only with Algorithm TokenBucket.
	RefillRate float64
}

// AlwaysOverLimit reports whether every request is over the limit: a limited
// (not Unlimited) rate of 0 requests per unit. The engine refuses a limit of
// 0, so a caller answers OVER_LIMIT without asking it.
func (l RateLimit) AlwaysOverLimit() bool { return !l.Unlimited && l.RequestsPerUnit == 0 }

// WindowLength returns the window: Window when set, else Unit's length.
func (l RateLimit) WindowLength() time.Duration {
	if l.Window > 0 {
		return l.Window
	}
	return l.Unit.Window()
}

// EngineAlgorithm returns the algorithm with the default applied.
func (l RateLimit) EngineAlgorithm() algorithms.Algorithm {
	if l.Algorithm == "" {
		return algorithms.FixedWindow
	}
	return l.Algorithm
}

// EngineLimit converts l to the engine's limit. It fails for a limit the
// engine does not enforce: Unlimited, or AlwaysOverLimit.
func (l RateLimit) EngineLimit() (algorithms.Limit, error) {
	if l.Unlimited {
		return algorithms.Limit{}, fmt.Errorf("%w: unlimited has no engine limit", ErrInvalid)
	}
	if l.AlwaysOverLimit() {
		return algorithms.Limit{}, fmt.Errorf("%w: requests_per_unit 0 is always over the limit", ErrInvalid)
	}
	el := algorithms.Limit{
		Algorithm:  l.EngineAlgorithm(),
		Limit:      int64(l.RequestsPerUnit),
		Window:     l.WindowLength(),
		RefillRate: l.RefillRate,
	}
	return el, el.Validate()
}

// validate checks l, returning upstream's messages where upstream has them.
func (l RateLimit) validate() error {
	if l.Unlimited {
		if l.Unit != UnitUnknown || l.Window != 0 {
			return errors.New("should not specify rate limit unit when unlimited")
		}
	} else if l.Unit.Window() == 0 && l.Window <= 0 {
		return fmt.Errorf("invalid rate limit unit '%s'", strings.ToLower(l.Unit.String()))
	}
	for _, r := range l.Replaces {
		if r == "" {
			return errors.New("should not have an empty replaces entry")
		}
		if r == l.Name {
			return errors.New("replaces should not contain name of same descriptor")
		}
	}
	if l.Algorithm != "" {
		if _, err := algorithms.ParseAlgorithm(string(l.Algorithm)); err != nil {
			return fmt.Errorf("unknown algorithm '%s' (want %s)", l.Algorithm, algorithms.Names())
		}
	}
	if l.RefillRate != 0 && l.Algorithm != algorithms.TokenBucket {
		return fmt.Errorf("refill_rate is only for algorithm token_bucket, not %s", l.EngineAlgorithm())
	}
	if r := l.RefillRate; math.IsNaN(r) || math.IsInf(r, 0) || r < 0 || r > algorithms.MaxRefillRate {
		return fmt.Errorf("refill_rate %v must be a number between 0 and %d tokens per second", r, int64(algorithms.MaxRefillRate))
	}
	if l.Unlimited || l.AlwaysOverLimit() {
		return nil
	}
	if _, err := l.EngineLimit(); err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), algorithms.ErrInvalid.Error()+": "))
	}
	return nil
}

// Entry is one (key, value) of a request descriptor, or of a rule's match.
// In a rule an empty Value matches any value of Key and '*' in Value is a
// wildcard; in a request both are plain strings.
type Entry struct {
	Key   string
	Value string
}

// Rule is a limit on the descriptors that match Entries, for NewDomain: a
// rule made through the REST API. A rule is the Go form of a YAML descriptor
// path ending in a rate_limit.
type Rule struct {
	// Entries is required: the descriptor path, outermost first.
	Entries []Entry
	// Limit is required.
	Limit RateLimit
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

// DomainCount returns the number of domains.
func (c *Config) DomainCount() int {
	if c == nil {
		return 0
	}
	return len(c.domains)
}

// Match returns the limit for the request descriptor entries in domain, or
// nil when none applies (unknown domain, no entries, no match, whitelisted
// value).
func (c *Config) Match(domain string, entries []Entry) *Match {
	return c.Domain(domain).Match(entries)
}

// NewDomain builds a validated domain from rules, with the same matching as
// a YAML domain: rules form one tree, and at each level wildcard values are
// tried in rule order. Two rules with the same entries are refused, as a
// duplicate descriptor in YAML is. Errors wrap ErrInvalid.
func NewDomain(name string, rules []Rule) (*Domain, error) {
	if name == "" {
		return nil, fmt.Errorf("%w: empty domain", ErrInvalid)
	}
	d := &Domain{name: name}
	var errs []error
	for i, r := range rules {
		if err := d.addRule(r); err != nil {
			errs = append(errs, &ConfigError{File: fmt.Sprintf("rule %d", i), Path: "domain " + strconv.Quote(name), Msg: err.Error()})
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
	if err := r.Limit.validate(); err != nil {
		return err
	}
	lvl := &d.root
	fullKey := d.name
	for i, e := range r.Entries {
		last := i == len(r.Entries)-1
		spec := nodeSpec{key: e.Key, value: e.Value}
		if last {
			lim := r.Limit
			spec.limit = &lim
			spec.shadowMode = r.ShadowMode
		}
		if err := spec.check(); err != nil {
			return err
		}
		n := lvl.find(e.Key, e.Value)
		fullKey += "." + spec.segment()
		switch {
		case n == nil:
			n = lvl.add(spec, fullKey)
		case last && n.limit != nil:
			return fmt.Errorf("duplicate descriptor composite key '%s'", fullKey)
		case last:
			n.limit = spec.limit
			n.shadowMode = spec.shadowMode
		}
		lvl = &n.children
	}
	return nil
}

// nodeSpec is one descriptor as read from YAML or a rule, before it joins
// the tree.
type nodeSpec struct {
	key, value     string
	limit          *RateLimit
	shadowMode     bool
	detailedMetric bool
	shareThreshold bool
	valueToMetric  bool
	quotaMode      bool
	metadata       map[string]any
}

// check checks the descriptor and its limit.
func (s nodeSpec) check() error {
	if err := s.checkShape(); err != nil {
		return err
	}
	if s.limit != nil {
		return s.limit.validate()
	}
	return nil
}

// checkShape checks the descriptor without its limit.
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
	// Entries are the request's entries.
	Entries []Entry
	// Limit is the limit that applies.
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
}

// Key returns the engine key of the match's counter: scope the domain,
// identifier Counter. Name is left empty so the limit itself (algorithm,
// limit, window, refill) also names the state, and a limit changed by a
// reload starts from fresh state instead of reusing a different window's.
func (m *Match) Key() algorithms.Key {
	return algorithms.Key{Scope: m.Domain, Identifier: m.Counter}
}

// Match returns the limit for the request descriptor entries, or nil when
// none applies. d may be nil (unknown domain).
func (d *Domain) Match(entries []Entry) *Match {
	if d == nil || len(entries) == 0 {
		return nil
	}
	var (
		lvl      = &d.root
		segs     = make([]string, len(entries))
		patterns []string
		found    *node
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
		switch {
		case patterns != nil && patterns[i] != "":
			segs[i] = e.Key + "_" + patterns[i]
		case n.valueToMetric && how != byValue:
			segs[i] = joinKV(e.Key, e.Value)
		case how == byDefault:
			segs[i] = e.Key
		default: // the configured key_value (the pattern for a wildcard)
			segs[i] = n.segment()
		}
		if i == len(entries)-1 {
			found = n
			break
		}
		if len(n.children.exact)+len(n.children.defaults) == 0 {
			return nil // the request is deeper than the configuration
		}
		lvl = &n.children
	}
	if found.limit == nil {
		return nil // key/value with no rate_limit: whitelisted
	}
	m := &Match{
		Domain:         d.name,
		Entries:        entries,
		Limit:          *found.limit,
		ShadowMode:     found.shadowMode,
		DetailedMetric: found.detailedMetric,
		QuotaMode:      found.quotaMode,
		Metadata:       found.metadata,
		SharePatterns:  patterns,
	}
	var sb strings.Builder
	sb.WriteString(d.name)
	for i, e := range entries {
		sb.WriteByte('.')
		switch {
		case !found.detailedMetric:
			sb.WriteString(segs[i])
		case patterns != nil && patterns[i] != "":
			sb.WriteString(e.Key + "_" + patterns[i])
		case patterns != nil:
			sb.WriteString(joinKV(e.Key, e.Value))
		default: // upstream writes key_value even for an empty value
			sb.WriteString(e.Key + "_" + e.Value)
		}
	}
	m.StatsKey = sb.String()
	m.ConfigKey = found.fullKey
	m.Counter = counterID(entries, patterns)
	return m
}

func joinKV(k, v string) string {
	if v == "" {
		return k
	}
	return k + "_" + v
}

// counterID encodes entries unambiguously: len:key len:value for each, with
// a share_threshold pattern in place of the value where one applies.
func counterID(entries []Entry, patterns []string) string {
	var sb strings.Builder
	for i, e := range entries {
		v := e.Value
		if patterns != nil && patterns[i] != "" {
			v = patterns[i]
		}
		sb.WriteString(strconv.Itoa(len(e.Key)))
		sb.WriteByte(':')
		sb.WriteString(e.Key)
		sb.WriteString(strconv.Itoa(len(v)))
		sb.WriteByte(':')
		sb.WriteString(v)
	}
	return sb.String()
}

// ApplyReplaces drops, as upstream does, every match whose limit Name is
// listed in the Replaces of another match of the same request. It returns a
// new slice of the same length, with nil where a match was dropped (or was
// nil already), so positions still line up with the request's descriptors.
func ApplyReplaces(ms []*Match) []*Match {
	replaced := map[string]bool{}
	for _, m := range ms {
		if m != nil {
			for _, r := range m.Limit.Replaces {
				replaced[r] = true
			}
		}
	}
	out := make([]*Match, len(ms))
	for i, m := range ms {
		if m != nil && (m.Limit.Name == "" || !replaced[m.Limit.Name]) {
			out[i] = m
		}
	}
	return out
}
