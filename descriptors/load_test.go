package descriptors

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/throttle-rl/throttle/algorithms"
)

const (
	upstream = "testdata/test/config/"
	runtime  = "testdata/test/integration/runtime/current/ratelimit/"
	examples = "testdata/examples/ratelimit/config/"
	ours     = "testdata/throttle/"
)

// loadFixtures loads files as upstream's unit tests do: errors name each file by
// its bare name.
func loadFixtures(t *testing.T, opts Options, paths ...string) (*Config, error) {
	t.Helper()
	var srcs []Source
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		srcs = append(srcs, Source{Name: filepath.Base(p), Data: data})
	}
	return Load(opts, srcs...)
}

func mustLoad(t *testing.T, opts Options, paths ...string) *Config {
	t.Helper()
	c, err := loadFixtures(t, opts, paths...)
	if err != nil {
		t.Fatalf("load %v: %v", paths, err)
	}
	return c
}

func TestLoadRefuses(t *testing.T) {
	tests := []struct {
		files []string
		merge bool
		want  string
	}{
		// Upstream's bad fixtures: upstream's message, with the path inside the file.
		{files: []string{upstream + "bad_limit_unit.yaml"},
			want: `bad_limit_unit.yaml:5: domain "test-domain" › descriptors[0] › rate_limit: invalid rate limit unit 'foo'`},
		{files: []string{upstream + "bad_yaml.yaml"},
			want: `bad_yaml.yaml:1: error loading config file: yaml: the quoted string opened at line 1, column 1 is not closed: found unexpected end of stream at line 2, column 1`},
		{files: []string{upstream + "duplicate_key.yaml"},
			want: `duplicate_key.yaml:6: domain "test-domain" › descriptors[1]: duplicate descriptor composite key 'test-domain.key1_value1'`},
		{files: []string{upstream + "empty_domain.yaml"},
			want: `empty_domain.yaml:1: config file cannot have empty domain`},
		{files: []string{upstream + "empty_key.yaml"},
			want: `empty_key.yaml:3: domain "test-domain" › descriptors[0]: descriptor has empty key`},
		{files: []string{upstream + "misspelled_key.yaml"},
			want: `misspelled_key.yaml:3: domain "test-domain" › descriptors[0]: config error, unknown key 'ratelimit'`},
		{files: []string{upstream + "misspelled_key2.yaml"},
			want: `misspelled_key2.yaml:5: domain "test-domain" › descriptors[0] › rate_limit: config error, unknown key 'requestsperunit'`},
		{files: []string{upstream + "non_map_list.yaml"},
			want: `non_map_list.yaml:3: domain "test-domain" › descriptors[0]: config error, yaml file contains list of type other than map: a
non_map_list.yaml:4: domain "test-domain" › descriptors[1]: config error, yaml file contains list of type other than map: b
non_map_list.yaml:5: domain "test-domain" › descriptors[2]: config error, yaml file contains list of type other than map: c`},
		{files: []string{upstream + "non_string_key.yaml"},
			want: `non_string_key.yaml:1: config error, key is not of type string: 0.25`},
		{files: []string{upstream + "replaces_empty.yaml"},
			want: `replaces_empty.yaml:7: domain "test-domain" › descriptors[0] › descriptors[0] › rate_limit: should not have an empty replaces entry`},
		{files: []string{upstream + "replaces_self.yaml"},
			want: `replaces_self.yaml:7: domain "test-domain" › descriptors[0] › descriptors[0] › rate_limit: replaces should not contain name of same descriptor`},
		{files: []string{upstream + "unlimited_with_unit.yaml"},
			want: `unlimited_with_unit.yaml:4: domain "test-domain" › descriptors[0] › rate_limit: should not specify rate limit unit when unlimited`},

		// Upstream's pairs.
		{files: []string{upstream + "basic_config.yaml", upstream + "duplicate_domain.yaml"},
			want: `duplicate_domain.yaml:1: duplicate domain 'test-domain' in config file`},
		{files: []string{upstream + "merge_domain_key1.yaml", upstream + "merge_domain_key2.yaml"},
			want: `merge_domain_key2.yaml:2: duplicate domain 'test-domain' in config file`},
		{files: []string{upstream + "merge_domain_key1.yaml", upstream + "merge_domain_key1.yaml"}, merge: true,
			want: `merge_domain_key1.yaml:5: domain "test-domain" › descriptors[0]: duplicate descriptor composite key 'test-domain.key1_value1'`},

		// Throttle's own cases.
		{files: []string{ours + "negative_limit.yaml"},
			want: `negative_limit.yaml:4: domain "test-domain" › descriptors[0] › rate_limit: requests_per_unit must be a whole number between 0 and 4294967295, not -1`},
		{files: []string{ours + "overflow_limit.yaml"},
			want: `overflow_limit.yaml:4: domain "test-domain" › descriptors[0] › rate_limit: requests_per_unit must be a whole number between 0 and 4294967295, not 4294967296`},
		{files: []string{ours + "fractional_limit.yaml"},
			want: `fractional_limit.yaml:4: domain "test-domain" › descriptors[0] › rate_limit: requests_per_unit must be a whole number between 0 and 4294967295, not 2.5`},
		{files: []string{ours + "unknown_top_key.yaml"},
			want: `unknown_top_key.yaml:1: config error, unknown key 'descriptor'`},
		{files: []string{ours + "bad_algorithm.yaml"},
			want: `bad_algorithm.yaml:4: domain "test-domain" › descriptors[0] › rate_limit: unknown algorithm 'leaky_bucket' (want fixed_window, sliding_window, token_bucket or gcra)`},
		{files: []string{ours + "approximate_token_bucket.yaml"},
			want: `approximate_token_bucket.yaml:4: domain "test-domain" › descriptors[0] › rate_limit: accuracy approximate is only for fixed_window and sliding_window, not token_bucket: a token_bucket decides on the state it reads and writes in one step`},
		{files: []string{ours + "rate_limits_same_but_accuracy.yaml"},
			want: `rate_limits_same_but_accuracy.yaml:7: domain "test-domain" › descriptors[0] › rate_limits[1]: same algorithm, requests_per_unit, window and refill_rate as rate_limits[0]: the two would count against one counter`},
		{files: []string{ours + "bad_accuracy.yaml"},
			want: `bad_accuracy.yaml:7: domain "test-domain" › descriptors[0] › rate_limits[1]: unknown accuracy 'roughly' (want exact or approximate)`},
		{files: []string{ours + "refill_nan.yaml"},
			want: `refill_nan.yaml:4: domain "test-domain" › descriptors[0] › rate_limit: refill_rate NaN must be a number between 0 and 1000000000 tokens per second`},
		{files: []string{ours + "refill_negative.yaml"},
			want: `refill_negative.yaml:4: domain "test-domain" › descriptors[0] › rate_limit: refill_rate -2 must be a number between 0 and 1000000000 tokens per second`},
		{files: []string{ours + "refill_without_token_bucket.yaml"},
			want: `refill_without_token_bucket.yaml:4: domain "test-domain" › descriptors[0] › rate_limit: refill_rate is only for algorithm token_bucket, not fixed_window`},
		{files: []string{ours + "refill_with_gcra.yaml"},
			want: `refill_with_gcra.yaml:4: domain "test-domain" › descriptors[0] › rate_limit: refill_rate is only for algorithm token_bucket, not gcra`},
		{files: []string{ours + "gcra_inexact.yaml"},
			want: `gcra_inexact.yaml:6: domain "test-domain" › descriptors[0] › rate_limit: gcra cannot count limit 999999937 per 365 days exactly (the least common multiple of the limit and the window in µs must be below 2^53): choose a rounder limit or window`},
		{files: []string{ours + "share_threshold_no_wildcard.yaml"},
			want: `share_threshold_no_wildcard.yaml:3: domain "test-domain" › descriptors[0]: share_threshold can only be used with wildcard values (containing '*'), but found key 'files_files'`},
		{files: []string{ours + "unlimited_bad_unit.yaml"},
			want: `unlimited_bad_unit.yaml:4: domain "test-domain" › descriptors[0] › rate_limit: invalid rate limit unit 'fortnight'`},
		{files: []string{ours + "missing_unit.yaml"},
			want: `missing_unit.yaml:4: domain "test-domain" › descriptors[0] › rate_limit: invalid rate limit unit ''`},
		{files: []string{ours + "duplicate_field.yaml"},
			want: `duplicate_field.yaml:3: domain "test-domain" › descriptors[0]: config error, key 'key' appears twice`},
		{files: []string{ours + "metadata_not_map.yaml"},
			want: `metadata_not_map.yaml:3: domain "test-domain" › descriptors[0]: metadata must be a map, not [a b]`},
		{files: []string{ours + "bad_bool.yaml"},
			want: `bad_bool.yaml:3: domain "test-domain" › descriptors[0]: shadow_mode must be true or false, not sometimes`},
		// Issue 32: a YAML syntax error at the line of the actual problem,
		// not the start of the block that holds it (yaml.v3's line, which
		// also counted from 0): the '{' left open on line 4, found out on
		// line 5; the key indented wrongly on line 6.
		{files: []string{ours + "unclosed_brace.yaml"},
			want: `unclosed_brace.yaml:4: error loading config file: yaml: the flow mapping '{' opened at line 4, column 17 is not closed: did not find expected ',' or '}' at line 5, column 8`},
		{files: []string{ours + "bad_indentation.yaml"},
			want: `bad_indentation.yaml:6: error loading config file: yaml: did not find expected key at line 6, column 6 (while parsing a block mapping that starts at line 3, column 5)`},
		{files: []string{ours + "top_level_list.yaml"},
			want: `top_level_list.yaml:1: error loading config file: the file must be a map with domain and descriptors, not [map[domain:test-domain]]`},
		{files: []string{ours + "nested_problems.yaml"},
			want: `nested_problems.yaml:6: domain "test-domain" › descriptors[0] › descriptors[0] › rate_limit: invalid rate limit unit 'minutes'
nested_problems.yaml:9: domain "test-domain" › descriptors[0] › descriptors[1]: descriptor has empty key
nested_problems.yaml:10: domain "test-domain" › descriptors[1]: value must be a string, not [1 2]`},
		// Issue 17: rate_limits, unit_multiplier, always_count.
		{files: []string{ours + "rate_limit_and_rate_limits.yaml"},
			want: `rate_limit_and_rate_limits.yaml:3: domain "test-domain" › descriptors[0]: rate_limit and rate_limits cannot both be set: give one limit in rate_limit, or several in rate_limits`},
		{files: []string{ours + "rate_limits_empty.yaml"},
			want: `rate_limits_empty.yaml:4: domain "test-domain" › descriptors[0] › rate_limits: rate_limits must list at least one limit`},
		{files: []string{ours + "rate_limits_not_list.yaml"},
			want: `rate_limits_not_list.yaml:4: domain "test-domain" › descriptors[0] › rate_limits: rate_limits must be a list of rate_limit maps, not map[requests_per_unit:1 unit:second]`},
		{files: []string{ours + "rate_limits_bad_element.yaml"},
			want: `rate_limits_bad_element.yaml:7: domain "test-domain" › descriptors[0] › rate_limits[1]: invalid rate limit unit 'fortnight'
rate_limits_bad_element.yaml:9: domain "test-domain" › descriptors[0] › rate_limits[2]: config error, unknown key 'requestsperunit'`},
		{files: []string{ours + "rate_limits_same_limit.yaml"},
			want: `rate_limits_same_limit.yaml:8: domain "test-domain" › descriptors[0] › rate_limits[1]: same algorithm, requests_per_unit, window and refill_rate as rate_limits[0]: the two would count against one counter`},
		{files: []string{ours + "rate_limits_same_name.yaml"},
			want: `rate_limits_same_name.yaml:8: domain "test-domain" › descriptors[0] › rate_limits[1]: name 'user_limit' is already the name of rate_limits[0]`},
		{files: []string{ours + "rate_limits_unlimited.yaml"},
			want: `rate_limits_unlimited.yaml:7: domain "test-domain" › descriptors[0] › rate_limits[1]: unlimited cannot be combined with other limits of the same descriptor`},
		{files: []string{ours + "rate_limits_replaces_sibling.yaml"},
			want: `rate_limits_replaces_sibling.yaml:8: domain "test-domain" › descriptors[0] › rate_limits[1]: replaces should not contain name of same descriptor`},
		{files: []string{ours + "rate_limits_too_many.yaml"},
			want: `rate_limits_too_many.yaml:21: domain "test-domain" › descriptors[0] › rate_limits[16]: a descriptor has at most 16 limits, not 17`},
		{files: []string{ours + "unit_multiplier_zero.yaml"},
			want: `unit_multiplier_zero.yaml:4: domain "test-domain" › descriptors[0] › rate_limit: unit_multiplier must be a whole number between 1 and 4294967295, not 0`},
		{files: []string{ours + "unit_multiplier_too_long.yaml"},
			want: `unit_multiplier_too_long.yaml:4: domain "test-domain" › descriptors[0] › rate_limit: unit_multiplier 400 makes a window of 400 days, longer than the longest window, 366 days`},
		{files: []string{ours + "unit_multiplier_unlimited.yaml"},
			want: `unit_multiplier_unlimited.yaml:4: domain "test-domain" › descriptors[0] › rate_limit: should not specify rate limit unit when unlimited`},
		{files: []string{ours + "always_count_unlimited.yaml"},
			want: `always_count_unlimited.yaml:4: domain "test-domain" › descriptors[0] › rate_limit: always_count has no meaning for an unlimited limit, which counts nothing`},
		// Issue 43: reserve.
		{files: []string{ours + "reserve_too_many_hits.yaml"},
			want: `reserve_too_many_hits.yaml:7: domain "test-domain" › descriptors[0] › rate_limit › reserve: reserve hits 101 must be between 1 and the limit, 100`},
		{files: []string{ours + "reserve_ttl_too_long.yaml"},
			want: `reserve_ttl_too_long.yaml:7: domain "test-domain" › descriptors[0] › rate_limit › reserve: reserve ttl 2m0s is longer than MAX_RESERVATION_TTL, 1m0s`},
		{files: []string{ours + "reserve_bad_ttl.yaml"},
			want: `reserve_bad_ttl.yaml:7: domain "test-domain" › descriptors[0] › rate_limit › reserve: ttl "soon" must be a number of seconds or a duration such as 60s or 1m`},
		{files: []string{ours + "reserve_no_handle.yaml"},
			want: `reserve_no_handle.yaml:7: domain "test-domain" › descriptors[0] › rate_limit › reserve: reserve needs a handle: the key of the descriptor entry whose value names a request (as request_id)`},
		{files: []string{ours + "reserve_unknown_key.yaml"},
			want: `reserve_unknown_key.yaml:7: domain "test-domain" › descriptors[0] › rate_limit › reserve: config error, unknown key 'amount'`},
		{files: []string{ours + "reserve_unlimited.yaml"},
			want: `reserve_unlimited.yaml:6: domain "test-domain" › descriptors[0] › rate_limit › reserve: reserve has no meaning for an unlimited limit, which counts nothing`},
		{files: []string{ours + "reserve_two_handles.yaml"},
			want: `reserve_two_handles.yaml:8: domain "test-domain" › descriptors[0] › rate_limits[1]: reserve handle 'trace_id' is not rate_limits[0]'s, 'request_id': the limits of one descriptor reserve under one handle`},
		// Every problem is reported, not only the first: a file with a
		// problem is still checked for duplicates, within itself and
		// against the other files.
		{files: []string{ours + "unit_then_duplicate.yaml"},
			want: `unit_then_duplicate.yaml:5: domain "test-domain" › descriptors[0] › rate_limit: invalid rate limit unit 'fortnight'
unit_then_duplicate.yaml:12: domain "test-domain" › descriptors[2]: duplicate descriptor composite key 'test-domain.user'`},
		// A descriptor whose value cannot be read is no duplicate of a
		// sibling; its children are still checked.
		{files: []string{ours + "unreadable_value.yaml"},
			want: `unreadable_value.yaml:3: domain "test-domain" › descriptors[0]: value must be a string, not [alice bob]
unreadable_value.yaml:8: domain "test-domain" › descriptors[0] › descriptors[1]: duplicate descriptor composite key 'test-domain.user.path'`},
		// Every file is checked: problems in two files are all reported,
		// file by file.
		{files: []string{upstream + "empty_key.yaml", ours + "missing_unit.yaml"},
			want: `empty_key.yaml:3: domain "test-domain" › descriptors[0]: descriptor has empty key
missing_unit.yaml:1: duplicate domain 'test-domain' in config file
missing_unit.yaml:4: domain "test-domain" › descriptors[0] › rate_limit: invalid rate limit unit ''`},
		{files: []string{ours + "unit_then_duplicate.yaml", upstream + "duplicate_key.yaml"}, merge: true,
			want: `unit_then_duplicate.yaml:5: domain "test-domain" › descriptors[0] › rate_limit: invalid rate limit unit 'fortnight'
unit_then_duplicate.yaml:12: domain "test-domain" › descriptors[2]: duplicate descriptor composite key 'test-domain.user'
duplicate_key.yaml:6: domain "test-domain" › descriptors[1]: duplicate descriptor composite key 'test-domain.key1_value1'`},
	}
	for _, tt := range tests {
		var names []string
		for _, f := range tt.files {
			names = append(names, filepath.Base(f))
		}
		t.Run(strings.Join(names, "+"), func(t *testing.T) {
			c, err := loadFixtures(t, Options{MergeDomains: tt.merge}, tt.files...)
			if err == nil {
				t.Fatalf("loaded %d domains, want error %q", c.DomainCount(), tt.want)
			}
			if got := err.Error(); got != tt.want {
				t.Errorf("error:\n got %s\nwant %s", got, tt.want)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.File != names[len(names)-1] && ce.File != names[0] {
				t.Errorf("error %v: no *ConfigError naming the file", err)
			}
		})
	}
}

// TestLoadScope: scope: global loads only with Options.GlobalScope (a
// server with GLOBAL_REDIS_URL); it means accuracy approximate, refuses
// exact, other algorithms and unlimited; regional is the default.
func TestLoadScope(t *testing.T) {
	c := mustLoad(t, Options{GlobalScope: true}, ours+"global.yaml")
	d := c.Domain("test-domain")
	tenant := d.root.find("tenant", "").limits
	user := d.root.find("user", "").limits
	want := []RateLimit{{Unit: Minute, RequestsPerUnit: 6000, Accuracy: algorithms.Approximate, Global: true}}
	if diff := cmp.Diff(want, tenant); diff != "" {
		t.Errorf("tenant's limit (-want +got):\n%s", diff)
	}
	want = []RateLimit{
		{Unit: Second, RequestsPerUnit: 10, Algorithm: algorithms.SlidingWindow, Accuracy: algorithms.Approximate, Global: true},
		{Unit: Second, RequestsPerUnit: 100},
		{Unit: Hour, RequestsPerUnit: 1000},
	}
	if diff := cmp.Diff(want, user); diff != "" {
		t.Errorf("user's limits (-want +got):\n%s", diff)
	}
	wantDump := "" +
		"test-domain.tenant: unit=MINUTE requests_per_unit=6000, shadow_mode: false, accuracy: approximate, scope: global\n" +
		"test-domain.user: unit=SECOND requests_per_unit=10, shadow_mode: false, algorithm: sliding_window, accuracy: approximate, scope: global\n" +
		"test-domain.user: unit=SECOND requests_per_unit=100, shadow_mode: false\n" +
		"test-domain.user: unit=HOUR requests_per_unit=1000, shadow_mode: false\n"
	if diff := cmp.Diff(wantDump, c.Dump()); diff != "" {
		t.Errorf("Dump (-want +got):\n%s", diff)
	}
	if el, err := tenant[0].EngineLimit(); err != nil || !el.Global || el.Accuracy != algorithms.Approximate {
		t.Errorf("tenant's engine limit %+v, %v; want global and approximate", el, err)
	}

	tests := []struct {
		file   string
		global bool // Options.GlobalScope
		want   string
	}{
		{"global.yaml", false, `global.yaml:4: domain "test-domain" › descriptors[0] › rate_limit: scope: global needs GLOBAL_REDIS_URL, the Redis every region shares (this server has none)
global.yaml:10: domain "test-domain" › descriptors[1] › rate_limits[0]: scope: global needs GLOBAL_REDIS_URL, the Redis every region shares (this server has none)`},
		{"global_exact.yaml", true, `global_exact.yaml:4: domain "test-domain" › descriptors[0] › rate_limit: scope global is decided from memory with leases of the global budget: its accuracy is approximate, not exact (leave accuracy out, or write approximate)`},
		{"global_exact.yaml", false, `global_exact.yaml:4: domain "test-domain" › descriptors[0] › rate_limit: scope: global needs GLOBAL_REDIS_URL, the Redis every region shares (this server has none)
global_exact.yaml:4: domain "test-domain" › descriptors[0] › rate_limit: scope global is decided from memory with leases of the global budget: its accuracy is approximate, not exact (leave accuracy out, or write approximate)`},
		{"global_token_bucket.yaml", true, `global_token_bucket.yaml:7: domain "test-domain" › descriptors[0] › rate_limits[1]: scope global is only for fixed_window and sliding_window, not token_bucket: a global limit is decided from memory with leases of the global budget, and a token_bucket decides on the state it reads and writes in one step`},
		{"global_unlimited.yaml", true, `global_unlimited.yaml:4: domain "test-domain" › descriptors[0] › rate_limit: scope global has no meaning for an unlimited limit, which counts nothing`},
		{"bad_scope.yaml", true, `bad_scope.yaml:4: domain "test-domain" › descriptors[0] › rate_limit: unknown scope 'planet' (want regional or global)`},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s global %t", tt.file, tt.global), func(t *testing.T) {
			c, err := loadFixtures(t, Options{GlobalScope: tt.global}, ours+tt.file)
			if err == nil {
				t.Fatalf("loaded %d domains, want error %q", c.DomainCount(), tt.want)
			}
			if got := err.Error(); got != tt.want {
				t.Errorf("error:\n got %s\nwant %s", got, tt.want)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
		})
	}
	if _, err := Parse("global.yaml", mustRead(t, ours+"global.yaml")); err != nil {
		t.Errorf("Parse, which knows no server: %v", err)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestLoadAccepts(t *testing.T) {
	files := []string{
		upstream + "basic_config.yaml",
		upstream + "duplicate_domain.yaml",
		upstream + "merge_domain_key1.yaml",
		upstream + "merge_domain_key2.yaml",
		upstream + "metadata.yaml",
		upstream + "shadowmode_config.yaml",
		upstream + "share_threshold.yaml",
		upstream + "wildcard.yaml",
		runtime + "config/another.yaml",
		runtime + "config/basic.yaml",
		runtime + "config/share_threshold.yaml",
		runtime + "reload.yaml",
		examples + "config.yaml",
		examples + "example.yaml",
		ours + "token_bucket.yaml",
		ours + "gcra.yaml",
		ours + "rate_limits.yaml",
		ours + "approximate.yaml",
		ours + "reserve.yaml",
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			mustLoad(t, Options{}, f)
		})
	}
}

