package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// TestStatsSettings: the reference's stats settings, read with its syntax
// and defaults (but USE_STATSD's), and the sink they choose.
func TestStatsSettings(t *testing.T) {
	c, err := parseServe(nil, env(nil), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	want := statsSinkConfig{StatsdHost: "localhost", StatsdPort: 8125, StatsdProtocol: "tcp", FlushInterval: 10 * time.Second,
		PrometheusAddr: ":9090", PrometheusPath: "/metrics"}
	if diff := cmp.Diff(want, c.Stats, cmpopts.EquateEmpty(), cmpopts.IgnoreUnexported(statsSinkConfig{})); diff != "" || c.Stats.sink() != "" {
		t.Errorf("defaults (-want +got):\n%s\nsink %q", diff, c.Stats.sink())
	}

	c, err = parseServe(nil, env(map[string]string{
		"USE_DOG_STATSD": "true", "STATSD_HOST": "agent", "STATSD_PORT": "9125", "STATS_FLUSH_INTERVAL": "250ms",
		"EXTRA_TAGS": "env:prod,team:rl", "USE_DOG_STATSD_MOGRIFIERS": "tag,other",
		"DOG_STATSD_MOGRIFIER_TAG_PATTERN":   `^ratelimit\.service\.rate_limit\.(.*)\.(.*)\.(.*)$`,
		"DOG_STATSD_MOGRIFIER_TAG_NAME":      "ratelimit.service.rate_limit.$3",
		"DOG_STATSD_MOGRIFIER_TAG_TAGS":      "domain:$1,descriptor:$2",
		"DOG_STATSD_MOGRIFIER_OTHER_PATTERN": "^x$", "DOG_STATSD_MOGRIFIER_OTHER_NAME": "y",
	}), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	s := c.Stats
	if s.sink() != sinkDogStatsd || s.StatsdHost != "agent" || s.StatsdPort != 9125 || s.FlushInterval != 250*time.Millisecond ||
		!cmp.Equal(s.ExtraTags, map[string]string{"env": "prod", "team": "rl"}) || len(s.Mogrifiers) != 2 {
		t.Errorf("DogStatsD settings: %+v", s)
	}

	// DISABLE_STATS wins, unchecked.
	c, err = parseServe(nil, env(map[string]string{"DISABLE_STATS": "true", "USE_STATSD": "true", "USE_PROMETHEUS": "true"}), &bytes.Buffer{})
	if err != nil || c.Stats.sink() != "" {
		t.Errorf("DISABLE_STATS: %v, sink %q", err, c.Stats.sink())
	}
}

// TestStatsSettingsRefused: each bad setting or combination is refused,
// named.
func TestStatsSettingsRefused(t *testing.T) {
	for _, tt := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"two sinks", map[string]string{"USE_STATSD": "true", "USE_PROMETHEUS": "true"}, "set one of them"},
		{"bad bool", map[string]string{"USE_STATSD": "yes"}, "USE_STATSD"},
		{"bad port", map[string]string{"USE_STATSD": "true", "STATSD_PORT": "70000"}, "STATSD_PORT"},
		{"bad protocol", map[string]string{"STATSD_PROTOCOL": "quic"}, "STATSD_PROTOCOL"},
		{"bad interval", map[string]string{"STATS_FLUSH_INTERVAL": "0s"}, "STATS_FLUSH_INTERVAL"},
		{"bad tags", map[string]string{"EXTRA_TAGS": "env=prod"}, "EXTRA_TAGS"},
		{"tag of two colons", map[string]string{"EXTRA_TAGS": "a:b:c"}, "EXTRA_TAGS"},
		{"gostats variable", map[string]string{"USE_STATSD": "true", "GOSTATS_FLUSH_INTERVAL_SECONDS": "soon"}, "GOSTATS_FLUSH_INTERVAL_SECONDS"},
		{"mogrifier without pattern", map[string]string{"USE_DOG_STATSD": "true", "USE_DOG_STATSD_MOGRIFIERS": "m", "DOG_STATSD_MOGRIFIER_M_NAME": "x"}, "DOG_STATSD_MOGRIFIER_M_"},
		{"mogrifier empty tag", map[string]string{"USE_DOG_STATSD": "true", "USE_DOG_STATSD_MOGRIFIERS": "m",
			"DOG_STATSD_MOGRIFIER_M_PATTERN": "^a$", "DOG_STATSD_MOGRIFIER_M_NAME": "x", "DOG_STATSD_MOGRIFIER_M_TAGS": "domain:"}, "TAGS"},
		{"prometheus on PORT", map[string]string{"USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": ":8080"}, "PORT's address"},
		{"prometheus on GRPC_PORT", map[string]string{"USE_PROMETHEUS": "true", "BIND_ADDRESS": "127.0.0.1", "PROMETHEUS_ADDR": "127.0.0.1:8081"}, "GRPC_PORT's address"},
		{"prometheus on DEBUG_ADDRESS", map[string]string{"USE_PROMETHEUS": "true", "DEBUG_ADDRESS": "127.0.0.1:6070", "PROMETHEUS_ADDR": ":6070"}, "DEBUG_ADDRESS's address"},
		{"prometheus address", map[string]string{"USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": "9090"}, "PROMETHEUS_ADDR"},
		{"prometheus path", map[string]string{"USE_PROMETHEUS": "true", "PROMETHEUS_PATH": "metrics"}, "PROMETHEUS_PATH"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseServe(nil, env(tt.env), &bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one naming %q", err, tt.want)
			}
		})
	}
	// Other hosts on the same port are other addresses.
	if _, err := parseServe(nil, env(map[string]string{"USE_PROMETHEUS": "true", "BIND_ADDRESS": "127.0.0.1", "PROMETHEUS_ADDR": "10.0.0.1:8080"}), &bytes.Buffer{}); err != nil {
		t.Errorf("PROMETHEUS_ADDR on another host than PORT's: %v", err)
	}
}
