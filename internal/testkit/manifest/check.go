package manifest

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Workload is a Deployment or StatefulSet seen through what the checks need.
type Workload struct {
	Kind, Name string
	Selector   *metav1.LabelSelector
	Pod        corev1.PodTemplateSpec
	// Claims names the StatefulSet's volumeClaimTemplates, which pods mount
	// like volumes.
	Claims []string
}

// Workloads returns the Deployments and StatefulSets, by kind and name.
func (s *Set) Workloads() []Workload {
	var ws []Workload
	for _, d := range s.Deployments {
		ws = append(ws, Workload{Kind: "Deployment", Name: d.Name, Selector: d.Spec.Selector, Pod: d.Spec.Template})
	}
	for _, st := range s.StatefulSets {
		w := Workload{Kind: "StatefulSet", Name: st.Name, Selector: st.Spec.Selector, Pod: st.Spec.Template}
		for _, c := range st.Spec.VolumeClaimTemplates {
			w.Claims = append(w.Claims, c.Name)
		}
		ws = append(ws, w)
	}
	slices.SortFunc(ws, func(a, b Workload) int { return strings.Compare(a.Kind+a.Name, b.Kind+b.Name) })
	return ws
}

// CheckReferences checks that the objects point at each other correctly:
// workload selectors select their own pods; each Service selects exactly one
// workload and targets ports its containers declare; each PodDisruptionBudget
// selects one workload's pods; each HPA scales a Deployment of the set; each
// ServiceMonitor selects a Service of the set by labels and scrapes ports it has.
func (s *Set) CheckReferences(t testing.TB) {
	t.Helper()
	ws := s.Workloads()
	s.checkSelectors(t, ws)
	s.checkServices(t, ws)
	s.checkPDBs(t, ws)
	for _, h := range s.HPAs {
		ref := h.Spec.ScaleTargetRef
		if ref.APIVersion != "apps/v1" || ref.Kind != "Deployment" || s.Deployments[ref.Name] == nil {
			t.Errorf("HPA %s: scaleTargetRef %v names no Deployment here", h.Name, ref)
		}
	}
	s.checkServiceMonitors(t)
}

// checkSelectors checks that each workload selects its own pods.
func (s *Set) checkSelectors(t testing.TB, ws []Workload) {
	t.Helper()
	for _, w := range ws {
		sel, err := metav1.LabelSelectorAsSelector(w.Selector)
		if err != nil || sel.Empty() {
			t.Errorf("%s %s: bad or empty selector: %v", w.Kind, w.Name, err)
			continue
		}
		if !sel.Matches(labels.Set(w.Pod.Labels)) {
			t.Errorf("%s %s: selector %v does not match its pod labels %v", w.Kind, w.Name, sel, w.Pod.Labels)
		}
	}
}

// checkServices checks that each Service selects one workload and targets
// ports its containers declare.
func (s *Set) checkServices(t testing.TB, ws []Workload) {
	t.Helper()
	for name, svc := range s.Services {
		var selected []Workload
		for _, w := range ws {
			if len(svc.Spec.Selector) > 0 && labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(w.Pod.Labels)) {
				selected = append(selected, w)
			}
		}
		if len(selected) != 1 {
			t.Errorf("Service %s selects %d workloads, want 1", name, len(selected))
			continue
		}
		for _, p := range svc.Spec.Ports {
			if _, ok := ContainerPort(selected[0].Pod.Spec, p.TargetPort); !ok {
				t.Errorf("Service %s port %s: targetPort %s is not a container port of %s %s",
					name, p.Name, p.TargetPort.String(), selected[0].Kind, selected[0].Name)
			}
		}
	}
}

// checkPDBs checks that each PodDisruptionBudget selects one workload's pods.
func (s *Set) checkPDBs(t testing.TB, ws []Workload) {
	t.Helper()
	for _, p := range s.PDBs {
		sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
		if err != nil || sel.Empty() {
			t.Errorf("PodDisruptionBudget %s: bad or empty selector: %v", p.Name, err)
			continue
		}
		var n int
		for _, w := range ws {
			if sel.Matches(labels.Set(w.Pod.Labels)) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("PodDisruptionBudget %s selects the pods of %d workloads, want 1", p.Name, n)
		}
	}
}

// checkServiceMonitors checks that each ServiceMonitor selects a Service of
// the set and scrapes ports it has.
func (s *Set) checkServiceMonitors(t testing.TB) {
	t.Helper()
	for _, m := range s.ServiceMonitors {
		sel, err := metav1.LabelSelectorAsSelector(&m.Spec.Selector)
		if err != nil || sel.Empty() {
			t.Errorf("ServiceMonitor %s: bad or empty selector: %v", m.Name, err)
			continue
		}
		var selected []*corev1.Service
		for _, svc := range s.Services {
			if sel.Matches(labels.Set(svc.Labels)) && (len(m.Spec.NamespaceSelector.MatchNames) == 0 && svc.Namespace == m.Namespace ||
				slices.Contains(m.Spec.NamespaceSelector.MatchNames, svc.Namespace)) {
				selected = append(selected, svc)
			}
		}
		if len(selected) != 1 {
			t.Errorf("ServiceMonitor %s selects %d Services, want 1", m.Name, len(selected))
			continue
		}
		for i, e := range m.Spec.Endpoints {
			if !slices.ContainsFunc(selected[0].Spec.Ports, func(p corev1.ServicePort) bool { return e.Port != "" && p.Name == e.Port }) {
				t.Errorf("ServiceMonitor %s endpoints[%d]: port %q is not a port name of Service %s", m.Name, i, e.Port, selected[0].Name)
			}
		}
	}
}

