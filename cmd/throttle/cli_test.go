package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/throttle-rl/throttle/internal/ratelimitheader"
	"github.com/throttle-rl/throttle/internal/testkit/throttletest"
	"github.com/throttle-rl/throttle/migrations"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestParseServeDefaults(t *testing.T) {
	c, err := parseServe(nil, env(nil), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Port != 8080 || c.GRPCPort != 8081 || c.DatabaseURL != "sqlite://throttle.db" || c.Redis.URL != "" || c.FailureMode != "open" || c.RegisterLimit != 10 {
		t.Errorf("defaults = %+v", c)
	}
	if c.AdminKey != "" || c.CacheKeyPrefix != "" || c.CountRejectedHits {
		t.Errorf("issue 17's settings' defaults = admin key %q, key prefix %q, count rejected hits %v; want none", c.AdminKey, c.CacheKeyPrefix, c.CountRejectedHits)
	}
	if c.ShadowMode || c.DynamicMetadata || c.ForceStart || c.MaxValueStatsKeys != 1000 {
		t.Errorf("reference knobs' defaults = shadow %v, metadata %v, force start %v, max value keys %d; want false, false, false, 1000",
			c.ShadowMode, c.DynamicMetadata, c.ForceStart, c.MaxValueStatsKeys)
	}
}

func TestParseServeFlagBeatsEnv(t *testing.T) {
	c, err := parseServe([]string{"--port", "9000"}, env(map[string]string{"PORT": "7000", "GRPC_PORT": "7001", "TRUSTED_PROXIES": "10.0.0.0/8, 192.168.1.1"}), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Port != 9000 || c.GRPCPort != 7001 {
		t.Errorf("ports = %d, %d; want 9000, 7001", c.Port, c.GRPCPort)
	}
	if len(c.TrustedProxies) != 2 || c.TrustedProxies[1].String() != "192.168.1.1/32" {
		t.Errorf("trusted proxies = %v", c.TrustedProxies)
	}
}

func TestParseServeHeaderSets(t *testing.T) {
	for _, tt := range []struct {
		args []string
		env  map[string]string
		want ratelimitheader.Sets
	}{
		{nil, nil, ratelimitheader.Both},
		{nil, map[string]string{"RATE_LIMIT_HEADERS": "ietf"}, ratelimitheader.IETF},
		{[]string{"--rate-limit-headers", "x"}, map[string]string{"RATE_LIMIT_HEADERS": "ietf"}, ratelimitheader.X},
	} {
		c, err := parseServe(tt.args, env(tt.env), &bytes.Buffer{})
		if err != nil {
			t.Errorf("parseServe(%v, %v): %v", tt.args, tt.env, err)
			continue
		}
		if c.HeaderSets != tt.want {
			t.Errorf("parseServe(%v, %v): header sets %v, want %v", tt.args, tt.env, c.HeaderSets, tt.want)
		}
	}
}

func TestParseServeErrors(t *testing.T) {
	cases := []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"PORT": "eighty"}, `PORT: "eighty" is not a number`},
		{map[string]string{"PORT": "70000"}, "PORT: 70000 is not a port"},
		{map[string]string{"GRPC_PORT": "8080"}, "PORT and GRPC_PORT are both 8080"},
		{map[string]string{"FAILURE_MODE": "sideways"}, `FAILURE_MODE: failure mode "sideways" is not one of open, closed, local`},
		{map[string]string{"TRUSTED_PROXIES": "10.0.0.0/33"}, `TRUSTED_PROXIES: "10.0.0.0/33" is not a CIDR`},
		{map[string]string{"LOG_LEVEL": "loud"}, `LOG_LEVEL: "loud" is not one of`},
		{map[string]string{"BACKEND_TIMEOUT": "fast"}, `BACKEND_TIMEOUT: "fast" is not a positive duration`},
		{map[string]string{"REDIS_URL": "http://localhost:6379"}, "REDIS_URL: must start with redis:// or rediss://, or be host:port"},
		{map[string]string{"REGISTER_LIMIT_PER_HOUR": "0"}, "REGISTER_LIMIT_PER_HOUR: 0 must be at least 1"},
		{map[string]string{"SHADOW_MODE": "sometimes"}, `SHADOW_MODE: "sometimes" is not true or false`},
		{map[string]string{"RESPONSE_DYNAMIC_METADATA": "y"}, `RESPONSE_DYNAMIC_METADATA: "y" is not true or false`},
		{map[string]string{"FORCE_START_WITHOUT_INITIAL_CONFIG": "always"}, `FORCE_START_WITHOUT_INITIAL_CONFIG: "always" is not true or false`},
		{map[string]string{"STATS_MAX_VALUE_KEYS": "-1"}, "STATS_MAX_VALUE_KEYS: -1 must be 0 or more"},
		{map[string]string{"MAX_DESCRIPTORS_PER_REQUEST": "0"}, "MAX_DESCRIPTORS_PER_REQUEST: 0 must be at least 1"},
		{map[string]string{"MAX_DESCRIPTOR_ENTRIES": "many"}, `MAX_DESCRIPTOR_ENTRIES: "many" is not a number`},
		{map[string]string{"RLQS_INTERVAL": "50ms"}, "RLQS_INTERVAL: 50ms is not within 100ms-1h"},
		{map[string]string{"RLQS_INTERVAL": "soon"}, `RLQS_INTERVAL: "soon" is not a positive duration`},
		{map[string]string{"RATE_LIMIT_HEADERS": "draft"}, `RATE_LIMIT_HEADERS: "draft" is not one of x (X-RateLimit-* only), ietf (RateLimit-Policy and RateLimit only), both`},
		{map[string]string{"ADMIN_API_KEY": "short"}, `ADMIN_API_KEY: must be at least 16 characters and not start with "thr_"`},
		{map[string]string{"ADMIN_API_KEY": "thr_0123456789abcdef0123"}, `ADMIN_API_KEY: must be at least 16 characters and not start with "thr_"`},
		{map[string]string{"CACHE_KEY_PREFIX": "{prod}"}, `CACHE_KEY_PREFIX: "{prod}" has a '{' or '}', which Redis Cluster would read as the hash tag of every key`},
		{map[string]string{"CACHE_KEY_PREFIX": "a b"}, `CACHE_KEY_PREFIX: "a b" has a space or a control character`},
		{map[string]string{"COUNT_REJECTED_HITS": "maybe"}, `COUNT_REJECTED_HITS: "maybe" is not true or false`},
	}
	for _, tc := range cases {
		_, err := parseServe(nil, env(tc.env), &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want it to contain %q", tc.env, err, tc.want)
		}
	}
}

