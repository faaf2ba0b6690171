package descriptors

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestParseReadsYAMLAsUpstream: YAML that the reference service's parser
// (yaml.v2) reads its own way reads the same here, from yaml.v4 nodes.
func TestParseReadsYAMLAsUpstream(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       []Descriptor
	}{
		{"YAML 1.1 booleans, strings as written, timestamps kept",
			"domain: d\ndescriptors:\n  - key: k\n    value: 2001-01-01\n    shadow_mode: yes\n    quota_mode: on\n    detailed_metric: Y\n" +
				"    rate_limit: {unit: second, requests_per_unit: 0x10}\n    metadata: {on: off, t: 2001-01-01, n: [1, 2.5, ~]}\n",
			[]Descriptor{{Key: "k", Value: "2001-01-01", ShadowMode: true, QuotaMode: true, DetailedMetric: true, Line: 3,
				RateLimit: &Limit{RequestsPerUnit: 16, Unit: "second", Line: 8},
				// n, like on, is a YAML 1.1 boolean: the key "false".
				Metadata: map[string]any{"true": false, "t": "2001-01-01", "false": []any{1, 2.5, nil}}}}},
		{"anchors and aliases",
			"domain: d\ndescriptors:\n  - &a\n    key: a\n    rate_limit: &rl {unit: minute, requests_per_unit: 3}\n  - key: b\n    rate_limit: *rl\n  - {key: c, descriptors: [*a]}\n",
			[]Descriptor{
				{Key: "a", RateLimit: &Limit{RequestsPerUnit: 3, Unit: "minute", Line: 5}, Line: 3}, // the anchor's line
				{Key: "b", RateLimit: &Limit{RequestsPerUnit: 3, Unit: "minute", Line: 7}, Line: 6},
				{Key: "c", Line: 8, Descriptors: []Descriptor{{Key: "a", RateLimit: &Limit{RequestsPerUnit: 3, Unit: "minute", Line: 5}, Line: 8}}}}},
		{"a merge key's pairs are no fields, but override a field before them",
			"domain: d\ndescriptors:\n  - key: a\n    <<: {key: b, value: v}\n",
			[]Descriptor{{Key: "b", Line: 3}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse("f.yaml", []byte(tt.yaml))
			must(t, err)
			if diff := cmp.Diff(tt.want, f.Descriptors); diff != "" {
				t.Errorf("descriptors (-want +got):\n%s", diff)
			}
		})
	}
}

// TestParseRefusesYAMLAsUpstream: what yaml.v2 refuses when it decodes, and
// problems of fields read as it reads them, with the line of each.
func TestParseRefusesYAMLAsUpstream(t *testing.T) {
	laughs := "domain: d\na: &a [x, x, x, x, x, x, x, x, x, x]\n"
	for i, prev := range []string{"a", "b", "c", "d", "e"} {
		name := string(rune('b' + i))
		laughs += name + ": &" + name + " [" + strings.Repeat("*"+prev+", ", 9) + "*" + prev + "]\n"
	}
	tests := []struct{ name, yaml, want string }{
		{"an alias inside its anchor", "domain: d\ndescriptors: &l [{key: k, descriptors: *l}]\n",
			"f.yaml:2: error loading config file: yaml: anchor 'l' value contains itself"},
		{"excessive aliasing", laughs, "f.yaml: error loading config file: yaml: document contains excessive aliasing"},
		{"a sequence as a key", "domain: d\n? [a]\n: b\n", `f.yaml:2: error loading config file: yaml: invalid map key: []interface {}{"a"}`},
		{"a merge of a scalar", "domain: d\ndescriptors:\n  - key: a\n    <<: 5\n",
			"f.yaml:4: error loading config file: yaml: map merge requires map or sequence of maps as the value"},
		{"a value unlike its tag", "domain: d\ndescriptors: [{key: !!int k}]\n", "f.yaml:2: error loading config file: yaml: cannot construct !!str `k` as a !!int"},
		{"the last of a repeated key is its value", "domain: d\ndescriptors:\n  - key: a\n    key:\n",
			"f.yaml:3: domain \"d\" › descriptors[0]: config error, key 'key' appears twice\n" +
				"f.yaml:3: domain \"d\" › descriptors[0]: descriptor has empty key"},
		{"a YAML 1.1 boolean key is no string", "domain: d\ny: 1\n", "f.yaml:1: config error, key is not of type string: true"},
		{"a quoted boolean is no boolean", "domain: d\ndescriptors:\n  - key: a\n    shadow_mode: 'yes'\n",
			"f.yaml:3: domain \"d\" › descriptors[0]: shadow_mode must be true or false, not yes"},
		{"a limit through an alias has the line of its key", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: &rl {unit: minutes}\n  - key: b\n    rate_limit: *rl\n",
			"f.yaml:4: domain \"d\" › descriptors[0] › rate_limit: invalid rate limit unit 'minutes'\n" +
				"f.yaml:6: domain \"d\" › descriptors[1] › rate_limit: invalid rate limit unit 'minutes'"},
		{"nested rate_limit lines", "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        rate_limit:\n          unit: minutes\n",
			"f.yaml:6: domain \"d\" › descriptors[0] › descriptors[0] › rate_limit: invalid rate limit unit 'minutes'"},
		{"replaces entries have their own lines", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      replaces:\n        - name: x\n        - nmae: y\n",
			"f.yaml:8: domain \"d\" › descriptors[0] › rate_limit › replaces[1]: config error, unknown key 'nmae'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("f.yaml", []byte(tt.yaml))
			if err == nil || err.Error() != tt.want {
				t.Errorf("Parse: got %v\nwant %s", err, tt.want)
			}
		})
	}
}

// TestParseNamesDomainOfBadFile: a file with problems still names its
// domain, so a Reloader tells the domain's operators why.
func TestParseNamesDomainOfBadFile(t *testing.T) {
	for _, y := range []string{
		"domain: d\nextra: 1\n",
		"domain: d\ndescriptors: [{key: a, rate_limit: {unit: minutes}}]\n",
	} {
		if f, err := parse("f.yaml", []byte(y), Options{}); err == nil || f.Domain != "d" {
			t.Errorf("parse(%q) = domain %q, %v; want d and an error", y, f.Domain, err)
		}
	}
	for _, y := range []string{"domain: [d]\n", "domain: d\ndescriptors: [\n", ""} {
		if f, err := parse("f.yaml", []byte(y), Options{}); err == nil || f.Domain != "" {
			t.Errorf("parse(%q) = domain %q, %v; want none and an error", y, f.Domain, err)
		}
	}
}
