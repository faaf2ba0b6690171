# Throttle — make targets. `make test` starts its own Redis and PostgreSQL.
GO ?= go
BIN ?= bin/throttle
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)

.PHONY: run build release reference-settings test test-short bench bench-overload bench-rls bench-cluster bench-tls lint fmt

run: ## run Throttle with the embedded default (memory counters, SQLite)
	$(GO) run ./cmd/throttle serve

build: ## build a static binary into bin/throttle
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/throttle

release: ## what the release workflow builds for a tag, into dist/: binaries for linux and darwin, amd64 and arm64, and the Helm chart (VERSION=v1.2.3; IMAGE, default ghcr.io/throttle-rl/throttle)
	scripts/release-binaries.sh $(VERSION) dist
	$(GO) run ./cmd/releasechart -version $(VERSION) -image $(or $(IMAGE),ghcr.io/throttle-rl/throttle) -out dist

# The tests of several packages build ./cmd/throttle as a user does
# (internal/testkit/throttletest) while go test runs packages side by side:
# compiled once first, they only link it. go test starts packages in the
# order given, the longest first (at go test's own -p, one per core: the
# timing-sensitive tests of cmd/throttle are not made to share the CPU more).
TEST_FIRST := ./cmd/throttle ./algorithms/redisstore ./restapi ./quotasvc ./cmd/releasechart
test: ## every test, with -race, against a throw-away Redis and PostgreSQL
	CGO_ENABLED=0 $(GO) build -trimpath -o /dev/null ./cmd/throttle
	scripts/with-test-services.sh $(GO) test -race -count=1 -timeout 20m $(TEST_FIRST) ./...

reference-settings: ## write cmd/throttle/testdata/reference-settings.txt anew from a checkout of envoyproxy/ratelimit (REFERENCE_SRC), then check the settings table against it
	scripts/reference-settings.sh $(REFERENCE_SRC) > cmd/throttle/testdata/reference-settings.txt
	$(GO) test -count=1 -run 'TestReferenceSettings|TestReferenceTableDocumented' ./cmd/throttle

bench: ## benchmarks of the engine against memory and a throw-away Redis
	scripts/with-test-services.sh $(GO) test -run '^$$' -bench . -benchmem -benchtime 2s ./algorithms/ ./ratelimitsvc/

bench-overload: ## 3 replicas of the built binary on a throw-away Redis and PostgreSQL, REST and gRPC at rising concurrency: checks/s, p50/p99, admitted vs limit, degraded and shed
	scripts/with-test-services.sh $(GO) test -run '^$$' -bench Overload -benchtime 4000x -timeout 20m ./cmd/throttle/

bench-rls: ## the built binary's Envoy rate-limit service on a throw-away Redis, driven by cmd/rlsload: req/s, p50/p99/p999, Throttle CPU per request, Redis CPU per decision vs a plain INCRBY+EXPIRE pipeline; distinct keys, a hot key, 4 descriptors, each algorithm, local cache on and off (BENCH_REQUESTS, BENCH_DURATION, BENCH_CONCURRENCY)
	scripts/with-test-services.sh scripts/bench-rls.sh

lint: ## gofmt and go vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

.PHONY: kind-demo
kind-demo: ## Throttle + Envoy + sample app on a local kind cluster, then 200s and 429s through Envoy (needs docker, kind, kubectl)
	k8s/kind-demo.sh

bench-cluster: ## decisions/s, Redis CPU per decision (all masters) and Throttle CPU per decision of the built binary on a Redis Cluster of 1 and of 3 masters (gRPC, distinct keys, 64 in flight)
	scripts/with-test-services.sh $(GO) test -run '^$$' -bench ClusterScale -benchtime 40000x -timeout 20m ./cmd/throttle/

bench-tls: ## Throttle's CPU per call with mTLS on the gRPC port vs plaintext: the built binary on a throw-away Redis, cmd/rlsload at 64 in flight over 2 and 64 connections, 8 alternating rounds of BENCH_REQUESTS calls (default 30000)
	scripts/with-test-services.sh $(GO) test -run '^$$' -bench TLSCost -benchtime 8x -timeout 30m ./cmd/rlsload/
