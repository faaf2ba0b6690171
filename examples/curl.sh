#!/usr/bin/env bash
# Throttle's REST API with curl: register (unless THROTTLE_API_KEY is set), then
# check one identifier COUNT times against a limit of LIMIT per WINDOW seconds.
#
#   examples/curl.sh                               # against http://localhost:8080
#   THROTTLE_URL=http://localhost:8080 COUNT=5 LIMIT=3 examples/curl.sh
set -euo pipefail

url=${THROTTLE_URL:-http://localhost:8080}
count=${COUNT:-5}
limit=${LIMIT:-3}
window=${WINDOW:-60}
identifier=${IDENTIFIER:-user_123}

echo "# GET $url/health"
curl -sS "$url/health"
echo

key=${THROTTLE_API_KEY:-}
if [ -z "$key" ]; then
	# A name and email of this run's own, to tell its client from the
	# others the server keeps (./throttle.db).
	run="$(date +%s)-$$"
	echo "# POST $url/register"
	reply=$(curl -sS -X POST "$url/register" -w '\n%{http_code}' \
		-H 'Content-Type: application/json' \
		-d "{\"name\": \"curl-example-$run\", \"email\": \"curl-$run@example.com\", \"default_algorithm\": \"fixed_window\"}")
	status=${reply##*$'\n'}
	reply=${reply%$'\n'*}
	echo "$reply"
	if [ "$status" != 201 ]; then
		echo "register: HTTP $status (the reply above says why; 429: too many registrations from this address, retry later or set THROTTLE_API_KEY)" >&2
		exit 1
	fi
	key=$(printf '%s' "$reply" | sed -n 's/.*"api_key" *: *"\([^"]*\)".*/\1/p')
	[ -n "$key" ] || { echo "register: no api_key in the reply" >&2; exit 1; }
	echo "# export THROTTLE_API_KEY=$key   (shown once: keep it)"
fi

for i in $(seq 1 "$count"); do
	echo "# POST $url/check ($i of $count)"
	# -i shows the X-RateLimit-* headers, and Retry-After once rejected.
	curl -sS -i -X POST "$url/check" \
		-H "X-API-Key: $key" \
		-H 'Content-Type: application/json' \
		-d "{\"identifier\": \"$identifier\", \"limit\": $limit, \"window\": $window, \"algorithm\": \"fixed_window\"}"
	echo
done
