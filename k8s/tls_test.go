package k8s_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/proto"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"sigs.k8s.io/yaml"

	"github.com/throttle-rl/throttle/envoy"
	"github.com/throttle-rl/throttle/internal/testkit"
	"github.com/throttle-rl/throttle/internal/testkit/manifest"
	"github.com/throttle-rl/throttle/internal/testkit/strictyaml"
)

// certManagerObject is an Issuer or Certificate of cert-manager.io/v1, the
// fields k8s/tls uses, decoded strictly.
type certManagerObject struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Spec struct {
		// Issuer
		SelfSigned *struct{} `json:"selfSigned,omitempty"`
		CA         *struct {
			SecretName string `json:"secretName"`
		} `json:"ca,omitempty"`
		// Certificate
		IsCA        bool     `json:"isCA,omitempty"`
		CommonName  string   `json:"commonName,omitempty"`
		SecretName  string   `json:"secretName,omitempty"`
		DNSNames    []string `json:"dnsNames,omitempty"`
		URIs        []string `json:"uris,omitempty"`
		Usages      []string `json:"usages,omitempty"`
		Duration    string   `json:"duration,omitempty"`
		RenewBefore string   `json:"renewBefore,omitempty"`
		PrivateKey  *struct {
			Algorithm      string `json:"algorithm"`
			Size           int    `json:"size"`
			RotationPolicy string `json:"rotationPolicy,omitempty"`
		} `json:"privateKey,omitempty"`
		IssuerRef *struct {
			Name string `json:"name"`
			Kind string `json:"kind"`
		} `json:"issuerRef,omitempty"`
	} `json:"spec"`
}

// tlsOverlay is k8s/tls applied to the base manifests: the patched
// Deployments and ConfigMap, and the cert-manager objects by name.
type tlsOverlay struct {
	deployments  map[string]*appsv1.Deployment
	envoyConfig  *corev1.ConfigMap
	certificates map[string]certManagerObject
	issuers      map[string]certManagerObject
}

func loadTLSOverlay(t *testing.T) tlsOverlay {
	t.Helper()
	var kz struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Resources  []string `json:"resources"`
		Patches    []struct {
			Path string `json:"path"`
		} `json:"patches"`
	}
	if err := strictyaml.Unmarshal(testkit.MustRead(t, "tls/kustomization.yaml"), &kz); err != nil {
		t.Fatalf("tls/kustomization.yaml: %v", err)
	}
	if !slices.Equal(kz.Resources, []string{"../", "certificates.yaml"}) {
		t.Fatalf("tls/kustomization.yaml resources %v, want the base and certificates.yaml", kz.Resources)
	}
	base := loadManifests(t)
	o := tlsOverlay{deployments: map[string]*appsv1.Deployment{}, certificates: map[string]certManagerObject{}, issuers: map[string]certManagerObject{}}
	for _, doc := range manifest.Split(testkit.MustRead(t, "tls/certificates.yaml")) {
		var obj certManagerObject
		if err := strictyaml.Unmarshal(doc, &obj); err != nil {
			t.Fatalf("tls/certificates.yaml: %v", err)
		}
		if obj.APIVersion != "cert-manager.io/v1" || obj.Metadata.Namespace != namespace {
			t.Errorf("%s %s: %s in %q, want cert-manager.io/v1 in %s", obj.Kind, obj.Metadata.Name, obj.APIVersion, obj.Metadata.Namespace, namespace)
		}
		switch obj.Kind {
		case "Certificate":
			o.certificates[obj.Metadata.Name] = obj
		case "Issuer":
			o.issuers[obj.Metadata.Name] = obj
		default:
			t.Errorf("tls/certificates.yaml: kind %s", obj.Kind)
		}
	}
	for _, p := range kz.Patches {
		for i, doc := range manifest.Split(testkit.MustRead(t, filepath.Join("tls", p.Path))) {
			where := fmt.Sprintf("tls/%s document %d", p.Path, i)
			var head struct {
				Kind     string                `json:"kind"`
				Metadata struct{ Name string } `json:"metadata"`
			}
			if err := yaml.Unmarshal(doc, &head); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			switch head.Kind {
			case "Deployment":
				d := base.Deployments[head.Metadata.Name]
				if d == nil {
					t.Fatalf("%s patches Deployment %s, which the base lacks", where, head.Metadata.Name)
				}
				o.deployments[d.Name] = patched(t, where, d, doc, &appsv1.Deployment{})
			case "ConfigMap":
				cm := base.ConfigMaps[head.Metadata.Name]
				if cm == nil {
					t.Fatalf("%s patches ConfigMap %s, which the base lacks", where, head.Metadata.Name)
				}
				o.envoyConfig = patched(t, where, cm, doc, &corev1.ConfigMap{})
			default:
				t.Fatalf("%s: a patch of a %s", where, head.Kind)
			}
		}
	}
	return o
}

