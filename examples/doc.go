// Package examples holds ways to use Throttle, each tested against a real
// server by examples_test.go:
//
//   - sampleapp/: the hello app the Envoy, Compose and Kubernetes demos put behind Envoy;
//   - client/: a Go client and net/http middleware (package throttleclient);
//   - python/check.py, node/check.js, curl.sh: the REST API from other languages.
//
// See README.md.
package examples
