package refstats

import (
	"context"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestMogrify: the reference's mogrifier cases (godogstats'
// TestLoadMogrifiersFromEnv): the first that matches rewrites the name and
// adds its tags; $N beyond the groups stays.
func TestMogrify(t *testing.T) {
	const wildcard = `^ratelimit\.service\.rate_limit\.(.*)\.(.*)\.(.*)$`
	mustMogrifier := func(pattern, name string, tags map[string]string) Mogrifier {
		t.Helper()
		m, err := NewMogrifier(pattern, name, tags)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	tagged := mustMogrifier(wildcard, "ratelimit.service.rate_limit.$3", map[string]string{"domain": "$1", "descriptor": "$2"})
	for _, tt := range []struct {
		name     string
		ms       []Mogrifier
		in       string
		wantName string
		wantTags []string
	}{
		{"simple", []Mogrifier{tagged}, "ratelimit.service.rate_limit.mongo_cps.database_users.within_limit",
			"ratelimit.service.rate_limit.within_limit", []string{"descriptor:database_users", "domain:mongo_cps"}},
		{"out of bounds", []Mogrifier{mustMogrifier(wildcard, "ratelimit.service.rate_limit.$3", map[string]string{"domain": "$1", "descriptor": "$5"})},
			"ratelimit.service.rate_limit.mongo_cps.database_users.within_limit",
			"ratelimit.service.rate_limit.within_limit", []string{"descriptor:$5", "domain:mongo_cps"}},
		{"no placeholders", []Mogrifier{mustMogrifier(wildcard, "ratelimit.service.rate_limit.$3", map[string]string{"domain": "mongo_cps"})},
			"ratelimit.service.rate_limit.mongo_cps.database_users.within_limit",
			"ratelimit.service.rate_limit.within_limit", []string{"domain:mongo_cps"}},
		{"no match", []Mogrifier{tagged}, "some.unmatched.metric", "some.unmatched.metric", nil},
		{"first match wins", []Mogrifier{
			mustMogrifier(`^ratelimit\.service\.rate_limit\.(.*)\.(.*)\.foo$`, "custom.foo", map[string]string{"domain": "$1"}), tagged},
			"ratelimit.service.rate_limit.mongo_cps.database_users.foo", "custom.foo", []string{"domain:mongo_cps"}},
		{"second matches", []Mogrifier{
			mustMogrifier(`^ratelimit\.service\.rate_limit\.(.*)\.(.*)\.foo$`, "custom.foo", map[string]string{"domain": "$1"}), tagged},
			"ratelimit.service.rate_limit.mongo_cps.database_users.within_limit",
			"ratelimit.service.rate_limit.within_limit", []string{"descriptor:database_users", "domain:mongo_cps"}},
		{"whole match", []Mogrifier{mustMogrifier(`^ratelimit_server\.(\w+)\.`, "rls.$0x", nil)},
			"ratelimit_server.ShouldRateLimit.total_requests", "rls.ratelimit_server.ShouldRateLimit.x", []string{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			name, tags := mogrify(tt.ms, tt.in)
			if name != tt.wantName || !cmp.Equal(tags, tt.wantTags) {
				t.Errorf("mogrify(%q) = %q, %q; want %q, %q", tt.in, name, tags, tt.wantName, tt.wantTags)
			}
		})
	}
}

// TestNewMogrifierRefuses: what the reference refuses to start with.
func TestNewMogrifierRefuses(t *testing.T) {
	for _, tt := range []struct {
		name, pattern, metric string
		tags                  map[string]string
	}{
		{"no pattern", "", "x", nil},
		{"bad pattern", "(", "x", nil},
		{"no name", "^x$", "", nil},
		{"empty tag key", "^x$", "y", map[string]string{"": "5"}},
		{"empty tag value", "^x$", "y", map[string]string{"domain": ""}},
	} {
		if _, err := NewMogrifier(tt.pattern, tt.metric, tt.tags); err == nil {
			t.Errorf("%s: no error", tt.name)
		}
	}
}

func TestSplitTags(t *testing.T) {
	for _, tt := range []struct {
		in, want string
		tags     []string
	}{
		{"ratelimit.service.rate_limit.mongo_cps.database_users.total_hits", "ratelimit.service.rate_limit.mongo_cps.database_users.total_hits", nil},
		{"ratelimit.service.rate_limit.mongo_cps.database_users.total_hits.__COMMIT=12345", "ratelimit.service.rate_limit.mongo_cps.database_users.total_hits", []string{"COMMIT:12345"}},
		{"a.b.__COMMIT=12345.__DEPLOY=6890", "a.b", []string{"COMMIT:12345", "DEPLOY:6890"}},
		{"a.b.__COMMIT", "a.b", []string{}},
	} {
		name, tags := splitTags(tt.in)
		if name != tt.want || !cmp.Equal(tags, tt.tags) {
			t.Errorf("splitTags(%q) = %q, %q; want %q, %q", tt.in, name, tags, tt.want, tt.tags)
		}
	}
}

// udpLines listens on a loopback UDP port and returns its address and a
// function that reads the lines received until each of want is one, or
// starts one before a further field ("|c:CONTAINER" of DogStatsD in a
// container), or 5 s pass (failing the test).
func udpLines(t *testing.T) (string, func(want ...string) []string) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	return pc.LocalAddr().String(), func(want ...string) []string {
		t.Helper()
		var lines []string
		missing := slices.Clone(want)
		buf := make([]byte, 65536)
		deadline := time.Now().Add(5 * time.Second)
		for {
			_ = pc.SetReadDeadline(deadline)
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				t.Fatalf("reading UDP: %v; no line starts with %q among %q", err, missing, lines)
			}
			for _, l := range strings.Split(strings.TrimSpace(string(buf[:n])), "\n") {
				lines = append(lines, l)
				missing = slices.DeleteFunc(missing, func(w string) bool { return l == w || strings.HasPrefix(l, w+"|") })
			}
			if len(missing) == 0 {
				return lines
			}
		}
	}
}

