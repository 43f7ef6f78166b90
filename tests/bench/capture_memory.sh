#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Benchmark (not a test): a long capture's memory (issue 40, item 5). `thptrace --pid` with `--disk on`
# captures a redis-server with `appendfsync always` under a SET load of RATE requests a second (one
# fsync of the event loop for nearly each), a BGSAVE every FORK_EVERY seconds, for SECONDS (default one
# hour). Its RSS is sampled every SAMPLE_EVERY seconds; with BASELINE_BIN (an older thptrace) a second
# capture of the same server runs beside it, same load, same moments: the ratio of their growth is
# the figure, whatever the host. The goal: RSS flat after the first minutes (the disk calls are
# summarised as they come, report/disk_windows.h), where a capture that kept every record grew with
# the calls.
#
# usage (root): tests/bench/capture_memory.sh [BUILD_DIR]
# Tunables: DURATION=3600 RATE=3000 FORK_EVERY=60 SAMPLE_EVERY=30 WARMUP=180 THPTRACE_BIN BASELINE_BIN
#   DIR (where Redis writes its AOF; default a directory in /dev/shm, so that the syncs are fast and
#   many: the record count is what is measured, not the disk).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build}
bin=${THPTRACE_BIN:-$build/userspace/cli/thptrace}
baseline=${BASELINE_BIN:-}
seconds=${DURATION:-3600}
rate=${RATE:-3000}
fork_every=${FORK_EVERY:-60}
sample_every=${SAMPLE_EVERY:-30}
warmup=${WARMUP:-180}
. "$here/redis_lib.sh"

die() { echo "$0: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "run as root (the capture loads BPF programs)."
[ -x "$bin" ] || die "no thptrace binary at $bin (build first, or set THPTRACE_BIN)."
[ -z "$baseline" ] || [ -x "$baseline" ] || die "BASELINE_BIN=$baseline is not an executable."
for v in "$seconds" "$rate" "$fork_every" "$sample_every" "$warmup"; do
  [[ $v =~ ^[1-9][0-9]*$ ]] || die "DURATION, RATE, FORK_EVERY, SAMPLE_EVERY and WARMUP are positive integers."
done
[ "$warmup" -lt "$seconds" ] || die "WARMUP ($warmup s) must be shorter than DURATION ($seconds s)."
bench_loadgen_cmd "$bin"

work=$(mktemp -d "${DIR:-/dev/shm}/thptrace-capmem.XXXXXX")
load_pid='' new_pid='' base_pid=''
cleanup() {
  local p
  for p in $load_pid $new_pid $base_pid; do kill -INT "$p" 2>/dev/null || true; done
  for p in $load_pid $new_pid $base_pid; do wait "$p" 2>/dev/null || true; done
  bench_stop_redis
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port=$(bench_free_port 6420)
bench_start_redis "$port" "$work" --appendonly yes --appendfsync always
redis_pid=$BENCH_REDIS_PID
"${LOADGEN[@]}" --port "$port" --keys 200000 --value-size 400 --load-only >/dev/null

# capture BIN NAME: a capture of the server in the background for the whole run; its pid in $!.
capture() {
  "$1" --pid "$redis_pid" --redis "127.0.0.1:$port" --disk on --duration "$seconds" \
    --json "$work/$2.json" >"$work/$2.txt" 2>"$work/$2.err" &
}
capture "$bin" new
new_pid=$!
if [ -n "$baseline" ]; then
  capture "$baseline" baseline
  base_pid=$!
fi
for name in new ${baseline:+baseline}; do
  for _ in $(seq 300); do grep -q "tracing pid" "$work/$name.err" 2>/dev/null && break; sleep 0.1; done
done
sleep 2
"${LOADGEN[@]}" --port "$port" --keys 200000 --value-size 400 --no-load --rate "$rate" \
  --duration "$((seconds - 5))" >"$work/load.out" 2>&1 &
load_pid=$!

rss() { awk '/^VmRSS:/{print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
echo "capture memory: ${seconds} s, SET load at ${rate}/s on appendfsync always, a BGSAVE every ${fork_every} s"
echo "t_s rss_kb${baseline:+ baseline_rss_kb}"
start=$(date +%s) next_fork=$(($(date +%s) + fork_every)) next_sample=$start
at_warmup='' last='' base_at_warmup='' base_last='' t_warmup=0 t_last=0
while kill -0 "$new_pid" 2>/dev/null; do
  now=$(date +%s)
  if [ "$now" -ge "$next_fork" ]; then
    redis-cli -p "$port" bgsave >/dev/null 2>&1 || true
    next_fork=$((now + fork_every))
  fi
  if [ "$now" -ge "$next_sample" ]; then
    r=$(rss "$new_pid")
    b=${base_pid:+$(rss "$base_pid")}
    echo "$((now - start)) $r${b:+ $b}"
    if [ $((now - start)) -ge "$warmup" ] && [ "$r" -gt 0 ]; then
      [ -n "$at_warmup" ] || { at_warmup=$r; base_at_warmup=$b; t_warmup=$((now - start)); }
      last=$r base_last=$b t_last=$((now - start))
    fi
    next_sample=$((now + sample_every))
  fi
  sleep 1
done
wait "$new_pid" || die "the capture failed: $(tail -3 "$work/new.err")"
new_pid=
[ -z "$base_pid" ] || { wait "$base_pid" || echo "the baseline capture failed: $(tail -1 "$work/baseline.err")"; base_pid=; }
wait "$load_pid" 2>/dev/null || true
load_pid=
[ -n "$at_warmup" ] && [ "$t_last" -gt "$t_warmup" ] || die "no sample after the warm-up: lengthen DURATION."

# growth FROM TO: kB per hour between the samples at t_warmup and t_last.
growth() { echo $(( ($2 - $1) * 3600 / (t_last - t_warmup) )); }
summary() {  # summary REPORT_JSON
  python3 - "$1" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
forks = r["forks"]
calls = sum(w[k]["count"] for f in forks if (w := f.get("fsync_during")) for k in ("main", "bio_aof", "other") if w[k])
known = sum(1 for f in forks if f.get("fsync_during") is not None)
print(f"{len(forks)} forks, {known} with fsync figures, {calls} syncs inside their windows, "
      f"{r['capture'].get('disk_calls_dropped', 0)} calls let go, "
      f"{r['capture'].get('disk_windows_unknown', 0)} windows without figures")
EOF
}
echo "thptrace:  RSS ${at_warmup} kB at ${t_warmup} s, ${last} kB at ${t_last} s: $(growth "$at_warmup" "$last") kB an hour after the warm-up; $(summary "$work/new.json")"
if [ -n "$baseline" ]; then
  echo "baseline:  RSS ${base_at_warmup} kB at ${t_warmup} s, ${base_last} kB at ${t_last} s: $(growth "$base_at_warmup" "$base_last") kB an hour after the warm-up; $(summary "$work/baseline.json" 2>/dev/null || echo "no report")"
fi
grep -E "requests|p99" "$work/load.out" | head -3 || true
