#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Redis SET throughput and probe p99.9 with `thptrace daemon` attached against not, in interleaved
# runs (goal: ratio ≥ 0.98). Each run: one closed-loop probe plus 4 writers pipelining 80
# SETs for RUN_SECONDS against a redis-server of 200k keys × 400 B on loopback, with a BGSAVE in
# the middle so the fork path is exercised too. Prints per-run figures and the ratios of medians.
# usage: daemon_overhead.sh THPTRACE_BINARY   (root; RUNS=5 RUN_SECONDS=10 by default)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$(realpath "$1")
runs=${RUNS:-5}
seconds=${RUN_SECONDS:-10}
. "$here/redis_lib.sh"
bench_loadgen_cmd "$bin"
work=$(mktemp -d /tmp/thptrace-overhead.XXXXXX)
daemon_pid=
cleanup() {
  [ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
  bench_stop_redis
  rm -rf "$work"
}
trap cleanup EXIT INT TERM
port=$(bench_free_port 6400)
bench_start_redis "$port" "$work"
"${LOADGEN[@]}" --port "$port" --keys 200000 --value-size 400 --load-only >/dev/null
metrics_port=$(bench_free_port 19970)

one_run() {  # one_run LABEL: prints "LABEL writer_ops_per_s probe_p999_us"
  local label=$1 json=$work/run.json
  (sleep $((seconds / 2)); redis-cli -p "$port" bgsave >/dev/null) &
  "${LOADGEN[@]}" --port "$port" --keys 200000 --value-size 400 --no-load --writers 4 --batch 80 \
    --duration "$seconds" --json "$json" >/dev/null
  wait
  /usr/bin/python3 -c "import json,sys; d=json.load(open('$json')); print('$label', d['writers']['throughput_ops_per_s'], d['probe']['latency']['p99_9'])"
}

echo "run traced writer_SET_per_s probe_p99.9_us"
: >"$work/results"
for i in $(seq 1 "$runs"); do
  for mode in off on; do
    if [ "$mode" = on ]; then
      "$bin" daemon --redis "127.0.0.1:$port" --listen "127.0.0.1:$metrics_port" 2>"$work/daemon.log" &
      daemon_pid=$!
      for _ in $(seq 50); do curl -sf "127.0.0.1:$metrics_port/metrics" >/dev/null && break; sleep 0.1; done
    fi
    line=$(one_run "$mode")
    echo "$i $line" | tee -a "$work/results"
    if [ "$mode" = on ]; then kill "$daemon_pid"; wait "$daemon_pid" || true; daemon_pid=; fi
    sleep 1
  done
done
/usr/bin/python3 - "$work/results" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
def med(mode, col): return statistics.median(float(r[col]) for r in rows if r[1] == mode)
tput = med("on", 2) / med("off", 2)
p999 = med("on", 3) / med("off", 3)
print(f"median SET/s traced/untraced: {med('on', 2):.0f}/{med('off', 2):.0f} = {tput:.3f} (goal >= 0.98)")
print(f"median probe p99.9 traced/untraced: {med('on', 3):.0f}/{med('off', 3):.0f} us = {p999:.3f}")
PY
