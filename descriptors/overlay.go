package descriptors

import (
	"slices"
	"sync"
	"sync/atomic"
)

// Overlay returns the configuration of every domain of top, and of every
// domain of bottom that top does not describe: a domain of top replaces the
// same domain of bottom whole (their descriptors are not merged). replaced
// names, sorted, the domains of bottom that top replaced. A nil Config has
// no domains, but Overlay(nil, nil) is nil: nothing loaded. Neither Config
// is changed; the result shares their domains, which are immutable.
func Overlay(top, bottom *Config) (c *Config, replaced []string) {
	switch {
	case top == nil:
		return bottom, nil
	case bottom == nil:
		return top, nil
	}
	c = &Config{domains: make(map[string]*Domain, len(top.domains)+len(bottom.domains))}
	for name, d := range bottom.domains {
		if _, ok := top.domains[name]; ok {
			replaced = append(replaced, name)
			continue
		}
		c.domains[name] = d
	}
	for name, d := range top.domains {
		c.domains[name] = d
	}
	slices.Sort(replaced)
	return c, replaced
}

// Layers is the configuration of two sources that change on their own, top
// over bottom (Overlay): Current builds the overlay once each time either
// source returns a new Config, and otherwise returns the one it built, so a
// lookup costs two pointer loads.
type Layers struct {
	top, bottom func() *Config
	replaced    func(domains []string)

	mu   sync.Mutex // serialises building
	last atomic.Pointer[layered]
}

// layered is one overlay and what it was built from.
type layered struct {
	top, bottom, overlay *Config
	replaced             []string
}

// NewLayers returns the Layers of top over bottom. bottom may be nil (no
// second source). replaced, optional, is called when an overlay replaces
// domains of bottom that the previous one did not, with their names: once
// per domain for as long as top keeps replacing it.
func NewLayers(top, bottom func() *Config, replaced func(domains []string)) *Layers {
	if bottom == nil {
		bottom = func() *Config { return nil }
	}
	return &Layers{top: top, bottom: bottom, replaced: replaced}
}

// Current returns the overlay of the sources' current configurations; nil
// while neither has loaded one.
func (l *Layers) Current() *Config {
	if s := l.last.Load(); s != nil && s.top == l.top() && s.bottom == l.bottom() {
		return s.overlay
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	// Read again under the lock, so a late builder never stores an older
	// pair than one stored before it.
	t, b := l.top(), l.bottom()
	prev := l.last.Load()
	if prev != nil && prev.top == t && prev.bottom == b {
		return prev.overlay
	}
	o, replaced := Overlay(t, b)
	l.last.Store(&layered{top: t, bottom: b, overlay: o, replaced: replaced})
	var before []string
	if prev != nil {
		before = prev.replaced
	}
	var fresh []string
	for _, name := range replaced {
		if !slices.Contains(before, name) {
			fresh = append(fresh, name)
		}
	}
	if len(fresh) > 0 && l.replaced != nil {
		l.replaced(fresh)
	}
	return o
}
