#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Benchmark (not a test): `thptrace daemon --discover` watching N local redis-servers (default 50).
# For each daemon configuration, in the same run against the same servers:
#   - idle daemon CPU (utime+stime of all its threads over IDLE_SECONDS, % of one core), its RSS,
#   - scrape time of /metrics (median and max of 20 GETs),
#   - a BGSAVE on every server, and how many of them the daemon labels bgsave (and nothing else),
#   - the time from SIGTERM to its exit (every BPF link released).
# Configurations: BASELINE_BIN (an older thptrace to compare against, optional) with its defaults;
# THPTRACE_BIN with its defaults (uprobes name the reasons); THPTRACE_BIN --force-fallback (reasons from
# INFO polling alone); THPTRACE_BIN --idle-poll-interval-ms 100 (the old constant 10 Hz cadence); and
# the client-latency probe off (--latency-probe 0) and at its busy rate all the time
# (--latency-probe-idle 100: the probe before it had an idle rate).
# Goals (issue "many Redis on one host"; #40: 0.8% at N=20 with the probe on): ≤ 2% of a core in total, ≤ 40 MB RSS, scrape ≤ 50 ms, N of N
# labelled right.
# Usage (root): tests/bench/many_redis.sh [BUILD_DIR]
# Tunables: N=50 IDLE_SECONDS=30 KEYS=20000 THPTRACE_BIN BASELINE_BIN, CONFIGS (the configurations to
# run, by label, space-separated; default all)
# The daemon also discovers other local redis-servers (not started here): they are watched and cost
# their share, but only ours are checked.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build}
bin=${THPTRACE_BIN:-$build/userspace/cli/thptrace}
baseline=${BASELINE_BIN:-}
n=${N:-50}
idle_seconds=${IDLE_SECONDS:-30}
keys=${KEYS:-20000}
configs=${CONFIGS:-}
. "$here/redis_lib.sh"

