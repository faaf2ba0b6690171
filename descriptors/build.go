package descriptors

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/throttle-rl/throttle/algorithms"
)

// Build checks files and builds one Config from them, in order: what Load
// does with the Files it reads from YAML, for Files made another way
// (package xdsconfig makes one of each xDS RateLimitConfig). A mistake
// gets the message it gets in a YAML file, naming the File and the place
// in it, with no line where the File has none. The error joins every
// problem, file by file and by line within a file; a File with problems
// is still checked against itself and the others. opts.MergeDomains lets
// several files describe one domain. The Config shares the files'
// metadata and replaces: they must not change after.
func Build(opts Options, files ...*File) (*Config, error) {
	b := newBuilder(opts, len(files))
	for i, f := range files {
		b.file(i, f, nil)
	}
	return b.result()
}

// gap is how much of something the YAML reader could not read.
type gap int

const (
	// gapFields: some of its fields. A descriptor whose key or value it
	// could not read is checked against no sibling (its composite key is
	// not what the file says); a limit, for its unit and scope only.
	gapFields gap = iota + 1
	// gapAll: any of it (a list element that is no map, or a file of which
	// it read the domain at most). It is not checked.
	gapAll
)

// gaps are the gaps the YAML reader left in a File, by place
// (place.String; "" for the file itself).
type gaps map[string]gap

// place is where a problem is: a ConfigError's Path, step by step, and Line.
type place struct {
	path []string
	line int
}

// in returns the place of step, at line, inside p.
func (p place) in(step string, line int) place {
	return place{path: append(p.path[:len(p.path):len(p.path)], step), line: line}
}

// domainPlace is the place of a domain's descriptors.
func domainPlace(domain string, line int) place {
	return place{path: []string{"domain " + strconv.Quote(domain)}, line: line}
}

// problem returns a ConfigError of file at p.
func (p place) problem(file, msg string) *ConfigError {
	return &ConfigError{File: file, Line: p.line, Path: p.String(), Msg: msg}
}

// String is the place as a ConfigError's Path shows it.
func (p place) String() string { return strings.Join(p.path, " › ") }

// builder checks Files and builds a Config of them, in order.
type builder struct {
	opts     Options
	config   *Config
	problems [][]*ConfigError // by file index
}

func newBuilder(opts Options, files int) *builder {
	return &builder{opts: opts, config: &Config{domains: map[string]*Domain{}}, problems: make([][]*ConfigError, files)}
}

