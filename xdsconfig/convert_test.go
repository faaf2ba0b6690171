package xdsconfig

import (
	"regexp"
	"strings"
	"testing"
	"time"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/throttle-rl/throttle/descriptors"
)

// anys packs cfgs as a response carries them.
func anys(t *testing.T, cfgs ...proto.Message) []*anypb.Any {
	t.Helper()
	out := make([]*anypb.Any, len(cfgs))
	for i, c := range cfgs {
		a, err := anypb.New(c)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = a
	}
	return out
}

func limit(unit rlsconf.RateLimitUnit, n uint32) *rlsconf.RateLimitPolicy {
	return &rlsconf.RateLimitPolicy{Unit: unit, RequestsPerUnit: n}
}

// everyField is a RateLimitConfig that sets every field of the proto.
func everyField(t testing.TB) *rlsconf.RateLimitConfig {
	t.Helper()
	meta, err := structpb.NewStruct(map[string]any{"team": "payments", "tier": 2.0, "tags": []any{"a", true}})
	if err != nil {
		t.Fatal(err)
	}
	return &rlsconf.RateLimitConfig{
		Name:   "gateway",
		Domain: "edge",
		Descriptors: []*rlsconf.RateLimitDescriptor{
			{Key: "remote_address", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: 3, Name: "per-ip"},
				DetailedMetric: true, ShadowMode: true, QuotaMode: true, Metadata: meta},
			{Key: "path", Value: "/admin", RateLimit: &rlsconf.RateLimitPolicy{Unlimited: true}},
			{Key: "user", Value: "yes", Descriptors: []*rlsconf.RateLimitDescriptor{
				{Key: "plan", Value: "500", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_WEEK, RequestsPerUnit: 7,
					Replaces: []*rlsconf.RateLimitReplace{{Name: "per-ip"}}}},
			}},
			{Key: "day", RateLimit: limit(rlsconf.RateLimitUnit_DAY, 1)},
			{Key: "month", RateLimit: limit(rlsconf.RateLimitUnit_MONTH, 0)},
			{Key: "year", RateLimit: limit(rlsconf.RateLimitUnit_YEAR, 4294967295)},
			{Key: "second", RateLimit: limit(rlsconf.RateLimitUnit_SECOND, 1)},
			{Key: "hour", RateLimit: limit(rlsconf.RateLimitUnit_HOUR, 1)},
		},
	}
}

// TestFileOf: every field of the proto becomes its field of the descriptor
// file's model, the unit by its enum name but an unlimited limit's UNKNOWN,
// metadata's whole numbers as int, as in a file.
func TestFileOf(t *testing.T) {
	perUnit := func(unit string, n uint32) *descriptors.Limit {
		return &descriptors.Limit{Unit: unit, RequestsPerUnit: n}
	}
	want := &descriptors.File{Name: `RateLimitConfig "gateway"`, Domain: "edge", Descriptors: []descriptors.Descriptor{
		{Key: "remote_address", RateLimit: &descriptors.Limit{Unit: "MINUTE", RequestsPerUnit: 3, Name: "per-ip"},
			DetailedMetric: true, ShadowMode: true, QuotaMode: true,
			Metadata: map[string]any{"team": "payments", "tier": 2, "tags": []any{"a", true}}},
		{Key: "path", Value: "/admin", RateLimit: &descriptors.Limit{Unlimited: true}},
		{Key: "user", Value: "yes", Descriptors: []descriptors.Descriptor{
			{Key: "plan", Value: "500", RateLimit: &descriptors.Limit{Unit: "WEEK", RequestsPerUnit: 7, Replaces: []string{"per-ip"}}},
		}},
		{Key: "day", RateLimit: perUnit("DAY", 1)},
		{Key: "month", RateLimit: perUnit("MONTH", 0)},
		{Key: "year", RateLimit: perUnit("YEAR", 4294967295)},
		{Key: "second", RateLimit: perUnit("SECOND", 1)},
		{Key: "hour", RateLimit: perUnit("HOUR", 1)},
	}}
	if diff := cmp.Diff(want, fileOf(`RateLimitConfig "gateway"`, everyField(t))); diff != "" {
		t.Errorf("fileOf (-want +got):\n%s", diff)
	}
}