// CheckPods checks each workload's pod: every ConfigMap, Secret and key it
// refers to is in the set, every mount names a volume, probes use declared
// ports, every container has CPU and memory requests and limits, and runs
// under the "restricted" Pod Security Standard.
func (s *Set) CheckPods(t testing.TB) {
	t.Helper()
	for _, w := range s.Workloads() {
		spec := w.Pod.Spec
		where := w.Kind + " " + w.Name
		volumes := map[string]bool{}
		for _, v := range spec.Volumes {
			volumes[v.Name] = true
			switch {
			case v.ConfigMap != nil:
				s.checkConfigMapKeys(t, where+" volume "+v.Name, v.ConfigMap.Name, keysOf(v.ConfigMap.Items))
			case v.Secret != nil:
				s.checkSecretKeys(t, where+" volume "+v.Name, v.Secret.SecretName, keysOf(v.Secret.Items))
			}
		}
		for _, c := range w.Claims {
			volumes[c] = true
		}
		if spec.SecurityContext == nil || spec.SecurityContext.RunAsNonRoot == nil || !*spec.SecurityContext.RunAsNonRoot {
			t.Errorf("%s: pod securityContext.runAsNonRoot must be true", where)
		}
		for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
			cw := where + " container " + c.Name
			for _, e := range c.Env {
				if e.ValueFrom == nil {
					continue
				}
				if r := e.ValueFrom.ConfigMapKeyRef; r != nil {
					s.checkConfigMapKeys(t, cw+" env "+e.Name, r.Name, []string{r.Key})
				}
				if r := e.ValueFrom.SecretKeyRef; r != nil {
					s.checkSecretKeys(t, cw+" env "+e.Name, r.Name, []string{r.Key})
				}
			}
			for _, e := range c.EnvFrom {
				if e.ConfigMapRef != nil {
					s.checkConfigMapKeys(t, cw+" envFrom", e.ConfigMapRef.Name, nil)
				}
				if e.SecretRef != nil {
					s.checkSecretKeys(t, cw+" envFrom", e.SecretRef.Name, nil)
				}
			}
			for _, vm := range c.VolumeMounts {
				if !volumes[vm.Name] {
					t.Errorf("%s: volumeMount %q names no volume", cw, vm.Name)
				}
			}
			for name, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe, "startup": c.StartupProbe} {
				if p == nil {
					continue
				}
				var port *intstr.IntOrString
				switch {
				case p.HTTPGet != nil:
					port = &p.HTTPGet.Port
				case p.TCPSocket != nil:
					port = &p.TCPSocket.Port
				case p.GRPC != nil:
					port = &intstr.IntOrString{IntVal: p.GRPC.Port}
				}
				if port != nil {
					if _, ok := ContainerPort(spec, *port); !ok {
						t.Errorf("%s: %s probe port %s is not a container port", cw, name, port.String())
					}
				}
			}
			for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				if _, ok := c.Resources.Requests[r]; !ok {
					t.Errorf("%s: no %s request", cw, r)
				}
				if _, ok := c.Resources.Limits[r]; !ok {
					t.Errorf("%s: no %s limit", cw, r)
				}
			}
			CheckRestricted(t, cw, spec.SecurityContext, c.SecurityContext)
		}
	}
}

// CheckRestricted checks what the "restricted" Pod Security Standard
// requires of a container (a namespace that enforces it would only refuse
// the pod at apply time).
func CheckRestricted(t testing.TB, where string, pod *corev1.PodSecurityContext, c *corev1.SecurityContext) {
	t.Helper()
	if c == nil {
		t.Errorf("%s: no securityContext", where)
		return
	}
	if c.AllowPrivilegeEscalation == nil || *c.AllowPrivilegeEscalation {
		t.Errorf("%s: allowPrivilegeEscalation must be false", where)
	}
	if c.Capabilities == nil || !slices.Contains(c.Capabilities.Drop, "ALL") || len(c.Capabilities.Add) > 0 {
		t.Errorf("%s: capabilities must drop ALL and add none", where)
	}
	seccomp := c.SeccompProfile
	if seccomp == nil && pod != nil {
		seccomp = pod.SeccompProfile
	}
	if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: seccompProfile must be RuntimeDefault", where)
	}
	if c.RunAsNonRoot == nil || !*c.RunAsNonRoot {
		t.Errorf("%s: runAsNonRoot must be true", where)
	}
}

func (s *Set) checkConfigMapKeys(t testing.TB, where, name string, keys []string) {
	t.Helper()
	cm, ok := s.ConfigMaps[name]
	if !ok {
		t.Errorf("%s: ConfigMap %q is not among the manifests", where, name)
		return
	}
	for _, k := range keys {
		if _, ok := cm.Data[k]; !ok {
			t.Errorf("%s: ConfigMap %q has no key %q", where, name, k)
		}
	}
}

func (s *Set) checkSecretKeys(t testing.TB, where, name string, keys []string) {
	t.Helper()
	sec, ok := s.Secrets[name]
	if !ok {
		t.Errorf("%s: Secret %q is not among the manifests", where, name)
		return
	}
	for _, k := range keys {
		_, inData := sec.Data[k]
		_, inString := sec.StringData[k]
		if !inData && !inString {
			t.Errorf("%s: Secret %q has no key %q", where, name, k)
		}
	}
}

func keysOf(items []corev1.KeyToPath) []string {
	var ks []string
	for _, it := range items {
		ks = append(ks, it.Key)
	}
	return ks
}

// ContainerPort finds the container port a Service targetPort or a probe
// port names, by name or number.
func ContainerPort(spec corev1.PodSpec, p intstr.IntOrString) (corev1.ContainerPort, bool) {
	for _, c := range spec.Containers {
		for _, cp := range c.Ports {
			if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
				return cp, true
			}
		}
	}
	return corev1.ContainerPort{}, false
}