func TestHelpListsEverySetting(t *testing.T) {
	var out bytes.Buffer
	_, err := parseServe([]string{"--help"}, env(nil), &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("err = %v, want flag.ErrHelp", err)
	}
	inert := out.String()[strings.Index(out.String(), "Accepted from Envoy's reference service, without effect"):]
	for _, s := range serveSettings {
		if s.flag == "" && !strings.Contains(inert, s.env) {
			t.Errorf("--help does not name %s among the settings without effect", s.env)
		}
		if s.flag != "" && !strings.Contains(out.String(), "env "+s.env+",") {
			t.Errorf("--help does not list %s", s.env)
		}
	}
}

func TestConfigCheck(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"config", "check", "testdata/edge.yaml"}, env(nil), &out, &out); err != nil {
		t.Fatalf("good file: %v", err)
	}
	if got := out.String(); got != "1 file(s) OK\n" {
		t.Errorf("output = %q", got)
	}
	// Every problem, each with its file and line: bad.yaml's unit, and
	// that it describes edge.yaml's domain again.
	err := run(context.Background(), []string{"config", "check", "testdata/edge.yaml", "testdata/bad.yaml"}, env(nil), &out, &out)
	want := "invalid descriptor configuration:\n" +
		"testdata/bad.yaml:1: duplicate domain 'edge' in config file\n" +
		"testdata/bad.yaml:4: domain \"edge\" › descriptors[0] › rate_limit: invalid rate limit unit 'minutes'"
	if err == nil || err.Error() != want {
		t.Errorf("bad file: err = %v\nwant %s", err, want)
	}
}

// TestConfigCheckScope: the built binary's `throttle config check` refuses
// scope: global, at its file and line, unless GLOBAL_REDIS_URL is set as
// serve would have it.
func TestConfigCheckScope(t *testing.T) {
	bin := throttletest.Binary(t)
	cmd := exec.Command(bin, "config", "check", "testdata/global.yaml")
	cmd.Env = append(os.Environ(), "GLOBAL_REDIS_URL=")
	out, err := cmd.CombinedOutput()
	want := "throttle: invalid descriptor configuration:\n" +
		"testdata/global.yaml:4: domain \"edge\" › descriptors[0] › rate_limit: scope: global needs GLOBAL_REDIS_URL, the Redis every region shares (this server has none)\n"
	if err == nil || string(out) != want {
		t.Errorf("config check without GLOBAL_REDIS_URL: %v\n%s\nwant %s", err, out, want)
	}
	cmd = exec.Command(bin, "config", "check", "testdata/global.yaml")
	cmd.Env = append(os.Environ(), "GLOBAL_REDIS_URL=redis://global.example:6379")
	if out, err := cmd.CombinedOutput(); err != nil || string(out) != "1 file(s) OK\n" {
		t.Errorf("config check with GLOBAL_REDIS_URL: %v %s", err, out)
	}
}

