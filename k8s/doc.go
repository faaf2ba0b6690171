// Package k8s holds Throttle's Kubernetes manifests and the kind demo
// (kind-demo.sh, `make kind-demo`): Throttle with Redis and PostgreSQL, and Envoy
// in front of a sample app asking Throttle before each request.
//
// The manifests are plain YAML applied with `kubectl apply -k k8s/`. The test
// decodes each strictly into its k8s.io/api type and checks that they refer to
// each other correctly (selectors, ports, ConfigMaps, Secrets, probes, the
// Envoy configuration).
package k8s
