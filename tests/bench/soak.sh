#!/usr/bin/env bash
# Soak (issue 5; not run in CI): `thptrace daemon` watches a redis-server under a write load that
# forks every 5 s (BGSAVE) for SOAK_SECONDS (default 1800). Every 30 s it samples the daemon's RSS,
# open fds and CPU time, and times one scrape. Prints the samples and a verdict line against the
# goals (RSS growth < 1 MB and fds flat, after a minute of warm-up).
# usage: soak.sh THPTRACE_BINARY   (root)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$(realpath "$1")
seconds=${SOAK_SECONDS:-1800}
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
bench_start_redis "$port" "$work"
"${LOADGEN[@]}" --port "$port" --keys 100000 --value-size 400 --load-only >/dev/null
metrics_port=$(bench_free_port 19980)
"$bin" daemon --redis "127.0.0.1:$port" --listen "127.0.0.1:$metrics_port" 2>"$work/daemon.log" &
daemon_pid=$!
for _ in $(seq 100); do curl -sf -o /dev/null "127.0.0.1:$metrics_port/metrics" && break; sleep 0.1; done
"${LOADGEN[@]}" --port "$port" --keys 100000 --value-size 400 --no-load --writers 1 --batch 10 --rate 1000 \
  --duration "$seconds" >/dev/null 2>&1 &
load_pid=$!
clk=$(getconf CLK_TCK)
echo "t_s rss_kb fds cpu_s scrape_ms forks"
start=$(date +%s)
next_fork=$start
next_sample=$start
first_rss= last_rss= fds_min= fds_max=
while [ $(( $(date +%s) - start )) -lt "$seconds" ]; do
  now=$(date +%s)
  if [ "$now" -ge "$next_fork" ]; then
    redis-cli -p "$port" bgsave >/dev/null 2>&1 || true
    next_fork=$((now + 5))
  fi
  if [ "$now" -ge "$next_sample" ]; then
    rss=$(awk '/^VmRSS:/{print $2}' "/proc/$daemon_pid/status")
    fds=$(ls "/proc/$daemon_pid/fd" | wc -l)
    cpu=$(awk -v c="$clk" '{printf "%.2f", ($14 + $15) / c}' "/proc/$daemon_pid/stat")
    scrape=$(curl -s -o "$work/m.txt" -w '%{time_total}' "127.0.0.1:$metrics_port/metrics")
    forks=$(awk -F' ' '/^thptrace_forks_total\{reason="bgsave"/{print $2}' "$work/m.txt")
    echo "$((now - start)) $rss $fds $cpu $(awk -v s="$scrape" 'BEGIN{printf "%.1f", s * 1000}') $forks"
    # The first minute is warm-up (uprobes attach after the first INFO, series get created).
    if [ $((now - start)) -ge 60 ]; then
      [ -z "$first_rss" ] && first_rss=$rss
      last_rss=$rss
      fds_min=$(( ${fds_min:-$fds} < fds ? ${fds_min:-$fds} : fds ))
      fds_max=$(( ${fds_max:-$fds} > fds ? ${fds_max:-$fds} : fds ))
    fi
    next_sample=$((now + 30))
  fi
  sleep 1
done
growth=$((last_rss - first_rss))
echo "RSS ${first_rss} -> ${last_rss} kB (growth ${growth} kB, goal < 1024); fds ${fds_min}..${fds_max} (goal flat)"
[ "$growth" -lt 1024 ] && [ "$fds_min" -eq "$fds_max" ]
