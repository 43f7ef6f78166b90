#!/usr/bin/env bash
# Benchmark (not a test): thptrace loadgen against redis-benchmark on the same throw-away
# redis-server, at the same number of connections and pipeline depth.
#   1. throughput: CONNECTIONS writers pipelining PIPELINE SETs of VALUE_SIZE bytes over KEYS
#      random keys; prints loadgen / redis-benchmark (goal >= 1.0: the load generator must not be
#      the bottleneck of the experiments);
#   2. latency at low load: one connection, no pipelining, closed loop; prints p50/p99 of both,
#      which should agree (same server, same loopback: any gap is the client's own overhead).
# Usage: loadgen_vs_redis_benchmark.sh LOADGEN_BINARY
#   LOADGEN_BINARY: build/userspace/cli/thptrace or build/tests/bench/loadgen_driver.
# Tunables (environment): CONNECTIONS=6 PIPELINE=80 KEYS=100000 VALUE_SIZE=400 DURATION=5
#   REQUESTS (redis-benchmark's throughput run, default 2000000) LOW_LOAD_REQUESTS=20000 PORT=6390
# The machine is shared and small (2 cores, client and server on it): compare ratios from one run.
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
duration=${DURATION:-5}
requests=${REQUESTS:-2000000}
low_load_requests=${LOW_LOAD_REQUESTS:-20000}

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

# --- throughput ---------------------------------------------------------------------------------
# The loadgen's probe is kept to a trickle (open loop, 10 req/s) so the writers carry the load.
"${LOADGEN[@]}" --port "$port" --no-load --keys "$keys" --value-size "$value_size" \
  --writers "$connections" --batch "$pipeline" --rate 10 --duration "$duration" \
  --json "$work/throughput.json" >/dev/null
loadgen_rps=$(jq '.writers.throughput_ops_per_s' "$work/throughput.json")

redis-benchmark -p "$port" -t set -c "$connections" -P "$pipeline" -d "$value_size" -r "$keys" \
  -n "$requests" --csv >"$work/rb_throughput.csv" 2>/dev/null
rb_rps=$(awk -F'"' '$2 == "SET" { print $4 }' "$work/rb_throughput.csv")

# --- latency at low load ------------------------------------------------------------------------
"${LOADGEN[@]}" --port "$port" --no-load --keys "$keys" --value-size "$value_size" \
  --duration 2 --json "$work/low.json" >/dev/null
lg_p50=$(jq '.probe.latency.p50' "$work/low.json")
lg_p99=$(jq '.probe.latency.p99' "$work/low.json")
lg_low_rps=$(jq '.probe.throughput_ops_per_s' "$work/low.json")

redis-benchmark -p "$port" -t set -c 1 -P 1 -d "$value_size" -r "$keys" -n "$low_load_requests" \
  --precision 3 --csv >"$work/rb_low.csv" 2>/dev/null
# "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms",...
rb_p50=$(awk -F'"' '$2 == "SET" { print $10 * 1000 }' "$work/rb_low.csv")
rb_p99=$(awk -F'"' '$2 == "SET" { print $14 * 1000 }' "$work/rb_low.csv")
rb_low_rps=$(awk -F'"' '$2 == "SET" { print $4 }' "$work/rb_low.csv")

awk -v lg="$loadgen_rps" -v rb="$rb_rps" -v lg50="$lg_p50" -v lg99="$lg_p99" -v rb50="$rb_p50" \
  -v rb99="$rb_p99" -v lgl="$lg_low_rps" -v rbl="$rb_low_rps" 'BEGIN {
  printf "\nthroughput (SET/s)          loadgen %10.0f   redis-benchmark %10.0f   ratio %.2f (goal >= 1.0)\n", lg, rb, lg / rb
  printf "low load, 1 conn, closed    loadgen %10.0f   redis-benchmark %10.0f   req/s\n", lgl, rbl
  printf "  p50 (us)                  loadgen %10.1f   redis-benchmark %10.1f   ratio %.2f\n", lg50, rb50, lg50 / rb50
  printf "  p99 (us)                  loadgen %10.1f   redis-benchmark %10.1f   ratio %.2f\n", lg99, rb99, lg99 / rb99
}'
