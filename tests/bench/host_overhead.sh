#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Benchmark (not a test): what processes thptrace does NOT watch pay while it runs. thptrace's
# programs hook every page fault of the machine (fault tracepoints on the fallback path) and, where
# the fork of a target cannot be timed by the libc fork() uprobe, every system call (sys_enter /
# sys_exit). Four kinds of work of an unrelated process (tests/bench/host_work.c), each timed
# untraced and traced in the same run, interleaved, RUNS times; each timing is the best of ROUNDS:
#   getppid   a system-call loop            pipe   one-byte round trips between two processes
#   write     one-byte write()s to a file (the disk family's programs see every write)
#   touch     first touch of fresh memory   cow    copy-on-write faults after an unwatched fork
# "traced" is a capture (`thptrace --pid`) of a redis-server this script starts on 127.0.0.1, in
# thptrace's default attach modes and again with --force-fallback. The `hooks` arm is the same
# capture with its userspace quiet (no --redis, /proc read once a minute): every program attached as
# in the default arm, but no 10 Hz sampling or polling beside them, so hooks and userspace are told
# apart. Prints ns per operation, the medians, traced/untraced ratios of the medians (goal: ≤ 1.01),
# and the median of each run's own traced/untraced (steadier where the machine's level drifts).
# With BASELINE_BIN (an older thptrace) another arm is that binary in its default modes. With
# EMPTY_HOOKS (e.g. "tp_btf:page_fault_user tp_btf:page_fault_kernel") another arm attaches EMPTY
# programs on those hooks (tests/bench/empty_progs), no capture: what being attached there costs at all.
# With PEER_HZ (e.g. 10) a control arm runs no BPF at all, only a process that wakes PEER_HZ times a
# second: what any periodic process beside the work costs on this machine.
# Then, unless STATS=0, where the time goes: one work (STATS_WORK, default cow; pipe for the sched
# family's context-switch programs) once more under a capture with kernel.bpf_stats_enabled on (for
# that run only), and each of the capture's programs that ran, with its runs and run_time_ns per run
# and per operation of the unrelated process.
# With FORK_LIVE=1 the watched Redis has a fork child alive through every traced measurement (a
# BGSAVE slowed by rdb-key-save-delay, started once the capture is tracing): what the host pays while
# a fork of a watched process lives, when the sched family's programs are attached (they are not
# otherwise).
# Usage (root): tests/bench/host_overhead.sh [BUILD_DIR]    BUILD_DIR defaults to <repo>/build.
# Tunables (environment): RUNS=5 ROUNDS=3 GETPPID_N=2000000 WRITE_N=1000000 PIPE_N=50000 MIB=256 THPTRACE_BIN
#   BASELINE_BIN EMPTY_HOOKS PEER_HZ STATS=1 STATS_WORK=cow WORKS="getppid write pipe touch cow" (a subset runs alone) PIN_CPU (a
#   CPU to run the unrelated work on, e.g. 1: both ends of the pipe then share it, which takes out the
#   bimodal cross-CPU wake-ups; thptrace and Redis stay free to run anywhere).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build}
thptrace=${THPTRACE_BIN:-$build/userspace/cli/thptrace}
work_bin=$build/tests/bench/host_work
runs=${RUNS:-5}
rounds=${ROUNDS:-3}
getppid_n=${GETPPID_N:-2000000}
write_n=${WRITE_N:-1000000}
pipe_n=${PIPE_N:-50000}
mib=${MIB:-256}
baseline=${BASELINE_BIN:-}
empty_hooks=${EMPTY_HOOKS:-}
peer_hz=${PEER_HZ:-}
empty_bin=$build/tests/bench/empty_progs
with_stats=${STATS:-1}
pin=()
[ -z "${PIN_CPU:-}" ] || pin=(taskset -c "$PIN_CPU")

