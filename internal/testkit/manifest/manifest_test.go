package manifest

import (
	"fmt"
	"strings"
	"testing"
)

// Decode is strict for every kind it knows, the custom resources included.
func TestDecodeRejectsMistakes(t *testing.T) {
	tests := []struct{ name, doc string }{
		{"misspelled Deployment field", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replica: 2}\n"},
		{"misspelled ServiceMonitor field", "apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata: {name: x}\nspec: {selector: {}, endpoint: [{port: http}]}\n"},
		{"misspelled ServiceMonitor endpoint field", "apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata: {name: x}\nspec: {selector: {}, endpoints: [{prot: http}]}\n"},
		{"misspelled EnvoyFilter field", "apiVersion: networking.istio.io/v1alpha3\nkind: EnvoyFilter\nmetadata: {name: x}\nspec: {workloadselector: {}}\n"},
		{"wrong case", "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {Selector: {a: b}}\n"},
		{"duplicate field", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: b}\ndata: {c: d}\n"},
		{"unknown kind", "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n"},
		{"no name", "apiVersion: v1\nkind: ConfigMap\nmetadata: {namespace: x}\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if obj, err := Decode([]byte(tt.doc)); err == nil {
				t.Errorf("Decode accepted %q as %T", tt.doc, obj)
			}
		})
	}
}

func TestSetAddRejectsDuplicates(t *testing.T) {
	s := NewSet()
	for i, want := range []bool{true, false} {
		obj, err := Decode([]byte("apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n"))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Add(obj); (err == nil) != want {
			t.Errorf("Add #%d: err %v", i+1, err)
		}
	}
}

// recorder collects a check's errors instead of failing the test.
type recorder struct {
	*testing.T
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// The checks find a ServiceMonitor that selects no Service, a port it
// scrapes that the Service lacks, and a probe on an undeclared port.
func TestChecksFindMistakes(t *testing.T) {
	const good = `
apiVersion: apps/v1
kind: Deployment
metadata: {name: d}
spec:
  selector: {matchLabels: {app: a}}
  template:
    metadata: {labels: {app: a}}
    spec:
      securityContext: {runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}
      containers:
        - name: c
          image: i
          ports: [{name: http, containerPort: 8080}]
          readinessProbe: {httpGet: {path: /ready, port: http}}
          resources: {requests: {cpu: 1, memory: 1Mi}, limits: {cpu: 1, memory: 1Mi}}
          securityContext: {allowPrivilegeEscalation: false, runAsNonRoot: true, capabilities: {drop: [ALL]}}
---
apiVersion: v1
kind: Service
metadata: {name: s, namespace: ns, labels: {app: a}}
spec: {selector: {app: a}, ports: [{name: http, port: 80, targetPort: http}]}
---
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata: {name: m, namespace: ns}
spec: {selector: {matchLabels: {app: a}}, endpoints: [{port: http}]}
`
	tests := []struct{ name, old, new, want string }{
		{"good", "", "", ""},
		{"monitor selects nothing", "matchLabels: {app: a}}, endpoints", "matchLabels: {app: b}}, endpoints", "selects 0 Services"},
		{"monitor scrapes a port the Service lacks", "endpoints: [{port: http}]", "endpoints: [{port: metrics}]", `port "metrics" is not a port name`},
		{"probe on an undeclared port", "port: http}}\n", "port: admin}}\n", "readiness probe port admin is not a container port"},
		{"Service targets an undeclared port", "targetPort: http", "targetPort: grpc", "targetPort grpc is not a container port"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewSet()
			for _, doc := range Split([]byte(strings.Replace(good, tt.old, tt.new, 1))) {
				obj, err := Decode(doc)
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Add(obj); err != nil {
					t.Fatal(err)
				}
			}
			r := &recorder{T: t}
			s.CheckReferences(r)
			s.CheckPods(r)
			got := strings.Join(r.errs, "\n")
			if tt.want == "" && got != "" || !strings.Contains(got, tt.want) {
				t.Errorf("errors:\n%s\nwant %q", got, tt.want)
			}
		})
	}
}