// TestDogStatsd: over DogStatsD, EXTRA_TAGS are tags, and a mogrifier
// turns a key into tags.
func TestDogStatsd(t *testing.T) {
	addr, read := udpLines(t)
	m, err := NewMogrifier(`^ratelimit\.service\.rate_limit\.([^.]+)\.(.+)\.(total_hits|over_limit)$`, "ratelimit.service.rate_limit.$3",
		map[string]string{"domain": "$1", "descriptor": "$2"})
	if err != nil {
		t.Fatal(err)
	}
	sink, err := NewDogStatsdSink(addr, []Mogrifier{m})
	if err != nil {
		t.Fatal(err)
	}
	s := New(sink, Options{ExtraTags: map[string]string{"env": "prod"}})
	s.DescriptorCounter("edge", "path_/a", TotalHits).Add(3)
	s.DescriptorCounter("edge", "path_/a", WithinLimit).Add(3)
	s.ConfigLoad(nil)
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	read("ratelimit.service.rate_limit.total_hits:3|c|#env:prod,descriptor:path_/a,domain:edge",
		"ratelimit.service.rate_limit.edge.path_/a.within_limit:3|c|#env:prod",
		"ratelimit.service.config_load_success:1|c|#env:prod")
}

// TestDogStatsdNoTagInjection: ".__k=v" in a request's value is no tag on
// DogStatsD ('.' is never followed by two '_'), nor is "|#k:v".
func TestDogStatsdNoTagInjection(t *testing.T) {
	addr, read := udpLines(t)
	sink, err := NewDogStatsdSink(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := New(sink, Options{ExtraTags: map[string]string{"env": "prod"}})
	s.DescriptorCounter("edge", "user_x.__role=admin", TotalHits).Add(1)
	s.DescriptorCounter("edge", "user_y|#role:admin", TotalHits).Add(1)
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	read("ratelimit.service.rate_limit.edge.user_x._role=admin.total_hits:1|c|#env:prod",
		"ratelimit.service.rate_limit.edge.user_y__role_admin.total_hits:1|c|#env:prod")
}
