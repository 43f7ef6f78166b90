#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Benchmark (not a test): thptrace loadgen against redis-benchmark on the same throw-away
# redis-server, at the same number of connections and pipeline depth.
#   1. throughput: CONNECTIONS writers pipelining PIPELINE SETs of VALUE_SIZE bytes over KEYS
#      random keys; prints loadgen / redis-benchmark (goal >= 1.0: the load generator must not be
#      the bottleneck of the experiments);
#   2. latency at low load: one connection, no pipelining, closed loop; prints p50/p99 of both,
#      which should agree (same server, same loopback: any gap is the client's own overhead).
# Usage: loadgen_vs_redis_benchmark.sh LOADGEN_BINARY
#   LOADGEN_BINARY: build/userspace/cli/thptrace-bench (or thptrace, which runs it), or
#   build/tests/bench/loadgen_driver.
# Tunables (environment): CONNECTIONS=6 PIPELINE=80 KEYS=100000 VALUE_SIZE=400 DURATION=3 ROUNDS=5
#   REQUESTS (redis-benchmark's throughput run, default 1500000) LOW_LOAD_REQUESTS=200000 PORT=6390
# Client and server share the machine (2 cores here), so the client's own CPU cost shows up as
# server throughput: that is what the ratio measures. Compare numbers from one run only.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
source "$here/redis_lib.sh"

[ $# -eq 1 ] || { echo "usage: $0 LOADGEN_BINARY" >&2; exit 2; }
bench_loadgen_cmd "$1"
for tool in redis-server redis-benchmark redis-cli jq; do
  command -v "$tool" >/dev/null || { echo "$0: $tool is missing (scripts/install-deps.sh installs it)." >&2; exit 1; }
done

connections=${CONNECTIONS:-6}
pipeline=${PIPELINE:-80}
keys=${KEYS:-100000}
value_size=${VALUE_SIZE:-400}
duration=${DURATION:-3}
requests=${REQUESTS:-1500000}
rounds=${ROUNDS:-5}
low_load_requests=${LOW_LOAD_REQUESTS:-200000}

work=$(mktemp -d /tmp/thptrace-bench.XXXXXX)
cleanup() { bench_stop_redis; rm -rf "$work"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

port=$(bench_free_port "${PORT:-6390}")
bench_start_redis "$port" "$work"
echo "redis-server $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p') on 127.0.0.1:$port;" \
  "$connections connections x pipeline $pipeline, SET $value_size B over $keys keys"

# Same dataset under both tools, loaded once.
"${LOADGEN[@]}" --port "$port" --keys "$keys" --value-size "$value_size" --load-only >/dev/null

# Each tool runs ROUNDS times, alternating which goes first, and the medians are compared: on a
# shared 2-core host one sample of each is mostly noise.
loadgen_throughput() {  # prints SET/s of the writers
  "${LOADGEN[@]}" --port "$port" --no-load --keys "$keys" --value-size "$value_size" \
    --writers "$connections" --batch "$pipeline" --rate 10 --duration "$duration" \
    --json "$work/throughput.json" >/dev/null
  jq '.writers.throughput_ops_per_s' "$work/throughput.json"
}
redis_benchmark_throughput() {  # prints SET/s
  redis-benchmark -p "$port" -t set -c "$connections" -P "$pipeline" -d "$value_size" -r "$keys" \
    -n "$requests" --csv 2>/dev/null | awk -F'"' '$2 == "SET" { print $4 }'
}
loadgen_low_load() {  # prints "req/s p50_us p99_us"
  "${LOADGEN[@]}" --port "$port" --no-load --keys "$keys" --value-size "$value_size" \
    --duration 2 --json "$work/low.json" >/dev/null
  jq -r '"\(.probe.throughput_ops_per_s) \(.probe.latency.p50) \(.probe.latency.p99)"' "$work/low.json"
}
redis_benchmark_low_load() {  # prints "req/s p50_us p99_us"
  # "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms",...
  redis-benchmark -p "$port" -t set -c 1 -P 1 -d "$value_size" -r "$keys" -n "$low_load_requests" \
    --precision 3 --csv 2>/dev/null | awk -F'"' '$2 == "SET" { print $4, $10 * 1000, $14 * 1000 }'
}

for round in $(seq "$rounds"); do
  if [ $((round % 2)) -eq 1 ]; then
    loadgen_throughput >>"$work/lg_tp"; redis_benchmark_throughput >>"$work/rb_tp"
    loadgen_low_load >>"$work/lg_low"; redis_benchmark_low_load >>"$work/rb_low"
  else
    redis_benchmark_throughput >>"$work/rb_tp"; loadgen_throughput >>"$work/lg_tp"
    redis_benchmark_low_load >>"$work/rb_low"; loadgen_low_load >>"$work/lg_low"
  fi
  echo "round $round/$rounds: throughput loadgen $(tail -1 "$work/lg_tp" | cut -d. -f1)," \
    "redis-benchmark $(tail -1 "$work/rb_tp" | cut -d. -f1) SET/s"
done

median() {  # median of column $2 of file $1
  sort -g -k"$2,$2" "$1" | awk -v c="$2" '{ v[NR] = $c } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
# Rounds are pairs run back to back, so the median of per-round ratios is the least noisy ratio.
paste -d' ' "$work/lg_tp" "$work/rb_tp" | awk '{ print $1 / $2 }' >"$work/ratios"
awk -v ratio="$(median "$work/ratios" 1)" -v lg="$(median "$work/lg_tp" 1)" -v rb="$(median "$work/rb_tp" 1)" \
  -v lgl="$(median "$work/lg_low" 1)" -v rbl="$(median "$work/rb_low" 1)" \
  -v lg50="$(median "$work/lg_low" 2)" -v rb50="$(median "$work/rb_low" 2)" \
  -v lg99="$(median "$work/lg_low" 3)" -v rb99="$(median "$work/rb_low" 3)" -v n="$rounds" 'BEGIN {
  printf "\nmedians of %d rounds\n", n
  printf "throughput (SET/s)          loadgen %10.0f   redis-benchmark %10.0f\n", lg, rb
  printf "  throughput ratio loadgen / redis-benchmark, median of rounds: %.2f (goal >= 1.0)\n", ratio
  printf "low load, 1 conn, closed    loadgen %10.0f   redis-benchmark %10.0f   req/s\n", lgl, rbl
  printf "  p50 (us)                  loadgen %10.1f   redis-benchmark %10.1f   ratio %.2f\n", lg50, rb50, lg50 / rb50
  printf "  p99 (us)                  loadgen %10.1f   redis-benchmark %10.1f   ratio %.2f\n", lg99, rb99, lg99 / rb99
}'
