package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/throttle-rl/throttle/internal/testkit"
	"github.com/throttle-rl/throttle/internal/testkit/redistest"
	"github.com/throttle-rl/throttle/internal/testkit/throttletest"
)

// TestAgainstThrottle runs the load generator against the built binary on
// the test Redis, loaded with the descriptors -print-config writes: exact
// OK/OVER_LIMIT counts, and the service's and Redis's CPU measured.
func TestAgainstThrottle(t *testing.T) {
	redisURL := redistest.SharedURL(t)
	dir := t.TempDir()
	var cfg bytes.Buffer
	if err := run(context.Background(), []string{"-print-config"}, &cfg, &cfg); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bench.yaml"), cfg.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	s := throttletest.Start(t, "REDIS_URL="+redisURL, "DESCRIPTORS_DIR="+dir)
	common := []string{"-addr", s.GRPCAddr, "-concurrency", "16", "-duration", "30s", "-warmup", "20",
		"-pid", strconv.Itoa(s.PID()), "-redis", redisURL}
	// (A later flag wins: the hot cases name their own server.)

	// The hot cases on a server with the local over-limit cache (the
	// default) and on one without: the same exact counts.
	noCache := throttletest.Start(t, "REDIS_URL="+redisURL, "DESCRIPTORS_DIR="+dir, "LOCAL_CACHE_SIZE_IN_BYTES=0")
	for _, srv := range []struct {
		cache string
		s     *throttletest.Server
	}{{"on", s}, {"off", noCache}} {
		for _, alg := range algorithmNames {
			t.Run("hot/"+alg+"/cache="+srv.cache, func(t *testing.T) {
				args := []string{"-addr", srv.s.GRPCAddr, "-pid", strconv.Itoa(srv.s.PID()), "-cache", srv.cache,
					"-case", "hot", "-algorithm", alg, "-requests", "300"}
				// Windows are aligned to the hour: a run across an hour
				// boundary may rightly admit more, and gets a second try.
				var got map[string]string
				for try := 0; try < 2; try++ {
					hour := time.Now().Truncate(time.Hour)
					got = load(t, slices.Concat(common, args)...)
					if time.Now().Truncate(time.Hour).Equal(hour) {
						break
					}
				}
				want := map[string]string{"cache": srv.cache, "calls": "300", "decisions": "300", "ok": strconv.Itoa(hotLimit),
					"over": strconv.Itoa(300 - hotLimit), "errors": "0", "error_codes": "-"}
				for k, v := range want {
					if got[k] != v {
						t.Errorf("%s = %s, want %s", k, got[k], v)
					}
				}
			})
		}
	}

	t.Run("distinct", func(t *testing.T) {
		got := load(t, slices.Concat(common, []string{"-case", "distinct", "-algorithm", "fixed_window", "-requests", "1000"})...)
		for k, v := range map[string]string{"calls": "1000", "ok": "1000", "over": "0", "errors": "0",
			"engine_cmds": "fcall+evalsha+eval+set+incrby+pexpire+get+time"} {
			if got[k] != v {
				t.Errorf("%s = %s, want %s", k, got[k], v)
			}
		}
		// /proc counts in clock ticks (10ms): 1000 calls take several.
		for _, k := range []string{"cpu_us_per_req", "redis_us_per_decision", "engine_usec_per_call", "rps", "p50_us", "p999_us"} {
			if f, err := strconv.ParseFloat(got[k], 64); err != nil || f <= 0 {
				t.Errorf("%s = %q, want a number > 0", k, got[k])
			}
		}
	})

	t.Run("multi4", func(t *testing.T) {
		got := load(t, slices.Concat(common, []string{"-case", "multi4", "-algorithm", "sliding_window", "-requests", "200"})...)
		// An Envoy descriptor's sliding window goes without the script,
		// as a fixed window does: its plain commands, and the refund script.
		for k, v := range map[string]string{"calls": "200", "decisions": "800", "ok": "200", "errors": "0", "engine_cmds": "fcall+evalsha+eval+set+incrby+pexpire+get+time"} {
			if got[k] != v {
				t.Errorf("%s = %s, want %s", k, got[k], v)
			}
		}
	})

	t.Run("floor", func(t *testing.T) {
		// A Redis of its own: its command counts are the floor's alone
		// (the engine of other packages' tests sends INCRBY too).
		own := redistest.Start(t)
		got := load(t, "-floor", "-redis", own.URL(), "-concurrency", "16", "-requests", "500", "-warmup", "20")
		for k, v := range map[string]string{"case": "floor", "calls": "500", "errors": "0", "engine_calls": "1000"} {
			if got[k] != v {
				t.Errorf("%s = %s, want %s", k, got[k], v)
			}
		}
		if f, err := strconv.ParseFloat(got["redis_us_per_decision"], 64); err != nil || f <= 0 {
			t.Errorf("redis_us_per_decision = %q, want a number > 0", got["redis_us_per_decision"])
		}
	})

	t.Run("unreachable", func(t *testing.T) {
		// Every call fails with a deadline: counted by code, not a crash.
		port := testkit.FreePort(t)
		var out bytes.Buffer
		err := run(context.Background(), []string{"-addr", "127.0.0.1:" + strconv.Itoa(port), "-requests", "5", "-warmup", "0", "-timeout", "100ms"}, &out, &out)
		if err != nil {
			t.Fatal(err)
		}
		got := resultFields(t, out.String())
		if got["errors"] != "5" || !strings.HasPrefix(got["error_codes"], "Unavailable:") && !strings.HasPrefix(got["error_codes"], "DeadlineExceeded:") {
			t.Errorf("errors = %s (%s), want 5 Unavailable or DeadlineExceeded\n%s", got["errors"], got["error_codes"], out.String())
		}
	})
}

