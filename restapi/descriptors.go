package restapi

import (
	"net/http"
	"time"
)

// DescriptorStatus is the Envoy descriptor YAML (DESCRIPTORS_DIR) of one
// domain, as the server's reloader has it.
type DescriptorStatus struct {
	// Files are the loaded files that describe the domain, by base name;
	// none when the YAML does not describe it.
	Files []DescriptorFile
	// LoadedAt is when the configuration in use was loaded.
	LoadedAt time.Time
	// CheckedAt is when the directory was last read.
	CheckedAt time.Time
	// Valid reports whether the files on disk are the ones in use (false
	// while a bad edit of any file is kept out).
	Valid bool
	// Problems are those of the domain's own files on disk, each
	// "file:line: path: message".
	Problems []string
}

// DescriptorFile is one descriptor YAML file.
type DescriptorFile struct {
	Name    string
	Content string
}

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

// handleDescriptors shows the descriptor YAML of the caller's domain and
// whether the latest files loaded. status is nil when the server has no
// DESCRIPTORS_DIR: then nothing is configured, and every Envoy request on
// the domain is decided by the client's descriptor rules.
func handleDescriptors(status func(domain string) DescriptorStatus) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := clientFrom(r.Context())
		reply := descriptorsReply{Domain: c.Domain, Files: []descriptorFileJSON{}, Valid: true, Problems: []string{}}
		if status != nil && c.Domain != "" {
			s := status(c.Domain)
			reply.Configured = true
			reply.YAML = len(s.Files) > 0
			for _, f := range s.Files {
				reply.Files = append(reply.Files, descriptorFileJSON{Name: f.Name, Content: f.Content})
			}
			if !s.LoadedAt.IsZero() {
				t := s.LoadedAt.UTC()
				reply.LoadedAt = &t
			}
			if !s.CheckedAt.IsZero() {
				t := s.CheckedAt.UTC()
				reply.CheckedAt = &t
			}
			reply.Valid = s.Valid
			reply.Problems = append(reply.Problems, s.Problems...)
		}
		encode(w, r, http.StatusOK, reply)
	})
}