// TestLoadEveryField: a resource means what the same descriptor file means.
func TestLoadEveryField(t *testing.T) {
	c, err := Load(descriptors.Options{}, anys(t, everyField(t)))
	if err != nil {
		t.Fatal(err)
	}
	m := c.Match("edge", []descriptors.Entry{{Key: "remote_address", Value: "10.0.0.1"}})
	if m == nil {
		t.Fatal("remote_address matches nothing")
	}
	got := struct {
		Limit                   descriptors.RateLimit
		Shadow, Detailed, Quota bool
		Metadata                map[string]any
		StatsKey                string
	}{m.Limit, m.ShadowMode, m.DetailedMetric, m.QuotaMode, m.Metadata, m.StatsKey}
	want := got
	want.Limit = descriptors.RateLimit{Unit: descriptors.Minute, RequestsPerUnit: 3, Name: "per-ip"}
	want.Shadow, want.Detailed, want.Quota = true, true, true
	want.Metadata = map[string]any{"team": "payments", "tier": 2, "tags": []any{"a", true}}
	want.StatsKey = "edge.remote_address_10.0.0.1"
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("remote_address (-want +got):\n%s", d)
	}
	if m := c.Match("edge", []descriptors.Entry{{Key: "path", Value: "/admin"}}); m == nil || !m.Limit.Unlimited {
		t.Errorf("path /admin: %+v, want unlimited", m)
	}
	nested := c.Match("edge", []descriptors.Entry{{Key: "user", Value: "yes"}, {Key: "plan", Value: "500"}})
	if nested == nil {
		t.Fatal("user yes › plan 500 matches nothing")
	}
	if want := (descriptors.RateLimit{Unit: descriptors.Week, RequestsPerUnit: 7, Replaces: []string{"per-ip"}}); !cmp.Equal(nested.Limit, want) {
		t.Errorf("user yes › plan 500: %+v, want %+v", nested.Limit, want)
	}
	dump := c.Dump()
	for _, line := range []string{
		"edge.day: unit=DAY requests_per_unit=1, shadow_mode: false",
		"edge.month: unit=MONTH requests_per_unit=0, shadow_mode: false",
		"edge.year: unit=YEAR requests_per_unit=4294967295, shadow_mode: false",
		"edge.second: unit=SECOND requests_per_unit=1, shadow_mode: false",
		"edge.hour: unit=HOUR requests_per_unit=1, shadow_mode: false",
		"edge.path_/admin: unit=UNKNOWN requests_per_unit=0, shadow_mode: false",
	} {
		if !strings.Contains(dump, line+"\n") {
			t.Errorf("Dump has no line %q:\n%s", line, dump)
		}
	}
}

// TestLoadRefuses: a response that would not load as files is refused
// whole, the reason naming the resource and the place in it, with no line.
func TestLoadRefuses(t *testing.T) {
	good := &rlsconf.RateLimitConfig{Name: "good", Domain: "edge", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "k", RateLimit: limit(rlsconf.RateLimitUnit_SECOND, 1)}}}
	for _, tt := range []struct {
		name string
		opts descriptors.Options
		res  []proto.Message
		want string
	}{
		{name: "unknown unit", res: []proto.Message{&rlsconf.RateLimitConfig{Name: "eg", Domain: "edge",
			Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "k", RateLimit: limit(rlsconf.RateLimitUnit_UNKNOWN, 5)}}}},
			want: `RateLimitConfig "eg": domain "edge" › descriptors[0] › rate_limit: invalid rate limit unit 'UNKNOWN'`},
		{name: "unit number the proto does not know", res: []proto.Message{&rlsconf.RateLimitConfig{Name: "eg", Domain: "edge",
			Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "k", RateLimit: limit(42, 5)}}}},
			want: `RateLimitConfig "eg": domain "edge" › descriptors[0] › rate_limit: invalid rate limit unit '42'`},
		{name: "unit with unlimited", res: []proto.Message{&rlsconf.RateLimitConfig{Name: "eg", Domain: "edge",
			Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "k", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_HOUR, Unlimited: true}}}}},
			want: `RateLimitConfig "eg": domain "edge" › descriptors[0] › rate_limit: should not specify rate limit unit when unlimited`},
		{name: "duplicate descriptor", res: []proto.Message{&rlsconf.RateLimitConfig{Name: "eg", Domain: "edge",
			Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "k", Value: "v"}, {Key: "k", Value: "v"}}}},
			want: `RateLimitConfig "eg": domain "edge" › descriptors[1]: duplicate descriptor composite key 'edge.k_v'`},
		{name: "empty domain", res: []proto.Message{&rlsconf.RateLimitConfig{Name: "eg"}},
			want: `RateLimitConfig "eg": config file cannot have empty domain`},
		{name: "domain in two resources", res: []proto.Message{good, proto.Clone(good).(*rlsconf.RateLimitConfig)},
			want: `RateLimitConfig "good": duplicate domain 'edge' in config file`},
		{name: "replaces itself", res: []proto.Message{&rlsconf.RateLimitConfig{Name: "eg", Domain: "edge",
			Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "k", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_SECOND, RequestsPerUnit: 1,
				Name: "n", Replaces: []*rlsconf.RateLimitReplace{{Name: "n"}}}}}}},
			want: `RateLimitConfig "eg": domain "edge" › descriptors[0] › rate_limit: replaces should not contain name of same descriptor`},
		// The input-size rule of every door (package inputsize).
		{name: "domain over 1024 bytes", res: []proto.Message{&rlsconf.RateLimitConfig{Name: "eg", Domain: strings.Repeat("d", 2000)}},
			want: `RateLimitConfig "eg": domain is 2000 bytes, longer than the 1024 allowed`},
		{name: "key over 1024 bytes", res: []proto.Message{good, &rlsconf.RateLimitConfig{Name: "eg", Domain: "other",
			Descriptors: []*rlsconf.RateLimitDescriptor{{Key: strings.Repeat("k", 1025), RateLimit: limit(rlsconf.RateLimitUnit_SECOND, 1)}}}},
			want: `RateLimitConfig "eg": descriptors[0] › key is 1025 bytes, longer than the 1024 allowed`},
		{name: "nested value over 1024 bytes", res: []proto.Message{&rlsconf.RateLimitConfig{Name: "eg", Domain: "edge",
			Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "a"}, {Key: "b", Descriptors: []*rlsconf.RateLimitDescriptor{
				{Key: "c", Value: "ok"}, {Key: "d", Value: strings.Repeat("v", 512<<10), RateLimit: limit(rlsconf.RateLimitUnit_YEAR, 1)}}}}}},
			want: `RateLimitConfig "eg": descriptors[1] › descriptors[1] › value is 524288 bytes, longer than the 1024 allowed`},
		{name: "not a RateLimitConfig", res: []proto.Message{wrapperspb.String("x")},
			want: `resource 0 (type.googleapis.com/google.protobuf.StringValue) is not a RateLimitConfig`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(tt.opts, anys(t, tt.res...))
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("Load: %v\nwant %s", err, tt.want)
			}
		})
	}
}

