package restapi

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/yaml"
)

// routeList records the patterns addRoutes registers.
type routeList []string

func (l *routeList) Handle(pattern string, _ http.Handler) { *l = append(*l, pattern) }

// noCounters turns on the counters routes; the test never calls them.
type noCounters struct{ envoyCounters }

// TestRoutesMatchOpenAPI: every route routes.go registers (with every
// optional one on) is an operation of the OpenAPI document, and every
// operation of the document is a route, method and path alike. The
// dashboard's static files are the one route outside the API.
func TestRoutesMatchOpenAPI(t *testing.T) {
	var l routeList
	d := Deps{EnvoyJSON: http.NotFoundHandler(), EnvoyCounters: noCounters{}, Gatherer: prometheus.NewRegistry(), ConfigDump: func() string { return "" }}
	addRoutes(&l, d, nil, nil)
	var routes []string
	for _, p := range l {
		if p == "GET /ui/" {
			continue
		}
		p = strings.Replace(p, "/{$}", "/", 1)
		p = strings.ReplaceAll(p, "...}", "}")
		routes = append(routes, p)
	}
	slices.Sort(routes)

	var doc struct {
		Paths map[string]map[string]any `json:"paths"`
	}
	if err := yaml.Unmarshal(openAPIYAML, &doc); err != nil {
		t.Fatal(err)
	}
	var documented []string
	for path, ops := range doc.Paths {
		for method := range ops {
			if method == "parameters" || method == "summary" || method == "description" {
				continue
			}
			documented = append(documented, strings.ToUpper(method)+" "+path)
		}
	}
	slices.Sort(documented)

	for _, r := range routes {
		if !slices.Contains(documented, r) {
			t.Errorf("route %q is not in openapi.yaml", r)
		}
	}
	for _, o := range documented {
		if !slices.Contains(routes, o) {
			t.Errorf("openapi.yaml documents %q, which routes.go does not serve", o)
		}
	}
	if len(documented) == 0 || !slices.Contains(routes, "POST /json") || !slices.Contains(routes, "GET /metrics") || !slices.Contains(routes, "GET /rlconfig") {
		t.Errorf("routes %v, documented %v: want both whole, optional routes on", routes, documented)
	}
}
