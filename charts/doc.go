// Package charts holds Throttle's Helm chart (throttle/: `helm install
// throttle ./charts/throttle`) and its tests, which render the chart with
// Helm's own library for the default values and a table of value sets,
// decode every object strictly into its Kubernetes API type (the Prometheus
// Operator's for the ServiceMonitor, Envoy's protos for the EnvoyFilter's
// patches), check that the objects refer to each other, that bad values fail
// naming the value, and run the real binary with the environment the chart
// gives its pod.
package charts