// patched applies the strategic merge patch doc to base as kustomize does,
// and decodes the result strictly into out.
func patched[T any](t *testing.T, where string, base any, doc []byte, out *T) *T {
	t.Helper()
	orig, err := json.Marshal(base)
	if err != nil {
		t.Fatal(err)
	}
	patch, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	merged, err := strategicpatch.StrategicMergePatch(orig, patch, out)
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	if err := strictyaml.Unmarshal(merged, out); err != nil {
		t.Fatalf("%s: the patched object: %v", where, err)
	}
	return out
}

// secretMount is the folder a container mounts Secret name at.
func secretMount(t *testing.T, d *appsv1.Deployment, name string) string {
	t.Helper()
	for _, vm := range d.Spec.Template.Spec.Containers[0].VolumeMounts {
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name == vm.Name && v.Secret != nil && v.Secret.SecretName == name {
				if !vm.ReadOnly || vm.SubPath != "" || len(v.Secret.Items) != 0 {
					t.Errorf("Deployment %s mounts Secret %s read-only %v, subPath %q, items %v; want it whole and read-only (renewals reach only such a mount)",
						d.Name, name, vm.ReadOnly, vm.SubPath, v.Secret.Items)
				}
				return vm.MountPath
			}
		}
	}
	t.Errorf("Deployment %s does not mount Secret %s", d.Name, name)
	return "\x00"
}

