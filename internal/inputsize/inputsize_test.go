package inputsize

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

type desc struct {
	kv     []string
	window time.Duration
}

func (d desc) Len() int                      { return len(d.kv) / 2 }
func (d desc) Entry(j int) (string, string)  { return d.kv[2*j], d.kv[2*j+1] }
func (d desc) OverrideWindow() time.Duration { return d.window }

// TestRequest: each cap, just over and at it.
func TestRequest(t *testing.T) {
	l := Limits{}.WithDefaults()
	s := strings.Repeat
	for _, tt := range []struct {
		name, domain string
		ds           []desc
		want         string // "" admitted
	}{
		{"at the caps", s("d", 1024), []desc{{kv: []string{s("k", 1024), s("v", 1024), s("k", 1024), s("v", 1024)}, window: 30 * 24 * time.Hour}}, ""},
		{"domain", s("d", 1025), []desc{{kv: []string{"k", "v"}}}, "domain is 1025 bytes, longer than the 1024 allowed"},
		{"key", "d", []desc{{kv: []string{"k", "v"}}, {kv: []string{"k", "v", s("k", 1025), "v"}}}, "descriptor 1 entry 1 key is 1025 bytes, longer than the 1024 allowed"},
		{"value", "d", []desc{{kv: []string{"k", s("v", 2000)}}}, "descriptor 0 entry 0 value is 2000 bytes, longer than the 1024 allowed"},
		{"descriptor bytes", "d", []desc{{kv: []string{s("k", 1024), s("v", 1024), s("k", 1024), s("v", 1024), "k", ""}}}, "descriptor 0 has 4097 bytes of keys and values, more than the 4096 allowed"},
		{"descriptors", "d", make([]desc, 65), "rate limit request has 65 descriptors, more than the 64 allowed (MAX_DESCRIPTORS_PER_REQUEST)"},
		{"entries", "d", []desc{{kv: make([]string, 66)}}, "descriptor 0 has 33 entries, more than the 32 allowed (MAX_DESCRIPTOR_ENTRIES)"},
		{"override window", "d", []desc{{kv: []string{"k", "v"}, window: 365 * 24 * time.Hour}}, "descriptor 0 limit override: a window of 365 days, longer than the 30 days allowed (MAX_OVERRIDE_WINDOW)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := l.Request(tt.domain, len(tt.ds), func(i int) Descriptor { return tt.ds[i] })
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestShortName: a long name is cut to MaxName bytes of valid UTF-8, and
// two long names with one prefix stay apart.
func TestShortName(t *testing.T) {
	if got := ShortName("edge.path_/a"); got != "edge.path_/a" {
		t.Errorf("a short name changed: %q", got)
	}
	a, b := ShortName(strings.Repeat("é", 300)+"a"), ShortName(strings.Repeat("é", 300)+"b")
	if len(a) > MaxName || !utf8.ValidString(a) || a == b || a != ShortName(strings.Repeat("é", 300)+"a") {
		t.Errorf("ShortName: %d bytes, valid %v, apart %v", len(a), utf8.ValidString(a), a != b)
	}
}