// TestLoadAtSizeCaps: a domain, key and value of 1024 bytes load.
func TestLoadAtSizeCaps(t *testing.T) {
	domain, key, value := strings.Repeat("d", 1024), strings.Repeat("k", 1024), strings.Repeat("v", 1024)
	c, err := Load(descriptors.Options{}, anys(t, &rlsconf.RateLimitConfig{Name: "eg", Domain: domain,
		Descriptors: []*rlsconf.RateLimitDescriptor{{Key: key, Value: value, RateLimit: limit(rlsconf.RateLimitUnit_SECOND, 1)}}}))
	if err != nil {
		t.Fatal(err)
	}
	if m := c.Match(domain, []descriptors.Entry{{Key: key, Value: value}}); m == nil || m.Limit.RequestsPerUnit != 1 {
		t.Errorf("the descriptor at the caps matches %+v, want its limit", m)
	}
}

// TestLoadMergeDomains: with MergeDomains, two resources describe one
// domain, as two files do; without it, they may not.
func TestLoadMergeDomains(t *testing.T) {
	a := &rlsconf.RateLimitConfig{Name: "a", Domain: "edge", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "x", RateLimit: limit(rlsconf.RateLimitUnit_SECOND, 1)}}}
	b := &rlsconf.RateLimitConfig{Name: "b", Domain: "edge", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "y", RateLimit: limit(rlsconf.RateLimitUnit_SECOND, 2)}}}
	c, err := Load(descriptors.Options{MergeDomains: true}, anys(t, b, a))
	if err != nil {
		t.Fatal(err)
	}
	want := "edge.x: unit=SECOND requests_per_unit=1, shadow_mode: false\nedge.y: unit=SECOND requests_per_unit=2, shadow_mode: false\n"
	if got := c.Dump(); got != want {
		t.Errorf("Dump:\n%s\nwant:\n%s", got, want)
	}
	// In name order whatever order they came in: b is the duplicate.
	if _, err := Load(descriptors.Options{}, anys(t, b, a)); err == nil || !strings.HasPrefix(err.Error(), `RateLimitConfig "b": duplicate domain 'edge'`) {
		t.Errorf("Load without MergeDomains: %v", err)
	}
}

