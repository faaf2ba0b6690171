package restapi

import (
	"net/http"
	"time"
)

// DescriptorStatus is what GET /descriptors tells a client of the Envoy
// descriptor YAML (DESCRIPTORS_DIR) of its domain, as the server's reloader
// has it: whether the YAML describes the domain, and when it was loaded,
// never the files or their problems (they are the operator's).
type DescriptorStatus struct {
	// YAML reports whether loaded files describe the domain.
	YAML bool
	// LoadedAt is when the configuration in use was loaded.
	LoadedAt time.Time
	// CheckedAt is when the directory was last read.
	CheckedAt time.Time
	// Valid reports whether the files on disk are the ones in use (false
	// while a bad edit of any file is kept out).
	Valid bool
}

// descriptorsReply is the reply of GET /descriptors. Files and Problems
// are always empty: the YAML's files and problems are the operator's
// (they were shown before issue 38; the fields stay for the clients that
// read them).
type descriptorsReply struct {
	Domain     string               `json:"domain"`
	Configured bool                 `json:"configured"`
	YAML       bool                 `json:"yaml"`
	Files      []descriptorFileJSON `json:"files"`
	LoadedAt   *time.Time           `json:"loaded_at,omitempty"`
	CheckedAt  *time.Time           `json:"checked_at,omitempty"`
	Valid      bool                 `json:"valid"`
	Problems   []string             `json:"problems"`
}

type descriptorFileJSON struct {
	Name    string `json:"name"`
	Content string `json:"content"`
}

// handleDescriptors says how Envoy requests on the caller's domain are
// decided: by the descriptor YAML (the operator's: a client only ever
// learns that it is there, never its files or their problems), or by the
// client's descriptor rules. status is nil when the server has no
// DESCRIPTORS_DIR: then nothing is configured, and every Envoy request on
// the domain is decided by the client's descriptor rules.
func handleDescriptors(status func(domain string) DescriptorStatus) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := clientFrom(r.Context())
		reply := descriptorsReply{Domain: c.Domain, Files: []descriptorFileJSON{}, Valid: true, Problems: []string{}}
		if status != nil && c.Domain != "" {
			s := status(c.Domain)
			reply.Configured = true
			reply.YAML = s.YAML
			if !s.LoadedAt.IsZero() {
				t := s.LoadedAt.UTC()
				reply.LoadedAt = &t
			}
			if !s.CheckedAt.IsZero() {
				t := s.CheckedAt.UTC()
				reply.CheckedAt = &t
			}
			reply.Valid = s.Valid
		}
		encode(w, r, http.StatusOK, reply)
	})
}