// result returns the Config, or every problem: file by file, by line
// within a file.
func (b *builder) result() (*Config, error) {
	var errs []error
	for _, ps := range b.problems {
		slices.SortStableFunc(ps, func(x, y *ConfigError) int { return cmp.Compare(x.Line, y.Line) })
		for _, p := range ps {
			errs = append(errs, p)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return b.config, nil
}

// file adds the i-th file, f, with the gaps the YAML reader left in it.
func (b *builder) file(i int, f *File, gaps gaps) {
	fb := fileBuilder{builder: b, index: i, name: f.Name, gaps: gaps}
	if f.Domain == "" {
		if gaps[""] == 0 {
			fb.fail(place{line: f.Line}, "config file cannot have empty domain")
		}
		return
	}
	fb.domain = b.config.domains[f.Domain]
	if fb.domain == nil {
		fb.domain = &Domain{name: f.Domain}
		b.config.domains[f.Domain] = fb.domain
	} else if !b.opts.MergeDomains {
		fb.fail(place{line: f.Line}, fmt.Sprintf("duplicate domain '%s' in config file", f.Domain))
		fb.domain = &Domain{name: f.Domain} // its descriptors are still checked
	}
	fb.add(&fb.domain.root, f.Domain, f.Descriptors, domainPlace(f.Domain, f.Line))
}

// fileBuilder adds the descriptors of one file.
type fileBuilder struct {
	*builder
	domain *Domain
	index  int
	name   string
	gaps   gaps
}

func (b fileBuilder) fail(at place, msg string) {
	b.problems[b.index] = append(b.problems[b.index], at.problem(b.name, msg))
}

// gap is the gap the YAML reader left at at, if any.
func (b fileBuilder) gap(at place) gap {
	if len(b.gaps) == 0 {
		return 0 // no place spelt out
	}
	return b.gaps[at.String()]
}

// add checks the descriptors ds at at and adds them to lvl, refusing
// duplicates.
func (b fileBuilder) add(lvl *level, parentKey string, ds []Descriptor, at place) {
	for i, d := range ds {
		dat := at.in("descriptors["+strconv.Itoa(i)+"]", d.Line)
		gap := b.gap(dat)
		if gap == gapAll {
			continue
		}
		s := d.spec(b.limits(d, dat))
		if err := s.checkShape(); err != nil {
			b.fail(dat, err.Error())
		}
		fullKey := parentKey + "." + s.segment()
		// A key or value not read, or no key: its composite key is not
		// what the file says, so it is compared with no sibling.
		apart := gap == gapFields || d.Key == ""
		if !apart && lvl.find(d.Key, d.Value) != nil {
			b.fail(dat, fmt.Sprintf("duplicate descriptor composite key '%s'", fullKey))
			apart = true
		}
		if apart {
			b.add(&level{}, fullKey, d.Descriptors, dat) // its children still checked against each other
			continue
		}
		n := lvl.add(s, fullKey)
		b.domain.noteHandles(s.limits)
		b.add(&n.children, fullKey, d.Descriptors, dat)
	}
}

// limits checks the limits of d, the descriptor at at, each (limit) and
// then together (checkLimits), and returns them as RateLimits.
func (b fileBuilder) limits(d Descriptor, at place) []RateLimit {
	switch {
	case d.RateLimit != nil && len(d.RateLimits) > 0:
		b.fail(at, "rate_limit and rate_limits cannot both be set: give one limit in rate_limit, or several in rate_limits")
		return nil
	case d.RateLimit != nil:
		return []RateLimit{b.limit(*d.RateLimit, at.in("rate_limit", d.RateLimit.Line))}
	case len(d.RateLimits) == 0:
		return nil
	}
	before := len(b.problems[b.index])
	out := make([]RateLimit, 0, len(d.RateLimits))
	whole := true
	for i, l := range d.RateLimits {
		lat := at.in("rate_limits["+strconv.Itoa(i)+"]", l.Line)
		if b.gap(lat) == gapAll {
			whole = false
			continue
		}
		out = append(out, b.limit(l, lat))
	}
	if !whole || len(b.problems[b.index]) > before {
		return out // checked together only once each is well-formed
	}
	if i, err := checkLimits(out); err != nil {
		b.fail(at.in("rate_limits["+strconv.Itoa(i)+"]", d.RateLimits[i].Line), err.Error())
	}
	return out
}

// limit checks l, the limit at at, and returns it as a RateLimit: its unit
// and scope, and, when everything of it is well-formed, its settings
// together (checkSettings), then its reserve.
func (b fileBuilder) limit(l Limit, at place) RateLimit {
	r := RateLimit{RequestsPerUnit: l.RequestsPerUnit, UnitMultiplier: l.UnitMultiplier, Unlimited: l.Unlimited, Name: l.Name,
		Replaces: l.Replaces, Algorithm: l.Algorithm, RefillRate: l.RefillRate, AlwaysCount: l.AlwaysCount, Reserve: l.Reserve}
	ok := b.gap(at) == 0
	var err error
	if l.Unit != "" {
		r.Unit, err = ParseUnit(l.Unit)
	}
	if err == nil {
		err = r.checkUnit(l.Unit)
	}
	if err != nil {
		b.fail(at, err.Error())
		ok = false
	}
	ok = b.scope(&r, l, at) && ok
	if r.Global && !b.opts.GlobalScope {
		b.fail(at, globalScopeUnavailable)
	}
	if !ok {
		return r
	}
	if err := r.checkSettings(); err != nil {
		b.fail(at, err.Error())
	} else if r.Reserve != nil {
		if err := r.Reserve.check(r, b.opts.maxReservationTTL()); err != nil {
			b.fail(at.in("reserve", l.ReserveLine), err.Error())
		}
	}
	return r
}

// scope sets r's accuracy and scope from l's: scope global makes a limit
// approximate unless its accuracy is written. It reports whether the
// scope is one it knows.
func (b fileBuilder) scope(r *RateLimit, l Limit, at place) bool {
	if l.Accuracy != "exact" {
		r.Accuracy = algorithms.Accuracy(l.Accuracy)
	}
	if l.Scope == "" {
		return true
	}
	global, err := algorithms.ParseScope(l.Scope)
	if err != nil {
		b.fail(at, fmt.Sprintf("unknown scope '%s' (want regional or global)", l.Scope))
	}
	r.Global = global
	if global && l.Accuracy == "" {
		r.Accuracy = algorithms.Approximate // what global means; exact written is refused
	}
	return err == nil
}
