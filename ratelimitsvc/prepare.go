package ratelimitsvc

// Preparing a request: each descriptor matched to its limits (or its limit
// override) and turned into what the engine decides.

import (
	"strconv"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/throttle-rl/throttle/algorithms"
	"github.com/throttle-rl/throttle/descriptors"
)

// match finds each descriptor's limit: in the YAML configuration when it has
// the domain, else in the rules of the client that owns the domain. Limits
// named in another match's replaces are dropped. It reports whether the
// domain is configured at all, looked up once.
func (s *Server) match(domain string, ds []*rlcommon.RateLimitDescriptor) ([]*descriptors.Match, bool) {
	dom, _ := s.domain(domain)
	out := make([]*descriptors.Match, len(ds))
	if dom == nil {
		s.metrics.notFound(domain, len(ds))
		return out, false
	}
	for i, d := range ds {
		out[i] = dom.Match(entries(d))
	}
	return descriptors.ApplyReplaces(out), true
}

func entries(d *rlcommon.RateLimitDescriptor) []descriptors.Entry {
	es := make([]descriptors.Entry, len(d.GetEntries()))
	for i, e := range d.GetEntries() {
		es[i] = descriptors.Entry{Key: e.GetKey(), Value: e.GetValue()}
	}
	return es
}

// prepareAll matches the descriptors of a request on domain and prepares
// each one a limit applies to (nil where none does), as ShouldRateLimit
// and the REST counters (counters.go) decide them. requestHits is the hits
// of a descriptor without its own hits_addend.
func (s *Server) prepareAll(domain string, ds []*rlcommon.RateLimitDescriptor, requestHits int64) []*limited {
	matches, known := s.match(domain, ds)
	prepared := make([]*limited, len(ds))
	for i, d := range ds {
		hits := requestHits
		if h := d.GetHitsAddend(); h != nil {
			hits = int64(min(h.GetValue(), algorithms.MaxLimit))
		}
		prepared[i] = s.prepare(domain, known, d, matches[i], i, hits)
	}
	return prepared
}

// prepare turns a descriptor into what the engine decides, or nil when no
// limit applies: its limit override when it carries one, else its match in
// the configuration.
func (s *Server) prepare(domain string, known bool, d *rlcommon.RateLimitDescriptor, m *descriptors.Match, index int, hits int64) *limited {
	if o := d.GetLimit(); o != nil {
		// The override wins over the configuration, in a known domain only
		// (as the reference service). It never runs in shadow mode.
		if !known {
			return nil
		}
		return fromOverride(domain, d, o, index, hits)
	}
	if m == nil {
		return nil
	}
	return s.fromMatch(domain, m, index, hits)
}

// fromOverride prepares a descriptor by the limit it carries (Envoy's
// per-descriptor limit override): one fixed window, counted apart from the
// configuration's limits; nil when its unit cannot be enforced.
func fromOverride(domain string, d *rlcommon.RateLimitDescriptor, o *rlcommon.RateLimitDescriptor_RateLimitOverride, index int, hits int64) *limited {
	rl := descriptors.RateLimit{RequestsPerUnit: o.GetRequestsPerUnit(), Unit: descriptors.Unit(o.GetUnit()), UnitMultiplier: o.GetUnitMultiplier().GetValue()}
	l := &limited{index: index, statsKey: fullKey(d), rollup: keysOnly(d), hits: hits,
		key: algorithms.Key{Scope: algorithms.DomainScope(domain), Identifier: overrideCounter(d)}}
	ls := limitState{limit: rl, unit: rlsv3.RateLimitResponse_RateLimit_Unit(o.GetUnit())}
	if !rl.AlwaysOverLimit() {
		if rl.Unit.Window() <= 0 {
			return nil // an override with no usable unit: nothing to enforce
		}
		ls.engine = algorithms.Limit{Algorithm: algorithms.FixedWindow, Limit: int64(rl.RequestsPerUnit), Window: rl.WindowLength()}
	}
	l.one[0] = ls
	l.limits = l.one[:]
	return l
}

// fromMatch prepares a descriptor by the configuration's limits that match
// it; nil when one cannot be enforced (a bug of the configuration check).
func (s *Server) fromMatch(domain string, m *descriptors.Match, index int, hits int64) *limited {
	l := &limited{index: index, shadow: m.ShadowMode, quota: m.QuotaMode && !m.Limit.Unlimited,
		statsKey: withoutDomain(m.StatsKey, m.Domain), rollup: withoutDomain(m.ConfigKey, m.Domain),
		metadata: m.Metadata, key: m.Key(), hits: hits}
	if m.Handle != "" {
		l.handle = holdID(m.Handle)
	}
	l.limits = l.one[:]
	if len(m.Limits) > 1 {
		l.limits = make([]limitState, len(m.Limits))
	}
	for i, rl := range m.Limits {
		rl = s.withOverride(domain, rl, m.Entries) // a REST rule's override of the identifier (rules.go)
		ls := limitState{limit: rl, unit: rlsv3.RateLimitResponse_RateLimit_Unit(rl.Unit)}
		if !rl.Unlimited && !rl.AlwaysOverLimit() {
			el, err := rl.EngineLimit()
			if err != nil {
				// Validated when loaded; a limit the engine cannot take is a
				// bug in the configuration check, not the caller's fault.
				s.opts.Log.Error("descriptor limit not enforceable", "domain", domain, "stats_key", m.StatsKey, "err", err)
				return nil
			}
			ls.engine = el
		}
		l.limits[i] = ls
	}
	return l
}

// withoutDomain is a stats key without its leading domain: the metric
// label key (the domain is a label of its own).
func withoutDomain(k, domain string) string {
	if len(k) > len(domain) && k[:len(domain)] == domain && k[len(domain)] == '.' {
		return k[len(domain)+1:]
	}
	return k
}

// fullKey is the reference service's descriptor key: key_value parts joined
// with '.', used as the metric label of overrides.
func fullKey(d *rlcommon.RateLimitDescriptor) string { return joinEntries(d, true) }

// keysOnly is a descriptor's keys joined with '.': the configured key of a
// limit override, whose stats key (fullKey) carries the request's values.
func keysOnly(d *rlcommon.RateLimitDescriptor) string { return joinEntries(d, false) }

// joinEntries joins a descriptor's keys with '.', each with "_value" when
// withValues and it has one.
func joinEntries(d *rlcommon.RateLimitDescriptor, withValues bool) string {
	var b []byte
	for i, e := range d.GetEntries() {
		if i > 0 {
			b = append(b, '.')
		}
		b = append(b, e.GetKey()...)
		if withValues && e.GetValue() != "" {
			b = append(b, '_')
			b = append(b, e.GetValue()...)
		}
	}
	return string(b)
}

// overrideCounter identifies an override's state: every key and value,
// length-prefixed so no two descriptors share it.
func overrideCounter(d *rlcommon.RateLimitDescriptor) string {
	b := []byte("override")
	for _, e := range d.GetEntries() {
		b = append(b, '|')
		b = strconv.AppendInt(b, int64(len(e.GetKey())), 10)
		b = append(b, ':')
		b = append(b, e.GetKey()...)
		b = strconv.AppendInt(b, int64(len(e.GetValue())), 10)
		b = append(b, ':')
		b = append(b, e.GetValue()...)
	}
	return string(b)
}
