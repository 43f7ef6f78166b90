#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Benchmark (not a test): coordinated omission made visible. One probe connection runs through
# a forced 500 ms server stall (DEBUG SLEEP from another connection, mid-run), first closed-loop,
# then open-loop at RATE req/s. The closed loop records the stall as a single slow sample, so its
# p99 and p99.9 stay at the service time; the corrected open loop charges every request that was
# due during the stall, so its p99/p99.9 see it. The open loop's uncorrected service time is
# printed too: the same requests measured the closed-loop way.
# Usage: open_vs_closed_loop.sh LOADGEN_BINARY
#   LOADGEN_BINARY: build/userspace/cli/thptrace-bench (or thptrace, which runs it), or
#   build/tests/bench/loadgen_driver.
# Tunables (environment): RATE=1000 DURATION=6 STALL_AT=2.5 STALL=0.5 KEYS=100000 VALUE_SIZE=400
#   PORT=6390
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
source "$here/redis_lib.sh"

[ $# -eq 1 ] || { echo "usage: $0 LOADGEN_BINARY" >&2; exit 2; }
bench_loadgen_cmd "$1"
for tool in redis-server redis-cli jq; do
  command -v "$tool" >/dev/null || { echo "$0: $tool is missing (scripts/install-deps.sh installs it)." >&2; exit 1; }
done

rate=${RATE:-1000}
duration=${DURATION:-6}
stall_at=${STALL_AT:-2.5}
stall=${STALL:-0.5}
keys=${KEYS:-100000}
value_size=${VALUE_SIZE:-400}

work=$(mktemp -d /tmp/thptrace-bench.XXXXXX)
cleanup() { bench_stop_redis; rm -rf "$work"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

port=$(bench_free_port "${PORT:-6390}")
# Redis 7 refuses DEBUG unless enabled; "local" allows it from loopback only.
bench_start_redis "$port" "$work" --enable-debug-command local
"${LOADGEN[@]}" --port "$port" --keys "$keys" --value-size "$value_size" --load-only >/dev/null

# run_through_stall NAME [loadgen flags...]: the probe runs DURATION s; the stall hits at STALL_AT s.
run_through_stall() {
  local name=$1
  shift
  "${LOADGEN[@]}" --port "$port" --no-load --keys "$keys" --value-size "$value_size" \
    --duration "$duration" --json "$work/$name.json" "$@" >/dev/null &
  local loadgen_pid=$!
  sleep "$stall_at"
  redis-cli -p "$port" DEBUG SLEEP "$stall" >/dev/null
  wait "$loadgen_pid"
}

run_through_stall closed
run_through_stall open --rate "$rate"

echo "probe through a ${stall}s DEBUG SLEEP at ${stall_at}s of a ${duration}s run (redis-server on 127.0.0.1:$port)"
printf '%-36s %9s %12s %12s %12s %12s\n' "" requests "p50 (ms)" "p99 (ms)" "p99.9 (ms)" "max (ms)"
row() {
  jq -r --arg name "$1" "$2"' as $h | [$name, $h.count, $h.p50/1000, $h.p99/1000, $h.p99_9/1000, $h.max/1000]
    | "\(.[0])\t\(.[1])\t\(.[2])\t\(.[3])\t\(.[4])\t\(.[5])"' "$3" |
    awk -F'\t' '{ printf "%-36s %9d %12.3f %12.3f %12.3f %12.3f\n", $1, $2, $3, $4, $5, $6 }'
}
row "closed loop" .probe.latency "$work/closed.json"
row "open loop $rate/s, corrected" .probe.latency "$work/open.json"
row "open loop $rate/s, uncorrected" .probe.service_time "$work/open.json"
closed_p999=$(jq '.probe.latency.p99_9' "$work/closed.json")
open_p999=$(jq '.probe.latency.p99_9' "$work/open.json")
awk -v c="$closed_p999" -v o="$open_p999" -v s="$stall" 'BEGIN {
  printf "p99.9 corrected open / closed: %.0fx; the open loop %s the %.0f ms stall in its p99.9\n",
    o / c, (o >= 0.5 * s * 1e6 ? "sees" : "does NOT see"), s * 1000 }'
