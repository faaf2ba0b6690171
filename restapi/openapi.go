package restapi

import (
	_ "embed"
	"fmt"
	"net/http"

	"sigs.k8s.io/yaml"
)

// openAPIYAML is the API's contract, OpenAPI 3.1: every endpoint, body,
// reply, header and error code. The tests validate every request and reply
// of the REST suite against it.
//
//go:embed openapi.yaml
var openAPIYAML []byte

// OpenAPI returns the API's OpenAPI 3.1 document as JSON, as GET
// /openapi.json serves it.
func OpenAPI() ([]byte, error) {
	b, err := yaml.YAMLToJSON(openAPIYAML)
	if err != nil {
		return nil, fmt.Errorf("openapi.yaml: %w", err)
	}
	return b, nil
}

// handleOpenAPI serves the document (no key needed).
func handleOpenAPI() http.Handler {
	doc, err := OpenAPI()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err != nil { // a broken embedded document: the tests catch it first
			writeError(w, r, err)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(doc)
	})
}
