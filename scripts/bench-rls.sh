#!/usr/bin/env bash
# bench-rls.sh — what `make bench-rls` runs, under scripts/with-test-services.sh.
#
# Builds bin/throttle and bin/rlsload, starts `throttle serve` on free
# loopback ports with counters in the test Redis ($THROTTLE_TEST_REDIS_URL)
# and the bench descriptors (rlsload -print-config), and drives its Envoy
# rate-limit service with bin/rlsload: every case (distinct, hot, multi4) ×
# algorithm with the local over-limit cache as the binary defaults it, the hot
# cases again with LOCAL_CACHE_SIZE_IN_BYTES=0 (a restarted server), and the
# INCRBY+EXPIRE floor straight to Redis. Prints a markdown summary at the end.
#
# Every run is bounded (BENCH_REQUESTS calls or BENCH_DURATION, whichever
# comes first) and uses its own descriptor values: Redis is never flushed.
#   BENCH_REQUESTS     calls per run (default 20000)
#   BENCH_DURATION     time bound per run (default 15s)
#   BENCH_CONCURRENCY  concurrent calls (default 64)
#   LOCAL_CACHE_SIZE_IN_BYTES, when set, is passed to the cache-on server.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "bench-rls: $*" >&2; }

if [ -z "${THROTTLE_TEST_REDIS_URL:-}" ]; then
  log "THROTTLE_TEST_REDIS_URL is not set: run me as scripts/with-test-services.sh $0 (make bench-rls)"
  exit 1
fi
redis_url=$THROTTLE_TEST_REDIS_URL
requests=${BENCH_REQUESTS:-20000}
duration=${BENCH_DURATION:-15s}
concurrency=${BENCH_CONCURRENCY:-64}
GO=${GO:-go}

