package main

import (
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestReferenceStatsDogStatsd: USE_DOG_STATSD sends EXTRA_TAGS as tags and
// applies the mogrifiers.
func TestReferenceStatsDogStatsd(t *testing.T) {
	port, got := listenStatsd(t, "udp")
	s, _ := startForStats(t, "USE_STATSD=false", "USE_DOG_STATSD=true", "STATSD_HOST=127.0.0.1", "STATSD_PORT="+strconv.Itoa(port),
		"STATS_FLUSH_INTERVAL=100ms", "EXTRA_TAGS=env:prod",
		"USE_DOG_STATSD_MOGRIFIERS=descriptor",
		`DOG_STATSD_MOGRIFIER_DESCRIPTOR_PATTERN=^ratelimit\.service\.rate_limit\.([^.]+)\.(.+)\.([a-z_]+)$`,
		"DOG_STATSD_MOGRIFIER_DESCRIPTOR_NAME=ratelimit.service.rate_limit.$3",
		"DOG_STATSD_MOGRIFIER_DESCRIPTOR_TAGS=domain:$1,descriptor:$2")
	sendStatsCalls(t, s)
	want := map[string]uint64{
		"ratelimit.service.rate_limit.total_hits|#env:prod,descriptor:generic_key_api,domain:edge": 7,
		"ratelimit.service.rate_limit.over_limit|#env:prod,descriptor:generic_key_api,domain:edge": 2,
		"ratelimit.service.rate_limit.total_hits|#env:prod,descriptor:tenant.user,domain:edge":     2,
		"ratelimit.service.config_load_success|#env:prod":                                          1,
	}
	waitFor(t, "the DogStatsD counters", func() bool { return cmp.Equal(dogSums(t, got.all(), want), want) })
}

// dogSums adds up the DogStatsD counter lines (NAME:VALUE|c|#TAGS, and
// |c:CONTAINER in a container) of the NAME|#TAGS in want.
func dogSums(t *testing.T, lines []string, want map[string]uint64) map[string]uint64 {
	t.Helper()
	got := map[string]uint64{}
	for _, line := range lines {
		fields := strings.Split(line, "|")
		name, value, ok := strings.Cut(fields[0], ":")
		if !ok || len(fields) < 3 || fields[1] != "c" || !strings.HasPrefix(fields[2], "#") {
			continue
		}
		key := name + "|" + fields[2]
		if _, ok := want[key]; !ok {
			continue
		}
		v, err := strconv.ParseUint(value, 10, 64)
		if err != nil {
			t.Errorf("line %q: value %q", line, value)
		}
		got[key] += v
	}
	return got
}