func TestLoadFilesNamesPaths(t *testing.T) {
	p := upstream + "bad_limit_unit.yaml"
	n, err := Check(Options{}, p, "testdata/no_such_file.yaml")
	if err == nil || n != 1 {
		t.Fatalf("Check: %d file(s) read, err %v; want 1 and an error", n, err)
	}
	for _, want := range []string{p + `:5: domain "test-domain" › descriptors[0] › rate_limit: invalid rate limit unit 'foo'`, "testdata/no_such_file.yaml"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Check error %q does not contain %q", err, want)
		}
	}
	if _, err := Check(Options{}, upstream+"basic_config.yaml", upstream+"wildcard.yaml"); err == nil {
		t.Error("Check of two files of one domain: no error")
	}
	if _, err := Check(Options{MergeDomains: true}, upstream+"basic_config.yaml", upstream+"wildcard.yaml"); err != nil {
		t.Errorf("Check merged: %v", err)
	}
	if _, err := Check(Options{}, upstream+"basic_config.yaml", runtime+"config/basic.yaml"); err != nil {
		t.Errorf("Check of good files: %v", err)
	}
	// A folder stands for its files, as LoadDir reads them.
	if n, err := Check(Options{}, examples); err != nil || n != 2 {
		t.Errorf("Check of a folder: %d file(s), %v; want 2, nil", n, err)
	}
	c, err := LoadFiles(Options{}, upstream+"basic_config.yaml")
	if err != nil || c.Domain("test-domain") == nil {
		t.Errorf("LoadFiles: %v, %v", c, err)
	}
}