// TestTLSOverlay: k8s/tls turns on mTLS between Envoy and Throttle with
// cert-manager's Secrets: each Deployment mounts its side's Secret where
// its settings (Throttle's) or bootstrap (Envoy's) look for the files; the
// names each side checks are the ones the other's Certificate carries; the
// startup probe no longer speaks gRPC; the bootstrap is envoy-mtls.yaml
// with in-cluster addresses.
func TestTLSOverlay(t *testing.T) {
	o := loadTLSOverlay(t)
	throttleCert, envoyCert := o.certificates["throttle-tls"], o.certificates["envoy-tls"]
	if throttleCert.Spec.SecretName == "" || envoyCert.Spec.SecretName == "" {
		t.Fatalf("want Certificates throttle-tls and envoy-tls with Secrets, got %v", o.certificates)
	}
	for _, c := range o.certificates {
		issuer, ok := o.issuers[c.Spec.IssuerRef.Name]
		if !ok || c.Spec.IssuerRef.Kind != "Issuer" {
			t.Errorf("Certificate %s: issuer %+v is not an Issuer here", c.Metadata.Name, c.Spec.IssuerRef)
		}
		if !c.Spec.IsCA && (issuer.Spec.CA == nil || o.certificates[issuer.Spec.CA.SecretName].Spec.IsCA != true) {
			t.Errorf("Certificate %s is not signed by the CA Issuer", c.Metadata.Name)
		}
	}

	// Throttle: the settings name files of the mounted throttle-tls Secret.
	d := o.deployments["throttle"]
	c := d.Spec.Template.Spec.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	dir := secretMount(t, d, throttleCert.Spec.SecretName)
	for name, file := range map[string]string{"GRPC_SERVER_TLS_CERT": "tls.crt", "GRPC_SERVER_TLS_KEY": "tls.key", "GRPC_CLIENT_TLS_CACERT": "ca.crt"} {
		if env[name] != dir+"/"+file {
			t.Errorf("%s = %q, want %s/%s (Secret %s)", name, env[name], dir, file, throttleCert.Spec.SecretName)
		}
	}
	if env["GRPC_SERVER_USE_TLS"] != "true" {
		t.Errorf("GRPC_SERVER_USE_TLS = %q", env["GRPC_SERVER_USE_TLS"])
	}
	if san := env["GRPC_CLIENT_TLS_SAN"]; !slices.Contains(envoyCert.Spec.URIs, san) && !slices.Contains(envoyCert.Spec.DNSNames, san) {
		t.Errorf("GRPC_CLIENT_TLS_SAN %q is not a SAN of Certificate envoy-tls (%v %v)", san, envoyCert.Spec.DNSNames, envoyCert.Spec.URIs)
	}
	for name := range env {
		if !slices.Contains(settings, name) && !slices.Contains(tlsSettings, name) && name != "GOMEMLIMIT" {
			t.Errorf("env %s is not one of Throttle's settings", name)
		}
	}
	if p := c.StartupProbe; p == nil || p.GRPC != nil || p.HTTPGet == nil || p.HTTPGet.Path != "/health" || p.PeriodSeconds != 2 {
		t.Errorf("startupProbe %+v: want GET /health (the kubelet's gRPC probe has no TLS), the base's timing kept", p)
	}
	if !slices.Contains(throttleCert.Spec.Usages, "server auth") || !slices.Contains(envoyCert.Spec.Usages, "client auth") {
		t.Errorf("usages: throttle-tls %v, envoy-tls %v; want server auth and client auth", throttleCert.Spec.Usages, envoyCert.Spec.Usages)
	}

	// Envoy: its bootstrap reads the files of the mounted envoy-tls Secret,
	// and checks a name Throttle's Certificate carries.
	b, err := envoy.LoadBootstrap([]byte(o.envoyConfig.Data["envoy.yaml"]))
	if err != nil {
		t.Fatalf("envoy-config envoy.yaml: %v", err)
	}
	edir := secretMount(t, o.deployments["envoy"], envoyCert.Spec.SecretName)
	text := o.envoyConfig.Data["envoy.yaml"]
	for _, f := range []string{"tls.crt", "tls.key", "ca.crt"} {
		if !strings.Contains(text, "filename: "+edir+"/"+f) {
			t.Errorf("Envoy's bootstrap does not read %s/%s", edir, f)
		}
	}
	if !strings.Contains(text, "matcher: { exact: throttle }") || !slices.Contains(throttleCert.Spec.DNSNames, "throttle") {
		t.Errorf("Envoy checks for the name throttle; Certificate throttle-tls has %v", throttleCert.Spec.DNSNames)
	}
	mtls, err := envoy.LoadBootstrap(testkit.MustRead(t, "../envoy/envoy-mtls.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*clusterv3.Cluster{}
	for _, c := range b.GetStaticResources().GetClusters() {
		byName[c.GetName()] = c
	}
	for _, c := range mtls.GetStaticResources().GetClusters() {
		c.LoadAssignment = byName[c.GetName()].GetLoadAssignment()
	}
	if !proto.Equal(mtls, b) {
		t.Error("k8s/tls/envoy-tls.yaml's bootstrap differs from envoy/envoy-mtls.yaml in more than cluster addresses")
	}
}

// tlsSettings are Throttle's TLS settings (the reference service's names).
var tlsSettings = []string{"GRPC_SERVER_USE_TLS", "GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY", "GRPC_CLIENT_TLS_CACERT", "GRPC_CLIENT_TLS_SAN",
	"HTTP_TLS_CERT", "HTTP_TLS_KEY", "HTTP_CLIENT_TLS_CACERT", "REDIS_TLS_CACERT", "REDIS_TLS_CLIENT_CERT", "REDIS_TLS_CLIENT_KEY", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"}
