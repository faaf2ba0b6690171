package descriptors

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDump(t *testing.T) {
	cases := []struct {
		name  string
		files []string
		want  string
	}{
		{"upstream basic config", []string{upstream + "basic_config.yaml"}, "" +
			"test-domain.key1_value1.subkey1: unit=SECOND requests_per_unit=5, shadow_mode: false\n" +
			"test-domain.key1_value1.subkey1_subvalue1: unit=SECOND requests_per_unit=10, shadow_mode: false\n" +
			"test-domain.key2: unit=MINUTE requests_per_unit=20, shadow_mode: false\n" +
			"test-domain.key2_value2: unit=MINUTE requests_per_unit=30, shadow_mode: false\n" +
			"test-domain.key3: unit=HOUR requests_per_unit=1, shadow_mode: false\n" +
			"test-domain.key4: unit=DAY requests_per_unit=1, shadow_mode: false\n" +
			"test-domain.key5_value5: unit=DAY requests_per_unit=15, shadow_mode: false\n" +
			"test-domain.key5_value5.subkey5_subvalue5: unit=DAY requests_per_unit=25, shadow_mode: false\n" +
			"test-domain.key6: unit=UNKNOWN requests_per_unit=0, shadow_mode: false\n" +
			"test-domain.key7: unit=MINUTE requests_per_unit=70, shadow_mode: false\n"},
		{"shadow mode, two domains sorted", []string{runtime + "config/basic.yaml", upstream + "shadowmode_config.yaml"}, "" +
			"basic.key1: unit=SECOND requests_per_unit=50, shadow_mode: false\n" +
			"basic.key1_local: unit=SECOND requests_per_unit=50, shadow_mode: false\n" +
			"basic.one_per_minute: unit=MINUTE requests_per_unit=1, shadow_mode: false\n" +
			"test-domain.key1_value1.subkey1: unit=SECOND requests_per_unit=5, shadow_mode: false\n" +
			"test-domain.key1_value1.subkey1_subvalue1: unit=SECOND requests_per_unit=10, shadow_mode: true\n" +
			"test-domain.key2: unit=MINUTE requests_per_unit=20, shadow_mode: true\n" +
			"test-domain.key2_value2: unit=MINUTE requests_per_unit=30, shadow_mode: false\n"},
		{"Throttle's extensions follow when set", []string{ours + "token_bucket.yaml"}, "" +
			"tb.bucket: unit=MINUTE requests_per_unit=60, shadow_mode: false, algorithm: token_bucket, refill_rate: 0.5\n" +
			"tb.fixed_500: unit=WEEK requests_per_unit=7, shadow_mode: false\n" +
			"tb.onoff_on: unit=YEAR requests_per_unit=365, shadow_mode: false\n" +
			"tb.sliding: unit=HOUR requests_per_unit=100, shadow_mode: false, algorithm: sliding_window\n"},
		{"accuracy approximate", []string{ours + "approximate.yaml"}, "" +
			"test-domain.key1: unit=MINUTE requests_per_unit=2000, shadow_mode: false, accuracy: approximate\n" +
			"test-domain.key2: unit=SECOND requests_per_unit=100, shadow_mode: false, algorithm: sliding_window, accuracy: approximate\n" +
			"test-domain.key2: unit=HOUR requests_per_unit=10000, shadow_mode: false\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := mustLoad(t, Options{}, tc.files...).Dump()
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Dump (-want +got):\n%s", diff)
			}
		})
	}
	if got := (*Config)(nil).Dump(); got != "" {
		t.Errorf("nil Config dumps %q, want empty", got)
	}
}

// TestDumpInShadowMode: under SHADOW_MODE every limit is in shadow mode,
// and every line says so; the rest of each line is Dump's.
func TestDumpInShadowMode(t *testing.T) {
	c := mustLoad(t, Options{}, runtime+"config/basic.yaml", upstream+"shadowmode_config.yaml")
	want := strings.ReplaceAll(c.Dump(), "shadow_mode: false", "shadow_mode: true")
	if got := c.DumpInShadowMode(); got != want || strings.Count(got, "shadow_mode: true") != 7 {
		t.Errorf("DumpInShadowMode:\n%s\nwant\n%s", got, want)
	}
	if got := (*Config)(nil).DumpInShadowMode(); got != "" {
		t.Errorf("nil Config dumps %q, want empty", got)
	}
}

func TestDumpQuotaMode(t *testing.T) {
	c := mustLoad(t, Options{}, examples+"example.yaml")
	want := "rl.service_service_1: unit=MINUTE requests_per_unit=1, shadow_mode: false, quota_mode: true\n"
	got := c.Dump()
	if !containsLine(got, want) {
		t.Errorf("Dump lacks %q:\n%s", want, got)
	}
	if want := "rl.foo.baz_shady: unit=MINUTE requests_per_unit=3, shadow_mode: true\n"; !containsLine(got, want) {
		t.Errorf("Dump lacks %q:\n%s", want, got)
	}
}

// containsLine reports whether line (ending in '\n') is one of text's lines.
func containsLine(text, line string) bool { return strings.Contains("\n"+text, "\n"+line) }

// TestMatchConfigKey: ConfigKey is the configured path, without the request
// values detailed_metric and value_to_metric put into StatsKey.
func TestMatchConfigKey(t *testing.T) {
	c := mustLoad(t, Options{}, upstream+"basic_config.yaml")
	cases := []struct {
		kv                []string
		stats, configured string
	}{
		{kv("key7", "abc"), "test-domain.key7_abc", "test-domain.key7"},
		{kv("key1", "value1", "subkey1", "x"), "test-domain.key1_value1.subkey1", "test-domain.key1_value1.subkey1"},
		{kv("key2", "value2"), "test-domain.key2_value2", "test-domain.key2_value2"},
	}
	for _, tc := range cases {
		m := c.Match("test-domain", entries(tc.kv...))
		if m == nil || m.StatsKey != tc.stats || m.ConfigKey != tc.configured {
			t.Errorf("Match(%q): %+v; want StatsKey %q, ConfigKey %q", tc.kv, m, tc.stats, tc.configured)
		}
	}

	v, err := Load(Options{}, Source{Name: "vtm.yaml", Data: []byte(`
domain: d
descriptors:
  - key: path
    value: /api/*
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 6}
`)})
	must(t, err)
	if m := v.Match("d", entries("path", "/api/users")); m == nil || m.StatsKey != "d.path_/api/users" || m.ConfigKey != "d.path_/api/*" {
		t.Errorf("value_to_metric wildcard: %+v; want StatsKey d.path_/api/users, ConfigKey d.path_/api/*", m)
	}
}
