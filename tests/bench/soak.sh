#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Soak (not run in CI): `thptrace daemon` watches a redis-server under a write load that forks every
# 5 s (BGSAVE) for SOAK_SECONDS (default 1800). It samples the daemon's RSS, open fds and CPU time,
# times one scrape, and reads the daemon's own long-run health from /metrics (episodes left in the
# kernel map, untracked forks, dropped events). Prints the samples and a verdict line against the
# goals (RSS growth < 1 MB and fds flat after a minute of warm-up; the episodes map back to at most
# one live child, so nothing leaks there).
#
# usage: soak.sh [--24h] THPTRACE_BINARY   (root)
#   --24h  the 24-hour mode: 86400 s, a sample every 5 minutes, and Redis restarted every hour
#          (SOAK_RESTART_EVERY) so that pid changes, re-attaching and the maps' reaping are soaked
#          too. SOAK_SECONDS, SOAK_SAMPLE_EVERY and SOAK_RESTART_EVERY override either mode.
# Samples also go to SOAK_LOG (default: none), so a long run can be read while it goes.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
mode=short
if [ "${1:-}" = --24h ]; then
  mode=24h
  shift
fi
if [ $# -ne 1 ]; then
  echo "usage: $0 [--24h] THPTRACE_BINARY" >&2
  exit 2
fi
bin=$(realpath "$1")
if [ "$mode" = 24h ]; then
  seconds=${SOAK_SECONDS:-86400} sample_every=${SOAK_SAMPLE_EVERY:-300} restart_every=${SOAK_RESTART_EVERY:-3600}
else
  seconds=${SOAK_SECONDS:-1800} sample_every=${SOAK_SAMPLE_EVERY:-30} restart_every=${SOAK_RESTART_EVERY:-0}
fi
log=${SOAK_LOG:-/dev/null}
. "$here/redis_lib.sh"
bench_loadgen_cmd "$bin"
work=$(mktemp -d /tmp/thptrace-soak.XXXXXX)
daemon_pid= load_pid=
cleanup() {
  [ -n "$load_pid" ] && kill "$load_pid" 2>/dev/null && wait "$load_pid" 2>/dev/null
  [ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
  bench_stop_redis
  rm -rf "$work"
}
trap cleanup EXIT INT TERM
port=$(bench_free_port 6410)
start_load() {
  "${LOADGEN[@]}" --port "$port" --keys 100000 --value-size 400 --no-load --writers 1 --batch 10 --rate 1000 \
    --duration "$1" >/dev/null 2>&1 &
  load_pid=$!
}
bench_start_redis "$port" "$work"
"${LOADGEN[@]}" --port "$port" --keys 100000 --value-size 400 --load-only >/dev/null
metrics_port=$(bench_free_port 19980)
"$bin" daemon --redis "127.0.0.1:$port" --listen "127.0.0.1:$metrics_port" 2>"$work/daemon.log" &
daemon_pid=$!
for _ in $(seq 100); do curl -sf -o /dev/null "127.0.0.1:$metrics_port/metrics" && break; sleep 0.1; done
start_load "$seconds"
clk=$(getconf CLK_TCK)
# metric NAME_AND_LABELS: its value in the last scrape (0 when absent).
metric() { awk -v s="$1" 'index($0, s " ") == 1 {v = $2} END {print v + 0}' "$work/m.txt"; }
sum_metric() { awk -v s="$1" 'index($0, s) == 1 {v += $2} END {print v + 0}' "$work/m.txt"; }
echo "mode $mode: ${seconds} s, a sample every ${sample_every} s, Redis restarts every ${restart_every} s (0 = never)" | tee -a "$log"
echo "t_s rss_kb fds cpu_s scrape_ms forks episodes_map untracked dropped restarts" | tee -a "$log"
start=$(date +%s)
next_fork=$start next_sample=$start
# Restarts fall half-way between two samples, so that no sample sees the uprobes half re-attached.
next_restart=$((restart_every > 0 ? start + restart_every + sample_every / 2 : 0))
restarts=0
first_rss= last_rss= fds_min= fds_max= episodes_max=0
while [ $(( $(date +%s) - start )) -lt "$seconds" ]; do
  now=$(date +%s)
  if [ "$next_restart" -gt 0 ] && [ "$now" -ge "$next_restart" ]; then
    # A Redis restart: a new pid the daemon must follow (INFO process_id), its dataset reloaded.
    kill "$load_pid" 2>/dev/null && wait "$load_pid" 2>/dev/null || true
    bench_stop_redis
    bench_start_redis "$port" "$work"
    "${LOADGEN[@]}" --port "$port" --keys 100000 --value-size 400 --load-only >/dev/null
    start_load $((seconds - (now - start)))
    restarts=$((restarts + 1))
    next_restart=$((now + restart_every))
  fi
  if [ "$now" -ge "$next_fork" ]; then
    redis-cli -p "$port" bgsave >/dev/null 2>&1 || true
    next_fork=$((now + 5))
  fi
  if [ "$now" -ge "$next_sample" ]; then
    rss=$(awk '/^VmRSS:/{print $2}' "/proc/$daemon_pid/status")
    fds=$(ls "/proc/$daemon_pid/fd" | wc -l)
    cpu=$(awk -v c="$clk" '{printf "%.2f", ($14 + $15) / c}' "/proc/$daemon_pid/stat")
    scrape=$(curl -s -o "$work/m.txt" -w '%{time_total}' "127.0.0.1:$metrics_port/metrics")
    forks=$(sum_metric 'thptrace_forks_total{')
    episodes=$(metric 'thptrace_bpf_map_entries{map="episodes"}')
    untracked=$(sum_metric 'thptrace_untracked_forks_total{')
    dropped=$(metric 'thptrace_events_dropped_total')
    echo "$((now - start)) $rss $fds $cpu $(awk -v s="$scrape" 'BEGIN{printf "%.1f", s * 1000}') $forks $episodes $untracked $dropped $restarts" |
      tee -a "$log"
    # The first minute is warm-up (uprobes attach after the first INFO, series get created).
    if [ $((now - start)) -ge 60 ]; then
      [ -z "$first_rss" ] && first_rss=$rss
      last_rss=$rss
      fds_min=$(( ${fds_min:-$fds} < fds ? ${fds_min:-$fds} : fds ))
      fds_max=$(( ${fds_max:-$fds} > fds ? ${fds_max:-$fds} : fds ))
      episodes_max=$(( episodes > episodes_max ? episodes : episodes_max ))
    fi
    next_sample=$((now + sample_every))
  fi
  sleep 1
done
growth=$((last_rss - first_rss))
echo "RSS ${first_rss} -> ${last_rss} kB (growth ${growth} kB, goal < 1024); fds ${fds_min}..${fds_max} (goal flat);" \
  "episodes map at most ${episodes_max} (goal <= 1); untracked forks ${untracked}; dropped ${dropped}; restarts ${restarts}" |
  tee -a "$log"
[ "$growth" -lt 1024 ] && [ "$fds_min" -eq "$fds_max" ] && [ "$episodes_max" -le 1 ]
