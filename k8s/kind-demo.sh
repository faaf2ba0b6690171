#!/usr/bin/env bash
# kind-demo.sh — Throttle on a local kind cluster, with Envoy in front of a sample
# app, then 15 requests through Envoy as one user: 200s until the per-user limit
# (10 a minute, envoy/descriptors/edge.yaml), then 429s.
#
# Needs docker (with a running engine), kind and kubectl. Run from anywhere:
#   make kind-demo            # or: k8s/kind-demo.sh
# Settings (environment): KIND_CLUSTER (default throttle), DEMO_URL (default
# http://localhost:8080, the host port in k8s/kind-config.yaml), REQUESTS (15).
# Clean up with: kind delete cluster --name throttle
set -euo pipefail

cluster=${KIND_CLUSTER:-throttle}
url=${DEMO_URL:-http://localhost:8080}
requests=${REQUESTS:-15}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

say() { printf '\n==> %s\n' "$*"; }
die() { printf 'kind-demo: %s\n' "$*" >&2; exit 1; }

for tool in docker kind kubectl curl; do
	command -v "$tool" >/dev/null 2>&1 || die "'$tool' is not installed or not on PATH.
  docker:  https://docs.docker.com/get-docker/
  kind:    https://kind.sigs.k8s.io/docs/user/quick-start/#installation
  kubectl: https://kubernetes.io/docs/tasks/tools/
  curl:    your package manager"
done
docker info >/dev/null 2>&1 || die "docker is installed but its engine is not reachable (is the Docker daemon running?)"

say "Building images throttle:dev and throttle-sampleapp:dev"
docker build -t throttle:dev .
docker build -t throttle-sampleapp:dev -f examples/sampleapp/Dockerfile .

if kind get clusters 2>/dev/null | grep -qx "$cluster"; then
	say "Using existing kind cluster '$cluster'"
else
	say "Creating kind cluster '$cluster'"
	kind create cluster --name "$cluster" --config k8s/kind-config.yaml --wait 120s
fi
kubectl() { command kubectl --context "kind-$cluster" "$@"; }

say "Loading images into the cluster"
kind load docker-image --name "$cluster" throttle:dev throttle-sampleapp:dev

say "Applying k8s/"
kubectl apply -k k8s/
# A new image under the same tag: make running pods pick it up.
kubectl -n throttle rollout restart deployment/throttle deployment/app >/dev/null

say "Waiting for the rollout"
kubectl -n throttle rollout status statefulset/postgres --timeout=180s
kubectl -n throttle rollout status deployment/redis --timeout=120s
kubectl -n throttle rollout status deployment/throttle --timeout=180s
kubectl -n throttle rollout status deployment/app --timeout=120s
kubectl -n throttle rollout status deployment/envoy --timeout=180s
kubectl -n throttle get pods -o wide

say "Waiting for Envoy at $url"
for i in $(seq 1 60); do
	if curl -fsS -o /dev/null "$url/"; then break; fi
	[ "$i" -lt 60 ] || die "Envoy did not answer at $url; see: kubectl -n throttle logs deploy/envoy"
	sleep 2
done

user="demo-$(date +%s)"
say "Sending $requests requests as x-user-id: $user (limit: 10 a minute per user)"
ok=0 limited=0
for i in $(seq 1 "$requests"); do
	code=$(curl -s -o /dev/null -w '%{http_code}' -H "x-user-id: $user" "$url/")
	case "$code" in
	200) ok=$((ok + 1)) ;;
	429) limited=$((limited + 1)) ;;
	esac
	printf 'request %2d: HTTP %s\n' "$i" "$code"
done

say "Headers of one more request"
curl -s -o /dev/null -D - -H "x-user-id: $user" "$url/" | grep -iE '^(HTTP|x-ratelimit|retry-after)' || true

say "Result: $ok × 200, $limited × 429"
if [ "$limited" -eq 0 ]; then
	die "no request was limited; see: kubectl -n throttle logs deploy/throttle"
fi
cat <<MSG

Try more:
  curl -i -H 'x-user-id: alice' $url/
  kubectl -n throttle port-forward svc/throttle 18080:8080   # REST API, /metrics
  kubectl -n throttle edit configmap throttle-descriptors    # change a limit; Throttle reloads it
Clean up:
  kind delete cluster --name $cluster
MSG
