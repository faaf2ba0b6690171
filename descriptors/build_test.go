package descriptors

import (
	"strings"
	"testing"
	"time"
)

// withoutLines is the text of err, every *ConfigError's line dropped.
func withoutLines(err error) string {
	var lines []string
	for _, ce := range configErrors(err) {
		c := *ce
		c.Line = 0
		lines = append(lines, c.Error())
	}
	return strings.Join(lines, "\n")
}

// TestBuildRefusesAsLoad: a mistake in a File made in Go is refused by
// Build with the message Load gives the same mistake in YAML, without the
// line.
func TestBuildRefusesAsLoad(t *testing.T) {
	perMinute := func(n uint32) *Limit { return &Limit{Unit: "minute", RequestsPerUnit: n} }
	tests := []struct {
		name  string
		yaml  []string
		files []*File
		opts  Options
	}{
		{"unknown unit", []string{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minutes, requests_per_unit: 1}\n"},
			[]*File{{Name: "f0", Domain: "d", Descriptors: []Descriptor{{Key: "k", RateLimit: &Limit{Unit: "minutes", RequestsPerUnit: 1}}}}}, Options{}},
		{"no unit", []string{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {requests_per_unit: 1}\n"},
			[]*File{{Name: "f0", Domain: "d", Descriptors: []Descriptor{{Key: "k", RateLimit: &Limit{RequestsPerUnit: 1}}}}}, Options{}},
		{"duplicate key, nested", []string{"domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - {key: k, value: v}\n      - {key: k, value: v}\n"},
			[]*File{{Name: "f0", Domain: "d", Descriptors: []Descriptor{{Key: "a", Descriptors: []Descriptor{{Key: "k", Value: "v"}, {Key: "k", Value: "v"}}}}}}, Options{}},
		{"empty key, then a bad reserve", []string{"domain: d\ndescriptors:\n  - value: v\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n      reserve: {hits: 6, ttl: 90s, handle: id}\n"},
			[]*File{{Name: "f0", Domain: "d", Descriptors: []Descriptor{{Value: "v"},
				{Key: "k", RateLimit: &Limit{Unit: "second", RequestsPerUnit: 5, Reserve: &Reserve{Hits: 6, TTL: 90 * time.Second, Handle: "id"}}}}}}, Options{}},
		{"rate_limits", []string{"domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n      - {unit: minute, requests_per_unit: 5}\n      - {unit: MINUTE, requests_per_unit: 5, accuracy: approximate}\n"},
			[]*File{{Name: "f0", Domain: "d", Descriptors: []Descriptor{{Key: "k", RateLimits: []Limit{*perMinute(5), {Unit: "MINUTE", RequestsPerUnit: 5, Accuracy: "approximate"}}}}}}, Options{}},
		{"scope global without a global Redis, and exact", []string{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5, scope: global, accuracy: exact}\n"},
			[]*File{{Name: "f0", Domain: "d", Descriptors: []Descriptor{{Key: "k", RateLimit: &Limit{Unit: "minute", RequestsPerUnit: 5, Scope: "global", Accuracy: "exact"}}}}}, Options{}},
		{"both rate_limit and rate_limits", []string{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5}\n    rate_limits: [{unit: hour, requests_per_unit: 50}]\n"},
			[]*File{{Name: "f0", Domain: "d", Descriptors: []Descriptor{{Key: "k", RateLimit: perMinute(5), RateLimits: []Limit{{Unit: "hour", RequestsPerUnit: 50}}}}}}, Options{}},
		{"empty domain", []string{"descriptors: []\n"}, []*File{{Name: "f0"}}, Options{}},
		{"a domain in two files, the second with a duplicate", []string{"domain: d\n", "domain: d\ndescriptors: [{key: k}, {key: k}]\n"},
			[]*File{{Name: "f0", Domain: "d"}, {Name: "f1", Domain: "d", Descriptors: []Descriptor{{Key: "k"}, {Key: "k"}}}}, Options{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var srcs []Source
			for i, y := range tt.yaml {
				srcs = append(srcs, Source{Name: tt.files[i].Name, Data: []byte(y)})
			}
			_, lerr := Load(tt.opts, srcs...)
			_, berr := Build(tt.opts, tt.files...)
			if lerr == nil || berr == nil {
				t.Fatalf("Load: %v\nBuild: %v\nwant both to refuse", lerr, berr)
			}
			if got, want := berr.Error(), withoutLines(lerr); got != want {
				t.Errorf("Build:\n%s\nwant Load's without lines:\n%s", got, want)
			}
		})
	}
}

// TestLoadPlacesAfterNonMap: a list element that is no map keeps its
// index, so the places of the elements after it are the file's.
func TestLoadPlacesAfterNonMap(t *testing.T) {
	yaml := "domain: d\ndescriptors:\n  - a\n  - {key: k}\n  - {key: k, rate_limits: [b, {unit: minutes}]}\n"
	want := `f:3: domain "d" › descriptors[0]: config error, yaml file contains list of type other than map: a
f:5: domain "d" › descriptors[2] › rate_limits[0]: config error, yaml file contains list of type other than map: b
f:5: domain "d" › descriptors[2] › rate_limits[1]: invalid rate limit unit 'minutes'
f:5: domain "d" › descriptors[2]: duplicate descriptor composite key 'd.k'`
	if _, err := Load(Options{}, Source{Name: "f", Data: []byte(yaml)}); err == nil || err.Error() != want {
		t.Errorf("Load: %v\nwant %s", err, want)
	}
}
