#!/usr/bin/env bash
# Benchmark (not a test): what processes thptrace does NOT watch pay while it runs. thptrace's
# programs hook every page fault of the machine (fault tracepoints on the fallback path) and, where
# the fork of a target cannot be timed by the libc fork() uprobe, every system call (sys_enter /
# sys_exit). Four kinds of work of an unrelated process (tests/bench/host_work.c), each timed
# untraced and traced in the same run, interleaved, RUNS times; each timing is the best of ROUNDS:
#   getppid   a system-call loop            pipe   one-byte round trips between two processes
#   touch     first touch of fresh memory   cow    copy-on-write faults after an unwatched fork
# "traced" is a capture (`thptrace --pid`) of a redis-server this script starts on 127.0.0.1, in
# thptrace's default attach modes and again with --force-fallback. Prints ns per operation, the
# medians, and traced/untraced ratios of the medians (goal: ≤ 1.01).
# With BASELINE_BIN (an older thptrace) a fourth arm is that binary in its default modes.
# Usage (root): tests/bench/host_overhead.sh [BUILD_DIR]    BUILD_DIR defaults to <repo>/build.
# Tunables (environment): RUNS=5 ROUNDS=3 GETPPID_N=2000000 PIPE_N=50000 MIB=256 THPTRACE_BIN
#   BASELINE_BIN.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build}
thptrace=${THPTRACE_BIN:-$build/userspace/cli/thptrace}
work_bin=$build/tests/bench/host_work
runs=${RUNS:-5}
rounds=${ROUNDS:-3}
getppid_n=${GETPPID_N:-2000000}
pipe_n=${PIPE_N:-50000}
mib=${MIB:-256}
baseline=${BASELINE_BIN:-}

die() { echo "$0: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "run as root (thptrace loads BPF programs)."
[ -x "$thptrace" ] || die "no thptrace binary at $thptrace (build first, or set THPTRACE_BIN)."
[ -z "$baseline" ] || [ -x "$baseline" ] || die "BASELINE_BIN=$baseline is not an executable."
[ -x "$work_bin" ] || die "no workload at $work_bin (build the host_work target first)."
command -v redis-server >/dev/null || die "redis-server is missing (scripts/install-deps.sh installs it)."

. "$here/redis_lib.sh"
work=$(mktemp -d /tmp/thptrace-host.XXXXXX)
cap_pid=
cleanup() {
  if [ -n "$cap_pid" ]; then kill -INT "$cap_pid" 2>/dev/null || true; wait "$cap_pid" 2>/dev/null || true; fi
  bench_stop_redis
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port=$(bench_free_port 6420)
bench_start_redis "$port" "$work"

start_capture() {  # start_capture BINARY [FLAGS...]: returns once its probes are attached
  local bin=$1
  shift
  "$bin" --pid "$BENCH_REDIS_PID" --redis "127.0.0.1:$port" --duration 3600 "$@" \
    >"$work/capture.out" 2>"$work/capture.err" &
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

works=(getppid pipe touch cow)
arg_of() {
  case $1 in
    getppid) echo "$getppid_n" ;;
    pipe) echo "$pipe_n" ;;
    *) echo "$mib" ;;
  esac
}

declare -A samples  # samples[condition,work] = "ns ns ..."
measure() {  # measure CONDITION
  local w ns
  for w in "${works[@]}"; do
    ns=$("$work_bin" "$w" "$(arg_of "$w")" "$rounds")
    samples[$1,$w]+="$ns "
  done
}

conditions=(untraced default fallback)
[ -z "$baseline" ] || conditions+=(baseline)
arm() {  # arm CONDITION: the binary and flags of a traced arm
  case $1 in
    fallback) echo "$thptrace --force-fallback" ;;
    baseline) echo "$baseline" ;;
    *) echo "$thptrace" ;;
  esac
}

echo "host_overhead: $(nproc) CPUs, kernel $(uname -r), thptrace $thptrace, $runs runs, best of $rounds each"
for r in $(seq 1 "$runs"); do
  # Rotate the order so that no condition always runs first (warm caches, frequency).
  for k in $(seq 0 $((${#conditions[@]} - 1))); do
    c=${conditions[$(((r + k) % ${#conditions[@]}))]}
    # shellcheck disable=SC2046
    [ "$c" = untraced ] || start_capture $(arm "$c")
    measure "$c"
    [ "$c" = untraced ] || stop_capture
  done
  echo "  run $r done"
done

python3 - "$runs" <<EOF
import statistics, sys
samples = {}
$(for key in "${!samples[@]}"; do echo "samples['$key'] = [float(x) for x in '${samples[$key]}'.split()]"; done)
works = ['getppid', 'pipe', 'touch', 'cow']
unit = {'getppid': 'ns per call', 'pipe': 'ns per round trip', 'touch': 'ns per fault', 'cow': 'ns per fault'}
print()
arms = [c for c in ('default', 'fallback', 'baseline') if f'{c},getppid' in samples]
print("| work | untraced | " + " | ".join(f"{c} | ratio" for c in arms) + " |")
print("|---|---|" + "---|---|" * len(arms))
for w in works:
    base = statistics.median(samples[f'untraced,{w}'])
    row = [f"{base:.1f}"]
    for c in arms:
        m = statistics.median(samples[f'{c},{w}'])
        row += [f"{m:.1f}", f"{m / base:.3f}"]
    print(f"| {w} ({unit[w]}) | " + " | ".join(row) + " |")
print()
for k in sorted(samples):
    print(f"  {k}: " + " ".join(f"{x:.1f}" for x in samples[k]))
EOF