die() { echo "$0: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "run as root (the daemon loads BPF programs)."
[ -x "$bin" ] || die "no thptrace binary at $bin (build first, or set THPTRACE_BIN)."
[ -z "$baseline" ] || [ -x "$baseline" ] || die "BASELINE_BIN=$baseline is not an executable."
for tool in redis-server redis-cli curl python3; do
  command -v "$tool" >/dev/null || die "$tool is missing (scripts/install-deps.sh installs it)."
done

work=$(mktemp -d /tmp/thptrace-many.XXXXXX)
redis_pids=()
ports=()
daemon_pid=
cleanup() {
  local p
  if [ -n "$daemon_pid" ]; then kill "$daemon_pid" 2>/dev/null || true; wait "$daemon_pid" 2>/dev/null || true; fi
  for p in "${redis_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${redis_pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "starting $n redis-servers ($keys keys each)"
port=6500
for i in $(seq 1 "$n"); do
  port=$(bench_free_port "$port")
  mkdir -p "$work/r$i"
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
    --dir "$work/r$i" --logfile "$work/r$i/redis.log" &
  redis_pids+=($!)
  ports+=("$port")
  port=$((port + 1))
done
for p in "${ports[@]}"; do
  for _ in $(seq 100); do [ "$(redis-cli -p "$p" ping 2>/dev/null)" = PONG ] && break; sleep 0.1; done
  redis-cli -p "$p" debug populate "$keys" key 100 >/dev/null
done

metrics_port=$(bench_free_port 19990)
scrape() { curl -sf "127.0.0.1:$metrics_port/metrics"; }
value() {  # value SCRAPE_FILE SERIES
  awk -v s="$2" '$1 == s { print $2; found=1 } END { if (!found) print "" }' "$1"
}
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

# run LABEL BINARY [DAEMON FLAGS...]: one daemon configuration; prints one result line.
run() {
  local label=$1 binary=$2
  shift 2
  if [ -n "$configs" ] && [[ " $configs " != *" $label "* ]]; then return 0; fi
  "$binary" daemon --discover --listen "127.0.0.1:$metrics_port" "$@" 2>"$work/daemon-$label.log" &
  daemon_pid=$!
  # Every server of ours reachable and its pid resolved.
  local up=0
  for _ in $(seq 300); do
    if scrape >"$work/s" 2>/dev/null; then
      up=0
      for p in "${ports[@]}"; do [ "$(value "$work/s" "thptrace_redis_up{target=\"127.0.0.1:$p\"}")" = 1 ] && up=$((up + 1)); done
      [ "$up" -eq "$n" ] && break
    fi
    sleep 0.2
  done
  [ "$up" -eq "$n" ] || { tail -5 "$work/daemon-$label.log" >&2; die "$label: only $up of $n servers up"; }
  sleep 5  # first polls, pid resolution, uprobes attached
  local hz t0 t1 cpu rss
  hz=$(getconf CLK_TCK)
  t0=$(cpu_ticks "$daemon_pid")
  sleep "$idle_seconds"
  t1=$(cpu_ticks "$daemon_pid")
  cpu=$(python3 -c "print(f'{100 * ($t1 - $t0) / $hz / $idle_seconds:.2f}')")
  rss=$(awk '/^VmRSS/ { printf "%.1f", $2 / 1024 }' "/proc/$daemon_pid/status")
  # Plain, as curl asks, and gzip-compressed, as Prometheus asks (Accept-Encoding: gzip).
  local times=() gz_times=()
  for _ in $(seq 20); do
    times+=("$(curl -sf -o /dev/null -w '%{time_total}' "127.0.0.1:$metrics_port/metrics")")
    gz_times+=("$(curl -sf --compressed -o /dev/null -w '%{time_total}' "127.0.0.1:$metrics_port/metrics")")
  done
  local scrape_ms gz_ms
  ms_stats() { python3 -c "import statistics,sys; v=[float(x)*1000 for x in sys.argv[1:]]; print(f'{statistics.median(v):.1f}/{max(v):.1f}')" "$@"; }
  scrape_ms=$(ms_stats "${times[@]}")
  gz_ms=$(ms_stats "${gz_times[@]}")
  local lines
  lines=$(scrape | wc -l)
  # A BGSAVE on each server, a few at a time (2 cores), then wait for every label.
  for p in "${ports[@]}"; do
    until [ "$(redis-cli -p "$p" bgsave 2>/dev/null)" = "Background saving started" ]; do sleep 0.05; done
  done
  local right=0 wrong=0
  for _ in $(seq 100); do
    scrape >"$work/s"
    right=0 wrong=0
    for p in "${ports[@]}"; do
      local t="127.0.0.1:$p" r v
      [ "$(value "$work/s" "thptrace_forks_total{reason=\"bgsave\",target=\"$t\"}")" = 1 ] && right=$((right + 1))
      for r in full_sync_disk full_sync_diskless aof_rewrite module full_sync_rdb_channel unknown; do
        v=$(value "$work/s" "thptrace_forks_total{reason=\"$r\",target=\"$t\"}")
        if [ -n "$v" ] && [ "$v" != 0 ]; then wrong=$((wrong + 1)); fi
      done
    done
    [ "$right" -eq "$n" ] && break
    sleep 0.2
  done
  # SIGTERM to exit: every link released (a systemd unit waits TimeoutStopSec for it).
  local stop_from stop_s
  stop_from=$(date +%s.%N)
  kill "$daemon_pid"
  wait "$daemon_pid" || true
  stop_s=$(python3 -c "print(f'{$(date +%s.%N) - $stop_from:.1f}')")
  daemon_pid=
  printf '%-28s %8s %8s %14s %14s %8s %9s %6s %6s\n' "$label" "$cpu" "$rss" "$scrape_ms" "$gz_ms" "$lines" "$right/$n" "$wrong" "$stop_s"
  # The next configuration starts from servers with no child: the save of this one is done.
  for p in "${ports[@]}"; do
    until [ "$(redis-cli -p "$p" info persistence | tr -d '\r' | awk -F: '/^rdb_bgsave_in_progress/ { print $2 }')" = 0 ]; do sleep 0.1; done
  done
}

echo "idle CPU over ${idle_seconds}s (% of one core, all threads), RSS (MB), scrape median/max (ms) plain and"
echo "gzip-compressed (as Prometheus asks), metric lines, BGSAVEs labelled bgsave, other reasons counted,"
echo "seconds from SIGTERM to exit"
printf '%-28s %8s %8s %14s %14s %8s %9s %6s %6s\n' configuration cpu_% rss_MB scrape_ms gzip_ms lines bgsave wrong stop_s
if [ -n "$baseline" ]; then run baseline "$baseline"; fi
run "default" "$bin"
run "default-info-only" "$bin" --force-fallback
run "constant-10Hz" "$bin" --idle-poll-interval-ms 100
run "probe-off" "$bin" --latency-probe 0
run "probe-100Hz-idle" "$bin" --latency-probe-idle 100