// TestLoadDir builds a directory as a Kubernetes ConfigMap volume holds it:
// the files in a hidden timestamped directory, "..data" a symlink to it,
// and each visible name a symlink through "..data".
func TestLoadDir(t *testing.T) {
	dir := t.TempDir()
	ts := filepath.Join(dir, "..2026_07_05_10_00_00.123")
	if err := os.Mkdir(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	copyFile(t, runtime+"config/basic.yaml", filepath.Join(ts, "basic.yaml"))
	copyFile(t, runtime+"config/another.yaml", filepath.Join(ts, "another.yml"))
	writeFile(t, filepath.Join(ts, "notes.txt"), "not: config")
	must(t, os.Symlink(filepath.Base(ts), filepath.Join(dir, "..data")))
	for _, name := range []string{"basic.yaml", "another.yml", "notes.txt"} {
		must(t, os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)))
	}
	writeFile(t, filepath.Join(dir, ".hidden.yaml"), "this: is not loaded")
	must(t, os.Mkdir(filepath.Join(dir, "sub.yaml"), 0o755))

	c, err := LoadDir(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if c.DomainCount() != 2 || c.Domain("basic") == nil || c.Domain("another") == nil {
		t.Errorf("LoadDir: %d domains, want basic and another", c.DomainCount())
	}

	writeFile(t, filepath.Join(dir, "bad.yaml"), "domain: x\ndescriptors:\n  - value: v\n")
	_, err = LoadDir(dir, Options{})
	if want := filepath.Join(dir, "bad.yaml") + `:3: domain "x" › descriptors[0]: descriptor has empty key`; err == nil || err.Error() != want {
		t.Errorf("LoadDir with a bad file: got %v, want %s", err, want)
	}
	if _, err := LoadDir(filepath.Join(dir, "missing"), Options{}); err == nil {
		t.Error("LoadDir of a missing directory: no error")
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	must(t, err)
	must(t, os.WriteFile(to, data, 0o644))
}

func writeFile(t *testing.T, name, content string) {
	t.Helper()
	must(t, os.WriteFile(name, []byte(content), 0o644))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestParseModel(t *testing.T) {
	data, err := os.ReadFile(ours + "token_bucket.yaml")
	must(t, err)
	f, err := Parse("token_bucket.yaml", data)
	must(t, err)
	want := &File{
		Name:   "token_bucket.yaml",
		Domain: "tb",
		Line:   2, // after the opening comment
		Descriptors: []Descriptor{
			{Key: "bucket", RateLimit: &Limit{RequestsPerUnit: 60, Unit: "minute", Algorithm: "token_bucket", RefillRate: 0.5, Line: 5}, Line: 4},
			{Key: "sliding", RateLimit: &Limit{RequestsPerUnit: 100, Unit: "HOUR", Algorithm: "sliding_window", Line: 11}, Line: 10},
			// A number or a YAML 1.1 boolean as a value reads as its text, as upstream.
			{Key: "fixed", Value: "500", RateLimit: &Limit{RequestsPerUnit: 7, Unit: "Week", Line: 17}, Line: 15},
			{Key: "onoff", Value: "on", RateLimit: &Limit{RequestsPerUnit: 365, Unit: "year", Line: 22}, Line: 20},
		},
	}
	if diff := cmp.Diff(want, f); diff != "" {
		t.Errorf("Parse (-want +got):\n%s", diff)
	}

	data, err = os.ReadFile(examples + "example.yaml")
	must(t, err)
	f, err = Parse("example.yaml", data)
	must(t, err)
	svc := f.Descriptors[len(f.Descriptors)-1]
	wantSvc := Descriptor{
		Key: "service", Value: "service_2", QuotaMode: true,
		RateLimit: &Limit{RequestsPerUnit: 2, Unit: "minute", Line: 99},
		Metadata:  map[string]any{"service_with_quota": map[string]any{"name": "service_2"}},
		Line:      96,
	}
	if diff := cmp.Diff(wantSvc, svc); diff != "" {
		t.Errorf("example.yaml service_2 (-want +got):\n%s", diff)
	}
}

// TestCheckGivesLines: the line of each problem, also nested, as Check and
// the loader report it.
func TestCheckGivesLines(t *testing.T) {
	cases := []struct {
		name, yaml, want string
	}{
		{"bad unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: minutes\n      requests_per_unit: 1\n",
			`:4: domain "d" › descriptors[0] › rate_limit: invalid rate limit unit 'minutes'`},
		{"nested unknown key", "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n      - key: c\n        ratelimit: {unit: second, requests_per_unit: 1}\n",
			`:6: domain "d" › descriptors[0] › descriptors[1]: config error, unknown key 'ratelimit'`},
		{"replaces", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      name: x\n      replaces:\n        - name: x\n",
			`:4: domain "d" › descriptors[0] › rate_limit: replaces should not contain name of same descriptor`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "c.yaml")
			if err := os.WriteFile(p, []byte(tc.yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Check(Options{}, p)
			if err == nil || err.Error() != p+tc.want {
				t.Errorf("Check = %v\nwant %s%s", err, p, tc.want)
			}
			// The loader gives the same lines: there is one parse.
			if _, err := LoadFiles(Options{}, p); err == nil || err.Error() != p+tc.want {
				t.Errorf("LoadFiles = %v\nwant %s%s", err, p, tc.want)
			}
		})
	}
}
