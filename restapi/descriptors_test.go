package restapi

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestDescriptors(t *testing.T) {
	t.Parallel()
	loaded := time.Date(2031, 3, 4, 5, 0, 0, 0, time.UTC)
	var (
		mu    sync.Mutex
		asked []string
	)
	status := func(domain string) DescriptorStatus {
		mu.Lock()
		asked = append(asked, domain)
		mu.Unlock()
		switch domain {
		case "edge":
			return DescriptorStatus{YAML: true, LoadedAt: loaded, CheckedAt: loaded.Add(time.Minute)}
		default:
			return DescriptorStatus{LoadedAt: loaded, CheckedAt: loaded.Add(time.Minute), Valid: true}
		}
	}
	e := newEnv(t, backends()[0], func(d *Deps) { d.Descriptors = status })
	edge := e.register(t, "edge-ops", `"domain":"edge"`)
	other := e.register(t, "other-ops", `"domain":"other"`)

	for _, tt := range []struct {
		name string
		key  string
		want string
	}{
		// (A client whose domain the YAML names loses it within a second,
		// store's Cache.ReleaseReserved; until then it learns only that.)
		{"a domain in the YAML, with a bad edit: never its files or problems", edge.Key,
			`{"domain":"edge","configured":true,"yaml":true,"files":[],"loaded_at":"2031-03-04T05:00:00Z","checked_at":"2031-03-04T05:01:00Z","valid":false,"problems":[]}`},
		{"a domain not in the YAML", other.Key,
			`{"domain":"other","configured":true,"yaml":false,"files":[],"loaded_at":"2031-03-04T05:00:00Z","checked_at":"2031-03-04T05:01:00Z","valid":true,"problems":[]}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := e.call(t, "GET", "/descriptors", tt.key, "")
			if r.status != http.StatusOK || strings.TrimSpace(r.body) != tt.want {
				t.Errorf("GET /descriptors = %d %s\nwant 200 %s", r.status, r.body, tt.want)
			}
		})
	}
	mu.Lock()
	if strings.Join(asked, ",") != "edge,other" {
		t.Errorf("asked about domains %v, want only each caller's own: edge, other", asked)
	}
	mu.Unlock()
	wantError(t, e.call(t, "GET", "/descriptors", "", ""), http.StatusUnauthorized, "MISSING_API_KEY")

	// Without DESCRIPTORS_DIR.
	plain := newEnv(t, backends()[0])
	c := plain.register(t, "plain", `"domain":"plain"`)
	r := plain.call(t, "GET", "/descriptors", c.Key, "")
	if want := `{"domain":"plain","configured":false,"yaml":false,"files":[],"valid":true,"problems":[]}`; r.status != http.StatusOK || strings.TrimSpace(r.body) != want {
		t.Errorf("GET /descriptors without DESCRIPTORS_DIR = %d %s, want 200 %s", r.status, r.body, want)
	}
}
