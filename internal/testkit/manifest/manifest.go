// Package manifest decodes Kubernetes manifests strictly into their API
// types and checks that they refer to each other, for the tests of the
// repository's deployment files: k8s/, envoy/istio/ and the Helm chart in
// charts/.
package manifest

import (
	"bytes"
	"fmt"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/throttle-rl/throttle/internal/testkit/strictyaml"
)

// newObject returns an empty typed object for a manifest's apiVersion and
// kind; a kind missing here is an error, so every manifest is decoded strictly.
func newObject(apiVersion, kind string) (metav1.Object, bool) {
	switch apiVersion + " " + kind {
	case "v1 Namespace":
		return &corev1.Namespace{}, true
	case "v1 ConfigMap":
		return &corev1.ConfigMap{}, true
	case "v1 Secret":
		return &corev1.Secret{}, true
	case "v1 Service":
		return &corev1.Service{}, true
	case "apps/v1 Deployment":
		return &appsv1.Deployment{}, true
	case "apps/v1 StatefulSet":
		return &appsv1.StatefulSet{}, true
	case "policy/v1 PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, true
	case "autoscaling/v2 HorizontalPodAutoscaler":
		return &autoscalingv2.HorizontalPodAutoscaler{}, true
	case "monitoring.coreos.com/v1 ServiceMonitor":
		return &monitoringv1.ServiceMonitor{}, true
	case "networking.istio.io/v1alpha3 EnvoyFilter":
		return &EnvoyFilter{}, true
	}
	return nil, false
}

// Decode decodes one manifest strictly (unknown, misspelled or duplicate
// fields are errors) into the type its apiVersion and kind name.
func Decode(doc []byte) (metav1.Object, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return nil, err
	}
	obj, ok := newObject(tm.APIVersion, tm.Kind)
	if !ok {
		return nil, fmt.Errorf("unknown kind %q %q: add it to manifest.newObject so it is decoded strictly", tm.APIVersion, tm.Kind)
	}
	if err := strictyaml.Unmarshal(doc, obj); err != nil {
		return nil, fmt.Errorf("%s: %w", tm.Kind, err)
	}
	if obj.GetName() == "" {
		return nil, fmt.Errorf("%s without metadata.name", tm.Kind)
	}
	return obj, nil
}

// Split splits a multi-document YAML file, dropping empty documents (and
// those holding only comments).
func Split(data []byte) [][]byte {
	var docs [][]byte
	for _, d := range bytes.Split(append([]byte("\n"), data...), []byte("\n---")) {
		var v any
		if err := yaml.Unmarshal(d, &v); err == nil && v == nil {
			continue
		}
		docs = append(docs, d)
	}
	return docs
}

// Set is a group of manifests applied together, by type and name.
type Set struct {
	// Objects holds every object in the order added.
	Objects         []metav1.Object
	Namespaces      []*corev1.Namespace
	ConfigMaps      map[string]*corev1.ConfigMap
	Secrets         map[string]*corev1.Secret
	Services        map[string]*corev1.Service
	Deployments     map[string]*appsv1.Deployment
	StatefulSets    map[string]*appsv1.StatefulSet
	PDBs            []*policyv1.PodDisruptionBudget
	HPAs            []*autoscalingv2.HorizontalPodAutoscaler
	ServiceMonitors []*monitoringv1.ServiceMonitor
	EnvoyFilters    []*EnvoyFilter
}

// NewSet returns an empty Set.
func NewSet() *Set {
	return &Set{
		ConfigMaps:   map[string]*corev1.ConfigMap{},
		Secrets:      map[string]*corev1.Secret{},
		Services:     map[string]*corev1.Service{},
		Deployments:  map[string]*appsv1.Deployment{},
		StatefulSets: map[string]*appsv1.StatefulSet{},
	}
}

// Add adds a decoded object; a second object of one kind and name is an error.
func (s *Set) Add(obj metav1.Object) error {
	name := obj.GetName()
	dup := func(kind string, taken bool) error {
		if taken {
			return fmt.Errorf("two %ss named %q", kind, name)
		}
		return nil
	}
	var err error
	switch o := obj.(type) {
	case *corev1.Namespace:
		s.Namespaces = append(s.Namespaces, o)
	case *corev1.ConfigMap:
		_, taken := s.ConfigMaps[name]
		err, s.ConfigMaps[name] = dup("ConfigMap", taken), o
	case *corev1.Secret:
		_, taken := s.Secrets[name]
		err, s.Secrets[name] = dup("Secret", taken), o
	case *corev1.Service:
		_, taken := s.Services[name]
		err, s.Services[name] = dup("Service", taken), o
	case *appsv1.Deployment:
		_, taken := s.Deployments[name]
		err, s.Deployments[name] = dup("Deployment", taken), o
	case *appsv1.StatefulSet:
		_, taken := s.StatefulSets[name]
		err, s.StatefulSets[name] = dup("StatefulSet", taken), o
	case *policyv1.PodDisruptionBudget:
		s.PDBs = append(s.PDBs, o)
	case *autoscalingv2.HorizontalPodAutoscaler:
		s.HPAs = append(s.HPAs, o)
	case *monitoringv1.ServiceMonitor:
		s.ServiceMonitors = append(s.ServiceMonitors, o)
	case *EnvoyFilter:
		s.EnvoyFilters = append(s.EnvoyFilters, o)
	default:
		return fmt.Errorf("%T %q: not a kind a Set holds", obj, name)
	}
	if err != nil {
		return err
	}
	s.Objects = append(s.Objects, obj)
	return nil
}
