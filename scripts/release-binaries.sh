#!/usr/bin/env bash
# release-binaries.sh VERSION OUTDIR
#
# Builds the release binaries of `throttle` for linux and darwin, amd64 and
# arm64: static (no cgo), -trimpath, `throttle version` printing VERSION (a
# tag such as v1.2.3). Writes OUTDIR/throttle_VERSION_OS_ARCH.tar.gz (the
# binary, README.md) for each, and OUTDIR/checksums.txt (SHA-256).
# The release workflow (.github/workflows/release.yml) runs it on a tag,
# `make release VERSION=v1.2.3` by hand, and cmd/releasechart/release_test.go in
# the tests, for the test machine's target alone. RELEASE_TARGETS (os/arch
# words) builds fewer.
set -euo pipefail

version=${1:?usage: release-binaries.sh VERSION OUTDIR}
out=${2:?usage: release-binaries.sh VERSION OUTDIR}
targets=${RELEASE_TARGETS:-linux/amd64 linux/arm64 darwin/amd64 darwin/arm64}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cd "$root"
archives=()
for target in $targets; do
  os=${target%/*}
  arch=${target#*/}
  name="throttle_${version}_${os}_${arch}"
  mkdir -p "$work/$name"
  echo "release-binaries: $os/$arch" >&2
  CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath \
    -ldflags "-s -w -X main.version=$version" -o "$work/$name/throttle" ./cmd/throttle
  cp README.md "$work/$name/"
  tar -C "$work" -czf "$out/$name.tar.gz" "$name"
  archives+=("$name.tar.gz")
done
(cd "$out" && sha256sum "${archives[@]}" > checksums.txt)