work=$(mktemp -d /tmp/throttle-bench-rls.XXXXXX)
throttle_pid=""
rlsload_pid=""
stop_throttle() {
  if [ -n "$throttle_pid" ]; then
    kill "$throttle_pid" 2>/dev/null || true
    wait "$throttle_pid" 2>/dev/null || true
    throttle_pid=""
  fi
}
cleanup() {
  set +e
  [ -n "$rlsload_pid" ] && kill "$rlsload_pid" 2>/dev/null && wait "$rlsload_pid" 2>/dev/null
  stop_throttle
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

log "building bin/throttle and bin/rlsload"
mkdir -p bin
CGO_ENABLED=0 "$GO" build -trimpath -o bin/throttle ./cmd/throttle
CGO_ENABLED=0 "$GO" build -trimpath -o bin/rlsload ./cmd/rlsload

mkdir "$work/descriptors"
bin/rlsload -print-config >"$work/descriptors/bench.yaml"
bin/throttle config check "$work/descriptors/bench.yaml" >/dev/null

free_port() {
  python3 - <<'PY' 2>/dev/null || echo $((20000 + RANDOM % 20000))
import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()
PY
}

# start_throttle [NAME=value…]: a fresh `throttle serve` with only the
# settings given here (nothing leaks in from the caller's environment);
# sets throttle_pid and grpc_addr once /health answers.
start_throttle() {
  local http_port grpc_port
  http_port=$(free_port)
  grpc_port=$(free_port)
  env -i PATH="$PATH" HOME="${HOME:-/tmp}" \
    PORT="$http_port" GRPC_PORT="$grpc_port" BIND_ADDRESS=127.0.0.1 \
    REDIS_URL="$redis_url" DATABASE_URL="sqlite://$work/throttle.db" \
    DESCRIPTORS_DIR="$work/descriptors" LOG_LEVEL=warn SHUTDOWN_TIMEOUT=2s "$@" \
    bin/throttle serve >>"$work/throttle.log" 2>&1 &
  throttle_pid=$!
  grpc_addr=127.0.0.1:$grpc_port
  for _ in $(seq 1 300); do
    if ! kill -0 "$throttle_pid" 2>/dev/null; then
      log "throttle exited at start:"; cat "$work/throttle.log" >&2; exit 1
    fi
    curl -fsS "http://127.0.0.1:$http_port/health" 2>/dev/null | grep -q '"ok"' && return 0
    sleep 0.1
  done
  log "throttle did not answer /health in 30s:"; cat "$work/throttle.log" >&2
  exit 1
}

run_base=$(date +%s)-$$
n=0
# bench ARGS…: one bounded rlsload run; its RESULT line goes to the results.
# It runs in the background so that a signal to this script stops it at once.
bench() {
  n=$((n + 1))
  bin/rlsload -requests "$requests" -duration "$duration" -concurrency "$concurrency" \
    -redis "$redis_url" -run "$run_base-$n" "$@" >"$work/run.out" 2>&1 &
  rlsload_pid=$!
  local status=0
  wait "$rlsload_pid" || status=$?
  rlsload_pid=""
  cat "$work/run.out"
  [ "$status" = 0 ] || { log "rlsload $* failed (exit $status)"; exit 1; }
  cat "$work/run.out" >>"$work/out"
}

cache_knob=yes
if ! bin/throttle serve --help 2>&1 | grep -q LOCAL_CACHE_SIZE_IN_BYTES; then
  cache_knob=""
  log "note: this throttle has no LOCAL_CACHE_SIZE_IN_BYTES setting (it is ignored): cache on and off measure the same server"
fi

log "floor: pipelined INCRBY+EXPIRE straight to Redis"
bench -floor

cache_on=()
[ -n "${LOCAL_CACHE_SIZE_IN_BYTES:-}" ] && cache_on=("LOCAL_CACHE_SIZE_IN_BYTES=$LOCAL_CACHE_SIZE_IN_BYTES")
start_throttle "${cache_on[@]}"
for c in distinct hot multi4; do
  for alg in fixed_window sliding_window token_bucket gcra; do
    log "$c / $alg, local cache on"
    bench -addr "$grpc_addr" -pid "$throttle_pid" -case "$c" -algorithm "$alg" -cache on
  done
done
stop_throttle

start_throttle LOCAL_CACHE_SIZE_IN_BYTES=0
for alg in fixed_window sliding_window token_bucket gcra; do
  log "hot / $alg, local cache off"
  bench -addr "$grpc_addr" -pid "$throttle_pid" -case hot -algorithm "$alg" -cache off
done
stop_throttle

if grep -q '"level":"ERROR"' "$work/throttle.log"; then
  log "throttle logged errors (first 5):"
  grep '"level":"ERROR"' "$work/throttle.log" | head -5 >&2
fi

echo
echo "## make bench-rls"
echo
echo "$(nproc) CPUs, $(redis-server --version | cut -d' ' -f1-3), $("$GO" env GOVERSION), $(git describe --always --dirty 2>/dev/null || echo unknown), $(date -u +%Y-%m-%dT%H:%MZ)."
echo "Per run: $requests calls or $duration, whichever first; $concurrency concurrent calls; loopback; client, Throttle and Redis share the machine."
[ -z "$cache_knob" ] && echo "This throttle has no LOCAL_CACHE_SIZE_IN_BYTES: the cache on/off rows measure the same server."
echo
grep '^RESULT ' "$work/out" | awk '
  {
    delete f
    for (i = 2; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = substr($i, length(kv[1]) + 2) }
    rows++
    for (k in f) r[rows, k] = f[k]
    if (f["case"] == "floor") floor = f["redis_us_per_decision"]
  }
  function ratio(v) { return (v == "-" || floor == "" || floor == 0) ? "-" : sprintf("%.2f", v / floor) }
  END {
    print "| case | algorithm | local cache | req/s | p50 µs | p99 µs | p99.9 µs | Throttle CPU µs/req | Redis CPU µs/decision | × floor | engine µs/command | engine µs/decision | OK | OVER | errors |"
    print "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
    for (i = 1; i <= rows; i++) {
      errs = r[i, "errors"]
      if (r[i, "error_codes"] != "-") errs = errs " (" r[i, "error_codes"] ")"
      printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
        r[i, "case"], r[i, "alg"], r[i, "cache"], r[i, "rps"], r[i, "p50_us"], r[i, "p99_us"], r[i, "p999_us"],
        r[i, "cpu_us_per_req"], r[i, "redis_us_per_decision"], ratio(r[i, "redis_us_per_decision"]),
        r[i, "engine_usec_per_call"], r[i, "engine_us_per_decision"], r[i, "ok"], r[i, "over"], errs
    }
  }'
echo
echo "Redis CPU is INFO used_cpu_user+used_cpu_sys of the whole server per decision (a multi4 call is 4 decisions);"
echo "× floor divides it by the floor row (pipelined INCRBY+EXPIRE per op, same concurrency, distinct keys)."
echo "engine µs is INFO commandstats usec (wall time inside Redis) of the commands Throttle decides with: FCALL/EVALSHA/EVAL for token bucket and gcra (one call decides a coalesced batch); for fixed and sliding windows (an Envoy descriptor's counters, without the script) the plain commands SET/INCRBY/PEXPIRE/GET/TIME and the refund script; floor: INCRBY+EXPIRE."
echo "Throttle CPU is utime+stime of the throttle process (/proc/PID/stat) per call."