die() { echo "$0: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "run as root (thptrace loads BPF programs)."
[ -x "$thptrace" ] || die "no thptrace binary at $thptrace (build first, or set THPTRACE_BIN)."
[ -z "$baseline" ] || [ -x "$baseline" ] || die "BASELINE_BIN=$baseline is not an executable."
[ -x "$work_bin" ] || die "no workload at $work_bin (build the host_work target first)."
[ -z "$empty_hooks" ] || [ -x "$empty_bin" ] || die "no empty_progs at $empty_bin (build the empty_progs target first)."
command -v redis-server >/dev/null || die "redis-server is missing (scripts/install-deps.sh installs it)."

. "$here/redis_lib.sh"
work=$(mktemp -d /tmp/thptrace-host.XXXXXX)
cap_pid=
em_pid=
peer_pid=
stats_before=$(sysctl -n kernel.bpf_stats_enabled)
cleanup() {
  if [ -n "$cap_pid" ]; then kill -INT "$cap_pid" 2>/dev/null || true; wait "$cap_pid" 2>/dev/null || true; fi
  if [ -n "$em_pid" ]; then kill "$em_pid" 2>/dev/null || true; wait "$em_pid" 2>/dev/null || true; fi
  if [ -n "$peer_pid" ]; then kill "$peer_pid" 2>/dev/null || true; wait "$peer_pid" 2>/dev/null || true; fi
  sysctl -q -w kernel.bpf_stats_enabled="$stats_before" || true
  bench_stop_redis
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port=$(bench_free_port 6420)
bench_start_redis "$port" "$work" --enable-debug-command local
fork_live=${FORK_LIVE:-0}
if [ "$fork_live" = 1 ]; then
  # 20,000 keys saved 5 ms apart: a child that lives 100 s unless ended (BGSAVE CANCEL is Redis 8's).
  redis-cli -p "$port" debug populate 20000 >/dev/null
  redis-cli -p "$port" config set rdb-key-save-delay 5000 >/dev/null
fi
# While FORK_LIVE=1: a BGSAVE child alive from now until end_fork.
begin_fork() {
  [ "$fork_live" = 1 ] || return 0
  [ "$(redis-cli -p "$port" bgsave)" = "Background saving started" ] || die "BGSAVE did not start"
  local i
  for i in $(seq 1 50); do
    [ "$(redis-cli -p "$port" info persistence | tr -d '\r' | sed -n 's/^rdb_bgsave_in_progress://p')" = 1 ] && return 0
    sleep 0.1
  done
  die "the BGSAVE did not start"
}
end_fork() {
  [ "$fork_live" = 1 ] || return 0
  local child
  # SIGUSR1: how Redis itself ends a child it no longer wants (it ignores SIGTERM while saving).
  child=$(pgrep -P "$BENCH_REDIS_PID" || true)
  [ -z "$child" ] || kill -USR1 "$child" 2>/dev/null || true
  for _ in $(seq 1 50); do
    [ "$(redis-cli -p "$port" info persistence | tr -d '\r' | sed -n 's/^rdb_bgsave_in_progress://p')" = 0 ] && return 0
    sleep 0.1
  done
  die "the BGSAVE child did not end"
}

start_capture() {  # start_capture COMMAND...: returns once its probes are attached
  "$@" >"$work/capture.out" 2>"$work/capture.err" &
  cap_pid=$!
  local i
  for i in $(seq 1 300); do
    grep -q "tracing pid" "$work/capture.err" 2>/dev/null && return 0
    kill -0 "$cap_pid" 2>/dev/null || break
    sleep 0.1
  done
  cat "$work/capture.err" >&2
  die "thptrace did not start tracing"
}

stop_capture() {
  kill -INT "$cap_pid"
  wait "$cap_pid" || die "thptrace exited with $? (see $work/capture.err)"
  cap_pid=
}

read -r -a works <<<"${WORKS:-getppid write pipe touch cow}"
stats_work=${STATS_WORK:-cow}
arg_of() {
  case $1 in
    getppid) echo "$getppid_n" ;;
    write) echo "$write_n" ;;
    pipe) echo "$pipe_n" ;;
    *) echo "$mib" ;;
  esac
}