// TestLoadRefusesAsAFile: a mistake in a resource is refused with the
// message the same mistake gets in a descriptor YAML file, at the same
// place: only the prefix differs, the resource's name for the file's name
// and line. The overlay's reserve is checked as a file's reserve.
func TestLoadRefusesAsAFile(t *testing.T) {
	one := func(ds ...*rlsconf.RateLimitDescriptor) *rlsconf.RateLimitConfig {
		return &rlsconf.RateLimitConfig{Name: "eg", Domain: "edge", Descriptors: ds}
	}
	selfReplace := &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_SECOND, RequestsPerUnit: 1, Name: "n", Replaces: []*rlsconf.RateLimitReplace{{Name: "n"}, {}}}
	for _, tt := range []struct {
		name    string
		res     *rlsconf.RateLimitConfig
		overlay string // of domain edge, ttl up to 2m
		yaml    string // the same mistake in a file
	}{
		{name: "unit not set", res: one(&rlsconf.RateLimitDescriptor{Key: "k", RateLimit: limit(rlsconf.RateLimitUnit_UNKNOWN, 5)}),
			yaml: "domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: UNKNOWN, requests_per_unit: 5}\n"},
		{name: "unit the proto does not know", res: one(&rlsconf.RateLimitDescriptor{Key: "k", RateLimit: limit(42, 5)}),
			yaml: "domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: 42, requests_per_unit: 5}\n"},
		{name: "unit with unlimited", res: one(&rlsconf.RateLimitDescriptor{Key: "k", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_DAY, Unlimited: true}}),
			yaml: "domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, unlimited: true}\n"},
		{name: "empty key, duplicate nested key", res: one(&rlsconf.RateLimitDescriptor{Value: "v"}, &rlsconf.RateLimitDescriptor{Key: "a", Descriptors: []*rlsconf.RateLimitDescriptor{
			{Key: "b", Value: "1"}, {Key: "b", Value: "1", RateLimit: limit(rlsconf.RateLimitUnit_SECOND, 1)}}}),
			yaml: "domain: edge\ndescriptors:\n  - value: v\n  - key: a\n    descriptors:\n      - {key: b, value: '1'}\n      - {key: b, value: '1', rate_limit: {unit: second, requests_per_unit: 1}}\n"},
		{name: "replaces itself", res: one(&rlsconf.RateLimitDescriptor{Key: "k", RateLimit: selfReplace}),
			yaml: "domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, name: n, replaces: [{name: n}, {name: ''}]}\n"},
		{name: "empty domain", res: &rlsconf.RateLimitConfig{Name: "eg"}, yaml: "descriptors: []\n"},
		{name: "reserve longer than MAX_RESERVATION_TTL",
			res: one(&rlsconf.RateLimitDescriptor{Key: "route", Value: "r", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "tenant",
				Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "request", RateLimit: limit(rlsconf.RateLimitUnit_HOUR, 100)}}}}}),
			overlay: "reservations: [{domain: edge, handle: request, hits: 10, ttl: 90s}]",
			yaml: "domain: edge\ndescriptors:\n  - key: route\n    value: r\n    descriptors:\n      - key: tenant\n" +
				"        rate_limit: {unit: HOUR, requests_per_unit: 100, reserve: {hits: 10, ttl: 90s, handle: request}}\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var res *Reservations
			if tt.overlay != "" {
				var err error
				if res, err = ParseReservations("overlay.yaml", []byte(tt.overlay), 2*time.Minute); err != nil {
					t.Fatal(err)
				}
			}
			_, xerr := loadConfigs(descriptors.Options{}, []*rlsconf.RateLimitConfig{tt.res}, res, nil)
			_, ferr := descriptors.Load(descriptors.Options{}, descriptors.Source{Name: "eg.yaml", Data: []byte(tt.yaml)})
			if xerr == nil || ferr == nil {
				t.Fatalf("resource: %v\nfile: %v\nwant both refused", xerr, ferr)
			}
			got := withoutPrefix(t, xerr, regexp.MustCompile(`^RateLimitConfig "eg": `))
			want := withoutPrefix(t, ferr, regexp.MustCompile(`^eg\.yaml:[0-9]+: `))
			if got != want {
				t.Errorf("resource:\n%v\nfile:\n%v\nwant the same after the prefix", xerr, ferr)
			}
		})
	}
}

// withoutPrefix is the text of err, prefix taken off each line; every line
// must have it.
func withoutPrefix(t *testing.T, err error, prefix *regexp.Regexp) string {
	t.Helper()
	lines := strings.Split(err.Error(), "\n")
	for i, l := range lines {
		if !prefix.MatchString(l) {
			t.Errorf("%q does not start with %s", l, prefix)
		}
		lines[i] = prefix.ReplaceAllString(l, "")
	}
	return strings.Join(lines, "\n")
}
