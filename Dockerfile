# syntax=docker/dockerfile:1
# Throttle: a static binary on distroless, as user 65532 (nonroot).
#   docker build -t throttle:dev .
#   docker run --rm -p 8080:8080 -p 8081:8081 throttle:dev
# With no settings it keeps counters in memory and its SQLite file in /data
# (throttle.db in its working directory); run as /bin/ratelimit it keeps no
# file (DATABASE_URL sqlite://:memory: unless given), so the reference's
# deployments, with a read-only root filesystem, need no volume.
# Multi-arch (the release workflow): docker buildx build --platform
# linux/amd64,linux/arm64 --build-arg VERSION=v1.2.3 . — Go cross-compiles
# on the build machine's platform, so no stage runs emulated.
FROM --platform=$BUILDPLATFORM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
ARG TARGETOS TARGETARCH
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/throttle ./cmd/throttle \
 && mkdir -p /out/data /out/bin \
 && ln -s /throttle /out/bin/ratelimit

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/throttle /throttle
# /bin/ratelimit, the binary of Envoy's reference service (envoyproxy/ratelimit):
# its deployments run it with no arguments (Istio's sample, Envoy Gateway), and
# Throttle under that name is `throttle serve` reading the reference's settings.
COPY --from=build /out/bin/ /bin/
COPY --from=build --chown=65532:65532 /out/data /data
WORKDIR /data
USER 65532:65532
# 8080 REST (/check, /metrics, /health), 8081 gRPC (Envoy rate-limit service).
# No HEALTHCHECK: distroless has no shell or curl; orchestrators probe /health.
EXPOSE 8080 8081
ENTRYPOINT ["/throttle"]
CMD ["serve"]