declare -A samples  # samples[condition,work] = "ns ns ..."
measure() {  # measure CONDITION
  local w ns
  for w in "${works[@]}"; do
    ns=$("${pin[@]}" "$work_bin" "$w" "$(arg_of "$w")" "$rounds")
    samples[$1,$w]+="$ns "
  done
}

# The empty programs stay attached while their stdin (a FIFO we hold open) stays open.
start_empty() {
  rm -f "$work/em_in"
  mkfifo "$work/em_in"
  # shellcheck disable=SC2086
  "$empty_bin" $empty_hooks <"$work/em_in" >"$work/em.out" 2>"$work/em.err" &
  em_pid=$!
  exec {em_in}>"$work/em_in"
  local i
  for i in $(seq 1 100); do
    grep -q attached "$work/em.out" 2>/dev/null && return 0
    kill -0 "$em_pid" 2>/dev/null || break
    sleep 0.1
  done
  cat "$work/em.err" >&2
  die "empty_progs did not attach"
}

stop_empty() {
  exec {em_in}>&-
  wait "$em_pid" || die "empty_progs failed (see $work/em.err)"
  em_pid=
}

# A process with no BPF that wakes $peer_hz times a second, as long as it lives.
start_peer() {
  python3 -c 'import sys, time
while True: time.sleep(1 / float(sys.argv[1]))' "$peer_hz" &
  peer_pid=$!
}

stop_peer() {
  kill "$peer_pid"
  wait "$peer_pid" 2>/dev/null || true
  peer_pid=
}

conditions=(untraced default fallback hooks)
[ -z "$baseline" ] || conditions+=(baseline)
[ -z "$empty_hooks" ] || conditions+=(empty)
[ -z "$peer_hz" ] || conditions+=(peer)
arm() {  # arm CONDITION: the command line of a traced arm
  local target="--pid $BENCH_REDIS_PID --duration 3600"
  case $1 in
    default) echo "$thptrace $target --redis 127.0.0.1:$port" ;;
    fallback) echo "$thptrace $target --redis 127.0.0.1:$port --force-fallback" ;;
    hooks) echo "$thptrace $target --interval-ms 60000" ;;
    baseline) echo "$baseline $target --redis 127.0.0.1:$port" ;;
  esac
}

