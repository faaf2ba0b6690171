// Package envoy holds the Envoy configuration that puts Throttle in front of an
// application, and the strict loader its tests use to prove that configuration.
//
// The folder's data files are what users copy:
//
//   - envoy.yaml: a front proxy (listener :10000) that asks Throttle, over gRPC,
//     whether each request may reach the sample app (domain "edge");
//   - envoy-rlqs.yaml: the same proxy with the rate_limit_quota filter instead:
//     Envoy enforces the shares of each limit that Throttle's rate-limit quota
//     service (RLQS) assigns, and reports usage to it;
//   - descriptors/edge.yaml: the limits for domain "edge", in the descriptor format
//     of Envoy's reference rate-limit service, read by Throttle from DESCRIPTORS_DIR;
//   - istio/: the same setup for an Istio ingress gateway (EnvoyFilter patches and
//     the descriptors ConfigMap).
//
// The Go code decodes Envoy YAML the way Envoy itself does, strictly: an unknown
// field, an unknown enum value or a typed_config whose type is not linked in is an
// error, and every message, including those inside typed_config, must pass its
// protoc-gen-validate rules.
package envoy
