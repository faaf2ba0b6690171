#!/bin/sh
# reference-settings.sh SRC: the settings of Envoy's reference rate-limit
# service (envoyproxy/ratelimit) checked out at SRC, one "NAME default" per
# line in the order of its src/settings/settings.go: what
# cmd/throttle/testdata/reference-settings.txt holds, and TestReferenceSettings
# checks serveSettings' reference column against (`make reference-settings`).
set -eu
src=${1:?usage: reference-settings.sh PATH-TO-envoyproxy/ratelimit}
grep -o 'envconfig:"[A-Z_0-9]*"[^`]*' "$src/src/settings/settings.go" |
	sed -E 's/envconfig:"([A-Z_0-9]*)"( default:"([^"]*)")?.*/\1 \3/; s/ $//'