echo "host_overhead: $(nproc --all) CPUs, kernel $(uname -r), thptrace $thptrace, $runs runs, best of $rounds each, load average $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$runs"); do
  # Rotate the order so that no condition always runs first (warm caches, frequency).
  for k in $(seq 0 $((${#conditions[@]} - 1))); do
    c=${conditions[$(((r + k) % ${#conditions[@]}))]}
    case $c in
      untraced) ;;
      empty) start_empty ;;
      peer) start_peer ;;
      *)
        # shellcheck disable=SC2046
        start_capture $(arm "$c")
        begin_fork
        ;;
    esac
    measure "$c"
    case $c in
      untraced) ;;
      empty) stop_empty ;;
      peer) stop_peer ;;
      *)
        end_fork
        stop_capture
        ;;
    esac
  done
  echo "  run $r done"
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$runs" <<EOF
import statistics, sys
samples = {}
$(for key in "${!samples[@]}"; do echo "samples['$key'] = [float(x) for x in '${samples[$key]}'.split()]"; done)
works = '${works[*]}'.split()
unit = {'getppid': 'ns per call', 'write': 'ns per call', 'pipe': 'ns per round trip', 'touch': 'ns per fault', 'cow': 'ns per fault'}
print()
arms = [c for c in ('default', 'fallback', 'hooks', 'baseline', 'empty', 'peer') if f'{c},{works[0]}' in samples]
print("| work | untraced | " + " | ".join(f"{c} | ratio" for c in arms) + " |")
print("|---|---|" + "---|---|" * len(arms))
for w in works:
    base = statistics.median(samples[f'untraced,{w}'])
    row = [f"{base:.1f}"]
    for c in arms:
        m = statistics.median(samples[f'{c},{w}'])
        row += [f"{m:.1f}", f"{m / base:.3f}"]
    print(f"| {w} ({unit[w]}) | " + " | ".join(row) + " |")
# Each run measures every arm seconds apart, so each run's own traced/untraced cancels the machine's
# slower drifts; their median is the steadier figure where the runs' levels shift.
print()
print("paired: the median over runs of each run's traced/untraced")
for w in works:
    u = samples[f'untraced,{w}']
    print(f"  {w}: " + "  ".join(
        f"{c} {statistics.median(t / b for t, b in zip(samples[f'{c},{w}'], u)):.3f}" for c in arms))
print()
for k in sorted(samples):
    print(f"  {k}: " + " ".join(f"{x:.1f}" for x in samples[k]))
EOF

[ "$with_stats" = 1 ] || exit 0

# ---- where the time goes: each program of a capture during the unrelated process's COW work ------

# prog_stats PID: "id name run_cnt run_time_ns" of every BPF program PID holds (their ids from the
# fdinfo of its program and link fds).
prog_stats() {
  local ids
  ids=$(cat /proc/"$1"/fdinfo/* 2>/dev/null | sed -n 's/^prog_id:[[:space:]]*//p' | sort -un | tr '\n' ' ')
  bpftool -j prog show | python3 -c '
import json, sys
ids = {int(i) for i in sys.argv[1].split()}
for p in json.load(sys.stdin):
    if p["id"] in ids:
        print(p["id"], p.get("name", "?"), p.get("run_cnt", 0), p.get("run_time_ns", 0))' "$ids"
}

for c in default fallback; do
  # shellcheck disable=SC2046
  start_capture $(arm "$c")
  begin_fork
  sysctl -q -w kernel.bpf_stats_enabled=1
  prog_stats "$cap_pid" >"$work/stats.before"
  ns=$("${pin[@]}" "$work_bin" "$stats_work" "$(arg_of "$stats_work")" 1)
  prog_stats "$cap_pid" >"$work/stats.after"
  sysctl -q -w kernel.bpf_stats_enabled="$stats_before"
  end_fork
  stop_capture
  python3 - "$work/stats.before" "$work/stats.after" "$c" "$stats_work" "$(arg_of "$stats_work")" "$ns" <<'PY'
import sys
def load(path):
    out = {}
    for line in open(path):
        i, name, cnt, ns = line.split()
        out[i] = (name, int(cnt), int(ns))
    return out
before, after, arm, work, arg, fault_ns = (load(sys.argv[1]), load(sys.argv[2]), sys.argv[3], sys.argv[4],
                                          int(sys.argv[5]), float(sys.argv[6]))
# Operations of one run: faults of MIB MiB, or the calls / round trips asked for.
faults = arg * 256 if work in ('touch', 'cow') else arg
op = {'cow': 'COW fault', 'touch': 'first touch', 'pipe': 'round trip'}.get(work, 'call')
print(f"\n{arm}: one {work} run of the unrelated process ({faults} {op}s, {fault_ns:.0f} ns a {op} with statistics on),"
      " the capture's programs that ran meanwhile (runs are system-wide):")
total = 0.0
for i, (name, cnt, ns) in sorted(after.items(), key=lambda kv: -(kv[1][2] - before.get(kv[0], ("", 0, 0))[2])):
    b = before.get(i, (name, 0, 0))
    runs, t = cnt - b[1], ns - b[2]
    if not runs:
        continue
    total += t
    print(f"  {name:<18} runs {runs:>9}  {t / runs:7.1f} ns/run  {t / faults:7.1f} ns per {op}")
# A COW run also first-touches the memory (as many faults again, which leave the fault program after
# its first compare): charged to the COW faults here, so this is an upper bound.
print(f"  all programs: {total / faults:.1f} ns per {op} = {100 * total / faults / fault_ns:.2f}% of one"
      + (" (first touches included)" if work == 'cow' else ""))
PY
done
