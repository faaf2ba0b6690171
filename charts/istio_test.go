package charts

import (
	"reflect"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"

	"github.com/throttle-rl/throttle/descriptors"
	"github.com/throttle-rl/throttle/internal/testkit"
	"github.com/throttle-rl/throttle/internal/testkit/manifest"
)

// checkIstio: with release throttle in namespace throttle, the chart's
// EnvoyFilter is envoy/istio/envoyfilter.yaml (which envoy/envoy_test.go
// proves against envoy/descriptors/edge.yaml): the same patches, each
// decoded into Envoy's protos and validated, equal. The descriptors
// ConfigMap holds edge.yaml, whose domain the filter asks for.
func checkIstio(t *testing.T, r rendered) {
	f := onlyEnvoyFilter(t, r)
	example := loadIstioExample(t)
	if f.Name != example.Name || f.Namespace != example.Namespace || !reflect.DeepEqual(f.Spec.WorkloadSelector, example.Spec.WorkloadSelector) {
		t.Errorf("EnvoyFilter %s/%s selecting %v, want %s/%s selecting %v as envoy/istio/envoyfilter.yaml",
			f.Namespace, f.Name, f.Spec.WorkloadSelector.Labels, example.Namespace, example.Name, example.Spec.WorkloadSelector.Labels)
	}
	if len(f.Spec.ConfigPatches) != len(example.Spec.ConfigPatches) {
		t.Fatalf("%d patches, want %d as envoy/istio/envoyfilter.yaml", len(f.Spec.ConfigPatches), len(example.Spec.ConfigPatches))
	}
	for i, p := range f.Spec.ConfigPatches {
		want := example.Spec.ConfigPatches[i]
		p.Patch.Value, want.Patch.Value = nil, nil
		if !reflect.DeepEqual(p, want) {
			t.Errorf("configPatches[%d] applyTo, match or operation:\n got %+v\nwant %+v", i, p, want)
		}
	}
	got, want := patches(t, f), patches(t, example)
	for i := range want.Clusters {
		if !proto.Equal(got.Clusters[i], want.Clusters[i]) {
			t.Errorf("CLUSTER patch:\n got %v\nwant %v", got.Clusters[i], want.Clusters[i])
		}
	}
	for i := range want.HTTPFilters {
		if !proto.Equal(got.HTTPFilters[i], want.HTTPFilters[i]) {
			t.Errorf("HTTP_FILTER patch:\n got %v\nwant %v", got.HTTPFilters[i], want.HTTPFilters[i])
		}
	}
	for i := range want.VirtualHosts {
		if !proto.Equal(got.VirtualHosts[i], want.VirtualHosts[i]) {
			t.Errorf("VIRTUAL_HOST patch:\n got %v\nwant %v", got.VirtualHosts[i], want.VirtualHosts[i])
		}
	}

	// The descriptors: edge.yaml as given, loading with Throttle's loader,
	// with the filter's domain.
	cm := r.set.ConfigMaps["throttle-descriptors"]
	if cm == nil {
		t.Fatalf("no ConfigMap throttle-descriptors, got %v", keys(r.set.ConfigMaps))
	}
	if got, want := cm.Data["edge.yaml"], string(testkit.MustRead(t, "../envoy/descriptors/edge.yaml")); got != want {
		t.Errorf("ConfigMap edge.yaml differs from envoy/descriptors/edge.yaml:\n%s", got)
	}
	var srcs []descriptors.Source
	for name, data := range cm.Data {
		srcs = append(srcs, descriptors.Source{Name: name, Data: []byte(data)})
	}
	cfg, err := descriptors.Load(descriptors.Options{}, srcs...)
	if err != nil {
		t.Fatalf("descriptors: %v", err)
	}
	if domain := rateLimitOf(t, got).GetDomain(); cfg.Domain(domain) == nil {
		t.Errorf("the EnvoyFilter's domain %q is not in the descriptors ConfigMap", domain)
	}

	if want := "EnvoyFilter throttle-ratelimit in istio-system: gateways labelled istio=ingressgateway ask Throttle (domain edge)."; !strings.Contains(r.notes, want) || strings.Contains(r.notes, "no file of descriptors.files") {
		t.Errorf("NOTES.txt lacks %q, or warns of the domain:\n%s", want, r.notes)
	}

	// Headless: the gateway's STRICT_DNS cluster resolves every pod.
	if svc := r.set.Services["throttle"]; svc.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("service.headless: clusterIP %q, want None", svc.Spec.ClusterIP)
	}
}

func onlyEnvoyFilter(t *testing.T, r rendered) *manifest.EnvoyFilter {
	t.Helper()
	if len(r.set.EnvoyFilters) != 1 {
		t.Fatalf("%d EnvoyFilters, want 1", len(r.set.EnvoyFilters))
	}
	return r.set.EnvoyFilters[0]
}

func loadIstioExample(t *testing.T) *manifest.EnvoyFilter {
	t.Helper()
	docs := manifest.Split(testkit.MustRead(t, "../envoy/istio/envoyfilter.yaml"))
	if len(docs) != 1 {
		t.Fatalf("envoy/istio/envoyfilter.yaml: %d documents, want 1", len(docs))
	}
	obj, err := manifest.Decode(docs[0])
	if err != nil {
		t.Fatalf("envoy/istio/envoyfilter.yaml: %v", err)
	}
	return obj.(*manifest.EnvoyFilter)
}

func patches(t *testing.T, f *manifest.EnvoyFilter) *manifest.EnvoyPatches {
	t.Helper()
	ps, err := f.Patches()
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

func rateLimitOf(t *testing.T, ps *manifest.EnvoyPatches) *ratelimitv3.RateLimit {
	t.Helper()
	for _, hf := range ps.HTTPFilters {
		if hf.GetName() == "envoy.filters.http.ratelimit" {
			var rl ratelimitv3.RateLimit
			if err := hf.GetTypedConfig().UnmarshalTo(&rl); err != nil {
				t.Fatal(err)
			}
			return &rl
		}
	}
	t.Fatal("no HTTP_FILTER patch adds envoy.filters.http.ratelimit")
	return nil
}