func TestMigrateCommand(t *testing.T) {
	dbURL := "sqlite://" + t.TempDir() + "/m.db"
	ups, err := fs.Glob(migrations.SQLite(), "*.up.sql")
	if err != nil || len(ups) == 0 {
		t.Fatalf("embedded migrations: %v, %d", err, len(ups))
	}
	var out bytes.Buffer
	for _, step := range []struct{ arg, want string }{
		{"version", "database schema version 0\n"},
		{"up", fmt.Sprintf("database schema version %d\n", len(ups))},
		{"down", fmt.Sprintf("database schema version %d\n", len(ups)-1)},
	} {
		out.Reset()
		if err := run(context.Background(), []string{"migrate", step.arg}, env(map[string]string{"DATABASE_URL": dbURL}), &out, &out); err != nil {
			t.Fatalf("migrate %s: %v", step.arg, err)
		}
		if out.String() != step.want {
			t.Errorf("migrate %s printed %q, want %q", step.arg, out.String(), step.want)
		}
	}
	if err := run(context.Background(), []string{"migrate", "sideways"}, env(nil), &out, &out); err == nil {
		t.Error("migrate sideways accepted")
	}
	if err := run(context.Background(), []string{"frobnicate"}, env(nil), &out, &out); err == nil {
		t.Error("unknown command accepted")
	}
}

// TestHelpCommand: `throttle help serve` prints serve's help, as `throttle
// serve --help` does; help for the other commands gives their usage.
func TestHelpCommand(t *testing.T) {
	var want, got, errOut bytes.Buffer
	if _, err := parseServe([]string{"--help"}, env(nil), &want); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("serve --help: %v", err)
	}
	if err := run(context.Background(), []string{"help", "serve"}, env(nil), &got, &errOut); err != nil {
		t.Fatalf("help serve: %v", err)
	}
	if got.String() != want.String() || errOut.Len() != 0 || !strings.Contains(got.String(), "env REDIS_URL,") {
		t.Errorf("help serve printed %q (stderr %q), want serve's help %q", got.String(), errOut.String(), want.String())
	}
	for _, tc := range []struct{ args, want []string }{
		{[]string{"help", "migrate"}, []string{migrateUsage}},
		{[]string{"migrate", "--help"}, []string{migrateUsage}},
		{[]string{"help", "config"}, []string{configUsage}},
		{[]string{"config", "check", "-h"}, []string{configUsage}},
		{[]string{"help"}, []string{"Usage: throttle <command>", "help [COMMAND]"}},
	} {
		var out bytes.Buffer
		if err := run(context.Background(), tc.args, env(nil), &out, &out); err != nil {
			t.Errorf("%v: %v", tc.args, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%v printed %q, want it to contain %q", tc.args, out.String(), w)
			}
		}
	}
	if err := run(context.Background(), []string{"help", "nope"}, env(nil), &got, &got); err == nil {
		t.Error("help nope: no error")
	}
}

// TestUnknownFlag: the built binary, given a flag serve does not have or an
// argument, prints the error and how to get the help, not the whole help.
func TestUnknownFlag(t *testing.T) {
	bin := throttletest.Binary(t)
	for _, tc := range []struct{ arg, want string }{
		{"--bogus", "throttle: serve: flag provided but not defined: -bogus\nrun 'throttle help serve' to list every setting\n"},
		{"extra", "throttle: serve: unexpected argument \"extra\"\nrun 'throttle help serve' to list every setting\n"},
	} {
		cmd := exec.Command(bin, "serve", tc.arg)
		cmd.Dir = t.TempDir()
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if exit, ok := err.(*exec.ExitError); !ok || exit.ExitCode() != 1 {
			t.Errorf("serve %s: %v, want exit status 1", tc.arg, err)
		}
		if stderr.String() != tc.want || stdout.Len() != 0 {
			t.Errorf("serve %s printed %q (stdout %q), want %q", tc.arg, stderr.String(), stdout.String(), tc.want)
		}
	}
}