func TestRefusesNonLoopback(t *testing.T) {
	for _, args := range [][]string{
		{"-addr", "10.1.2.3:8081"},
		{"-addr", "[2001:db8::1]:8081"},
		{"-floor", "-redis", "redis://192.0.2.1:6379/0"},
		{"-floor"},
		{"-case", "cold"},
		{"-requests", "0", "-duration", "0"},
	} {
		var out bytes.Buffer
		if err := run(context.Background(), args, &out, &out); err == nil {
			t.Errorf("rlsload %v: no error\n%s", args, out.String())
		}
	}
}

func TestQuantile(t *testing.T) {
	tl := &tally{}
	for i := 1; i <= 1000; i++ {
		tl.latencies = append(tl.latencies, time.Duration(i))
	}
	for _, tt := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500}, {0.99, 990}, {0.999, 999}, {1, 1000}, {0, 1}} {
		if got := tl.quantile(tt.q); got != tt.want {
			t.Errorf("quantile(%v) = %v, want %v", tt.q, got, tt.want)
		}
	}
}

func TestParseRedisInfo(t *testing.T) {
	info := "# CPU\r\nused_cpu_sys:1.500000\r\nused_cpu_user:0.250001\r\n\r\n# Commandstats\r\n" +
		"cmdstat_evalsha:calls=12,usec=345,usec_per_call=28.75,rejected_calls=0,failed_calls=0\r\n"
	s, err := parseRedisInfo(info)
	if err != nil {
		t.Fatal(err)
	}
	if s.cpu != 1750001*time.Microsecond {
		t.Errorf("cpu = %v, want 1.750001s", s.cpu)
	}
	if got := s.cmds["evalsha"]; got != (commandUse{calls: 12, usec: 345}) {
		t.Errorf("evalsha = %+v, want 12 calls, 345 usec", got)
	}
}

// load runs rlsload with args and returns its RESULT line's fields.
func load(t *testing.T, args ...string) map[string]string {
	t.Helper()
	var out bytes.Buffer
	if err := run(context.Background(), args, &out, &out); err != nil {
		t.Fatalf("rlsload %v: %v\n%s", args, err, out.String())
	}
	t.Log(strings.TrimSpace(out.String()))
	return resultFields(t, out.String())
}

func resultFields(t testing.TB, out string) map[string]string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, "RESULT "); ok {
			m := map[string]string{}
			for _, kv := range strings.Fields(rest) {
				k, v, _ := strings.Cut(kv, "=")
				m[k] = v
			}
			return m
		}
	}
	t.Fatalf("no RESULT line in:\n%s", out)
	return nil
}
