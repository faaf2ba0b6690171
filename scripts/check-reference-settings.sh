#!/usr/bin/env bash
# check-reference-settings.sh REFERENCE_SRC
#
# Compares the settings of Envoy's reference rate-limit service, as its
# src/settings/settings.go declares them (envconfig:"NAME" default:"…"), with
# the table of docs/moving-from-envoy-ratelimit.md (generated from the rows
# of cmd/throttle's serveSettings): the same names, in the same order, with
# the same defaults. REFERENCE_SRC is a checkout of github.com/envoyproxy/ratelimit.
# Exits 1 and prints the difference when they differ.
set -euo pipefail
src=${1:?usage: $0 REFERENCE_SRC}
cd "$(dirname "$0")/.."
ref=$(grep -o 'envconfig:"[A-Z_0-9]*"[^`]*' "$src/src/settings/settings.go" |
  sed -E 's/envconfig:"([A-Z_0-9]*)"( default:"([^"]*)")?.*/\1 \3/' | sed -E 's/ $/ (empty)/')
ours=$(grep -E '^\| `[A-Z_0-9]+` \| ' docs/moving-from-envoy-ratelimit.md |
  sed -E 's/^\| `([A-Z_0-9]+)` \| (`([^`]*)`|empty) \|.*/\1 \3/' | sed -E 's/ $/ (empty)/')
if diff <(echo "$ref") <(echo "$ours"); then
  echo "docs/moving-from-envoy-ratelimit.md lists the $(echo "$ref" | wc -l) settings of $src, with their defaults"
else
  echo "docs/moving-from-envoy-ratelimit.md differs from $src/src/settings/settings.go (< the reference, > the docs)" >&2
  exit 1
fi
