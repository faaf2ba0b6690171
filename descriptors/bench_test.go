package descriptors

import (
	"os"
	"testing"
)

// BenchmarkMatch: the matching ratelimitsvc does per request, on the
// descriptors of its benchmark (a key's default, a key_value with a nested
// default) and a share_threshold wildcard, then ApplyReplaces over them.
func BenchmarkMatch(b *testing.B) {
	c, err := Load(Options{}, Source{Name: "bench.yaml", Data: []byte(`
domain: test
descriptors:
  - key: generic_key
    value: api
    rate_limit: {unit: minute, requests_per_unit: 3}
    descriptors:
      - key: user_id
        rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    value: "/files/*"
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: path
    rate_limit: {unit: hour, requests_per_unit: 5}
`)})
	if err != nil {
		b.Fatal(err)
	}
	d := c.Domain("test")
	reqs := [][]Entry{
		{{"path", "/bench-1"}},
		{{"generic_key", "api"}, {"user_id", "1"}},
		{{"path", "/files/a.pdf"}},
	}
	ms := make([]*Match, len(reqs))
	b.ReportAllocs()
	for b.Loop() {
		for i, es := range reqs {
			ms[i] = d.Match(es)
		}
		if out := ApplyReplaces(ms); out[0] == nil || out[1] == nil || out[2] == nil {
			b.Fatal("no match")
		}
	}
}

// BenchmarkLoad: the reference service's two example files loaded as
// DESCRIPTORS_DIR loads them.
func BenchmarkLoad(b *testing.B) {
	var srcs []Source
	for _, name := range []string{"config.yaml", "example.yaml"} {
		data, err := os.ReadFile(examples + name)
		if err != nil {
			b.Fatal(err)
		}
		srcs = append(srcs, Source{Name: name, Data: data})
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Load(Options{}, srcs...); err != nil {
			b.Fatal(err)
		}
	}
}
