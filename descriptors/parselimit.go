package descriptors

import (
	"fmt"
	"math"
	"time"

	yaml "go.yaml.in/yaml/v4"

	"github.com/throttle-rl/throttle/algorithms"
)

// rateLimits reads rate_limits, a list of rate_limit maps, of the
// descriptor at at (the key on line keyLine).
func (p *parser) rateLimits(n *yaml.Node, at place, keyLine int) []Limit {
	if deref(n).Kind != yaml.SequenceNode {
		p.fail(at.in("rate_limits", keyLine), "rate_limits must be a list of rate_limit maps, not %v", display(n))
		return nil
	}
	elems := p.list(n, at, "rate_limits")
	if len(elems) == 0 {
		p.fail(at.in("rate_limits", keyLine), "rate_limits must list at least one limit")
		return nil
	}
	limits := make([]Limit, len(elems))
	p.each(elems, at, "rate_limits", func(i int, e *yaml.Node, lat place) { limits[i] = *p.rateLimit(e, lat) })
	return limits
}

// rateLimit reads a rate_limit; nil when it is no map.
func (p *parser) rateLimit(n *yaml.Node, at place) *Limit {
	if deref(n).Kind != yaml.MappingNode {
		p.fail(at, "rate_limit must be a map, not %v", display(n))
		return nil
	}
	fs, ok := p.fields(n, at, "unit", "requests_per_unit", "unlimited", "name", "replaces", "algorithm", "refill_rate",
		"unit_multiplier", "always_count", "accuracy", "scope", "reserve")
	l := &Limit{
		Unlimited:   p.boolean(fs["unlimited"].value, at, "unlimited"),
		Name:        p.str(fs["name"].value, at, "name"),
		AlwaysCount: p.boolean(fs["always_count"].value, at, "always_count"),
		Line:        at.line,
	}
	var good bool
	if um := fs["unit_multiplier"].value; !isNull(um) {
		l.UnitMultiplier, good = p.uint32(um, at, "unit_multiplier", 1)
		ok = ok && good
	}
	l.Unit = p.str(fs["unit"].value, at, "unit")
	if rpu := fs["requests_per_unit"].value; !isNull(rpu) {
		l.RequestsPerUnit, good = p.uint32(rpu, at, "requests_per_unit", 0)
		ok = ok && good
	}
	l.Replaces, good = p.replaces(fs["replaces"].value, at)
	ok = ok && good
	l.Algorithm = algorithms.Algorithm(p.str(fs["algorithm"].value, at, "algorithm"))
	l.Accuracy = p.str(fs["accuracy"].value, at, "accuracy")
	l.Scope = p.str(fs["scope"].value, at, "scope")
	if rr := fs["refill_rate"].value; !isNull(rr) {
		l.RefillRate, good = p.refillRate(rr, at)
		ok = ok && good
	}
	if rn := fs["reserve"]; !isNull(rn.value) {
		l.ReserveLine = rn.key.Line
		l.Reserve, good = p.reserve(rn.value, at.in("reserve", rn.key.Line))
		ok = ok && good
	}
	if !ok {
		p.gaps[at.String()] = gapFields // its settings unchecked
	}
	return l
}

// replaces reads a rate_limit's replaces, a list of maps each naming a
// limit it replaces. It reports whether every entry is well-formed.
func (p *parser) replaces(n *yaml.Node, at place) ([]string, bool) {
	var names []string
	ok := true
	for i, r := range p.list(n, at, "replaces") {
		if r == nil {
			ok = false
			continue
		}
		rat := at.in(fmt.Sprintf("replaces[%d]", i), r.Line)
		rf, good := p.fields(r, rat, "name")
		ok = ok && good
		names = append(names, p.str(rf["name"].value, rat, "name"))
	}
	return names, ok
}

// refillRate reads a rate_limit's refill_rate, a number of tokens per
// second.
func (p *parser) refillRate(n *yaml.Node, at place) (float64, bool) {
	switch v := display(n).(type) {
	case int:
		return float64(v), true
	case int64:
		return float64(v), true
	case uint64:
		return float64(v), true
	case float64:
		return v, true
	default:
		p.fail(at, "refill_rate must be a number of tokens per second, not %v", v)
	}
	return 0, false
}

// reserve reads a rate_limit's reserve: hits, ttl (seconds, or a duration
// such as 60s or 1m) and handle. It reports whether it read them all.
func (p *parser) reserve(n *yaml.Node, at place) (*Reserve, bool) {
	if deref(n).Kind != yaml.MappingNode {
		p.fail(at, "reserve must be a map with hits, ttl and handle, not %v", display(n))
		return nil, false
	}
	fs, ok := p.fields(n, at, "hits", "ttl", "handle")
	r := &Reserve{Handle: p.str(fs["handle"].value, at, "handle")}
	if h := fs["hits"].value; !isNull(h) {
		v, good := wholeNumber(display(h))
		if !good {
			p.fail(at, "hits must be a whole number, not %v", display(h))
		}
		r.Hits, ok = v, ok && good
	}
	if t := fs["ttl"].value; !isNull(t) {
		d, err := parseTTL(display(t))
		if err != nil {
			p.fail(at, "%s", err)
		}
		r.TTL, ok = d, ok && err == nil
	}
	return r, ok
}

// parseTTL reads a reservation's ttl: a whole number of seconds, or a Go
// duration ("60s", "1m").
func parseTTL(v any) (time.Duration, error) {
	if s, isString := v.(string); isString {
		d, err := time.ParseDuration(s)
		if err != nil {
			return 0, fmt.Errorf("ttl %q must be a number of seconds or a duration such as 60s or 1m", s)
		}
		return d, nil
	}
	secs, ok := wholeNumber(v)
	if !ok || secs > int64(algorithms.MaxHoldTTL/time.Second) {
		return 0, fmt.Errorf("ttl %v must be a whole number of seconds or a duration such as 60s or 1m", v)
	}
	return time.Duration(secs) * time.Second, nil
}

// wholeNumber returns v as an integer when it is one (YAML ints, and floats
// without a fraction, as upstream's decoder accepts them).
func wholeNumber(v any) (int64, bool) {
	switch v := v.(type) {
	case int:
		return int64(v), true
	case int64:
		return v, true
	case uint64:
		if v > math.MaxInt64 {
			return 0, false
		}
		return int64(v), true
	case float64:
		if v != math.Trunc(v) || v < math.MinInt64 || v > math.MaxInt64 {
			return 0, false
		}
		return int64(v), true
	}
	return 0, false
}

// uint32 reads field name of n, a whole number between lo and the largest
// uint32 (Envoy's type for it); false, and the problem noted, when it is
// not.
func (p *parser) uint32(n *yaml.Node, at place, name string, lo int64) (uint32, bool) {
	v, good := wholeNumber(display(n))
	if !good || v < lo || v > math.MaxUint32 {
		p.fail(at, "%s must be a whole number between %d and %d, not %v", name, lo, uint32(math.MaxUint32), display(n))
		return 0, false
	}
	return uint32(v), true
}
