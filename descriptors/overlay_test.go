package descriptors

import (
	"slices"
	"sync/atomic"
	"testing"
)

// loadYAML loads one source of YAML text named name.
func loadYAML(t *testing.T, name, yaml string) *Config {
	t.Helper()
	c, err := Load(Options{}, Source{Name: name, Data: []byte(yaml)})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestOverlay(t *testing.T) {
	top := loadYAML(t, "top", "domain: edge\ndescriptors:\n  - key: path\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	bottom, err := Load(Options{},
		Source{Name: "a", Data: []byte("domain: edge\ndescriptors:\n  - key: path\n    rate_limit: {unit: hour, requests_per_unit: 9}\n")},
		Source{Name: "b", Data: []byte("domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name         string
		top, bottom  *Config
		wantDump     string
		wantReplaced []string
		wantNil      bool
	}{
		{name: "neither", wantNil: true},
		{name: "top only", top: top, wantDump: "edge.path: unit=SECOND requests_per_unit=1, shadow_mode: false\n"},
		{name: "bottom only", bottom: bottom, wantDump: "api.user: unit=MINUTE requests_per_unit=5, shadow_mode: false\nedge.path: unit=HOUR requests_per_unit=9, shadow_mode: false\n"},
		{name: "top replaces a domain whole", top: top, bottom: bottom, wantReplaced: []string{"edge"},
			wantDump: "api.user: unit=MINUTE requests_per_unit=5, shadow_mode: false\nedge.path: unit=SECOND requests_per_unit=1, shadow_mode: false\n"},
		{name: "empty top keeps bottom", top: &Config{domains: map[string]*Domain{}}, bottom: bottom,
			wantDump: "api.user: unit=MINUTE requests_per_unit=5, shadow_mode: false\nedge.path: unit=HOUR requests_per_unit=9, shadow_mode: false\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, replaced := Overlay(tt.top, tt.bottom)
			if (got == nil) != tt.wantNil {
				t.Fatalf("Overlay = %v, want nil: %t", got, tt.wantNil)
			}
			if d := got.Dump(); d != tt.wantDump {
				t.Errorf("Dump:\n%s\nwant:\n%s", d, tt.wantDump)
			}
			if !slices.Equal(replaced, tt.wantReplaced) {
				t.Errorf("replaced = %q, want %q", replaced, tt.wantReplaced)
			}
		})
	}
	if bottom.DomainCount() != 2 || top.DomainCount() != 1 {
		t.Errorf("Overlay changed its arguments: %d and %d domains", top.DomainCount(), bottom.DomainCount())
	}
}

// TestLayers: Current builds the overlay once per change of either source,
// and names a replaced domain once for as long as it stays replaced.
func TestLayers(t *testing.T) {
	var top, bottom atomic.Pointer[Config]
	var reports [][]string
	l := NewLayers(top.Load, bottom.Load, func(d []string) { reports = append(reports, d) })
	if c := l.Current(); c != nil {
		t.Fatalf("Current before any load = %v, want nil", c)
	}
	yamlEdge := loadYAML(t, "y", "domain: edge\n")
	bottom.Store(yamlEdge)
	if c := l.Current(); c != yamlEdge {
		t.Fatalf("Current with the bottom alone is not the bottom's Config")
	}
	xdsEdge := loadYAML(t, "x", "domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	top.Store(xdsEdge)
	first := l.Current()
	if first.Domain("edge") != xdsEdge.Domain("edge") {
		t.Errorf("edge is not top's")
	}
	if second := l.Current(); second != first {
		t.Errorf("Current built a new overlay with no change")
	}
	top.Store(loadYAML(t, "x2", "domain: edge\n"))
	if l.Current() == first {
		t.Errorf("Current kept the old overlay after top changed")
	}
	bottom.Store(loadYAML(t, "y2", "domain: edge\n"))
	l.Current()
	if want := [][]string{{"edge"}}; !slices.EqualFunc(reports, want, slices.Equal) {
		t.Errorf("replaced reported %q, want %q", reports, want)
	}
	top.Store(loadYAML(t, "x3", "domain: api\n"))
	l.Current()
	top.Store(loadYAML(t, "x4", "domain: edge\n"))
	l.Current()
	if want := [][]string{{"edge"}, {"edge"}}; !slices.EqualFunc(reports, want, slices.Equal) {
		t.Errorf("after edge was released and replaced again, reported %q, want %q", reports, want)
	}
	if NewLayers(top.Load, nil, nil).Current().Domain("edge") == nil {
		t.Errorf("Layers without a bottom lost top's domain")
	}
}
