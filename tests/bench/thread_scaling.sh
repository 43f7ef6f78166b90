#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Benchmark (not a test): does the COW fault path cost more when the target's writes come from many
# threads at once? For 1, 2 and $(nproc) writer threads (threads = cores, so it scales with the
# machine), a workload dirties PAGES pages after fork (dirty_after_fork threads=T; every write a COW
# fault while the child sleeps), and this prints:
#  1. the per-event cost of the fault programs from the kernel's own accounting
#     (kernel.bpf_stats_enabled=1 for that run only: run_time_ns / run_cnt of the programs the
#     capture holds whose names start fault_/wp_/huge_wp_/kfault_), with the capture's count against
#     the known answer;
#  2. the dirty time traced by thptrace vs untraced, RUNS interleaved runs of each with statistics
#     off, as the ratio of the medians.
# Goals: the per-event cost with all cores within 10% of one thread's; the ratio <= 1.05
# at every thread count. On a 2-core machine "all cores" is two threads: contention shows only
# between those two.
# Usage (root): tests/bench/thread_scaling.sh [BUILD_DIR]     BUILD_DIR defaults to <repo>/build.
# Tunables (environment): PAGES=262144 (1 GiB) CHILD_MS=8000 RUNS=5 THREADS="1 2 $(nproc)"
#   THPTRACE_BIN (another build's thptrace, e.g. a baseline), WORKLOAD_BIN, THPTRACE_ARGS (extra
#   capture flags, e.g. --force-fallback).
# Changes to the system, undone on exit: kernel.bpf_stats_enabled=1 during part 1 of each count.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build}
thptrace=${THPTRACE_BIN:-$build/userspace/cli/thptrace}
workload=${WORKLOAD_BIN:-$build/tests/runtime/dirty_after_fork}
pages=${PAGES:-262144}
child_ms=${CHILD_MS:-8000}
runs=${RUNS:-5}
read -r -a capture_flags <<<"${THPTRACE_ARGS:-}"
threads_list=${THREADS:-$(printf '%s\n' 1 2 "$(nproc)" | sort -nu | tr '\n' ' ')}

source "$here/workload_lib.sh"
[ "$(id -u)" -eq 0 ] || die "run as root (it loads BPF programs and sets kernel.bpf_stats_enabled)."
[ -x "$thptrace" ] || die "no thptrace binary at $thptrace (build first, or set THPTRACE_BIN)."
[ -x "$workload" ] || die "no workload at $workload (build first, or set WORKLOAD_BIN)."
for tool in bpftool python3 sysctl; do
  command -v "$tool" >/dev/null || die "$tool is missing (scripts/install-deps.sh installs it)."
done

work=$(mktemp -d /tmp/thptrace-threads.XXXXXX)
cleanup() {
  workload_cleanup
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# prog_stats FILE: run_cnt/run_time_ns of the BPF programs the capture holds (ids from its fds'
# fdinfo, so another thptrace on the machine is not counted), as JSON {id: {...}}.
prog_stats() {
  local ids
  ids=$(cat /proc/"$cap_pid"/fdinfo/* 2>/dev/null | sed -n 's/^prog_id:[[:space:]]*//p' | sort -un | tr '\n' ' ')
  bpftool -j prog show | python3 -c '
import json, sys
ids = {int(i) for i in sys.argv[1].split()}
json.dump({p["id"]: {"name": p.get("name", "?"), "run_cnt": p.get("run_cnt", 0),
                     "run_time_ns": p.get("run_time_ns", 0)} for p in json.load(sys.stdin) if p["id"] in ids},
          sys.stdout)' "$ids" >"$1"
}
stats_before_go() { prog_stats "$work/before"; }

echo "thread scaling: $pages pages ($((pages * 4 / 1024)) MiB) dirtied after fork, $(nproc) CPUs, threads: $threads_list"
echo "thptrace: $thptrace ${capture_flags[*]}"
# Warm-up (the first touches of fresh memory are slow on a VM): not counted.
start_workload 4k timing threads=1
go_and_time
finish_workload

summary=()
for t in $threads_list; do
  # 1. Per-event cost, statistics on for this run only.
  start_workload 4k timing "threads=$t"
  start_capture "$work/stats.json" "${capture_flags[@]}"
  sysctl -q -w kernel.bpf_stats_enabled=1
  go_and_time stats_before_go
  prog_stats "$work/after"
  sysctl -q -w kernel.bpf_stats_enabled="$stats_before"
  finish_workload
  wait_capture
  cost=$(python3 - "$work" "$pages" <<'PY'
import json, sys
work, pages = sys.argv[1], int(sys.argv[2])
before, after = json.load(open(f"{work}/before")), json.load(open(f"{work}/after"))
report = json.load(open(f"{work}/stats.json"))
parts, total = [], 0.0
for pid, a in after.items():
    if not a["name"].startswith(("fault_", "wp_", "huge_wp_", "kfault_")):
        continue
    b = before.get(pid, {"run_cnt": 0, "run_time_ns": 0})
    cnt, ns = a["run_cnt"] - b["run_cnt"], a["run_time_ns"] - b["run_time_ns"]
    if cnt:
        parts.append(f"{a['name']} {ns / cnt:.1f}")
        # kfault_ runs on kernel-mode faults only, not on these: its cost per event is not per COW fault.
        if not a["name"].startswith("kfault_"):
            total += ns / cnt
forks = report["forks"]
counted = forks[0]["cow_faults"] if forks else -1
print(f"{total:.1f} {counted} {report['probes']['cow_fault']} {'+'.join(parts).replace(' ', ':')}")
PY
)
  # 2. Dirty time, untraced and traced, interleaved.
  untraced=()
  traced=()
  for i in $(seq 1 "$runs"); do
    run_u() { start_workload 4k timing "threads=$t"; go_and_time; finish_workload; untraced+=("$dirty_ns"); }
    run_t() {
      start_workload 4k timing "threads=$t"
      start_capture "$work/run.json" "${capture_flags[@]}"
      go_and_time
      finish_workload
      wait_capture
      traced+=("$dirty_ns")
    }
    if [ $((i % 2)) -eq 1 ]; then run_u; run_t; else run_t; run_u; fi
  done
  line=$(python3 - "$t" "$pages" "$cost" "${untraced[*]}" "${traced[*]}" <<'PY'
import statistics, sys
t, pages, cost = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split()
u = [int(x) for x in sys.argv[4].split()]
tr = [int(x) for x in sys.argv[5].split()]
med = statistics.median
# The spread of each arm (fastest-slowest run) beside its median: on a VM whose memory the host
# backs lazily, one run's faults can cost twice another's, and a ratio is read against that.
spread = lambda xs: f"{min(xs) / 1e6:.0f}-{max(xs) / 1e6:.0f}"
print(f"{t} {cost[0]} {med(tr) / med(u):.3f} {med(u) / 1e6:.1f} {med(tr) / 1e6:.1f} {cost[1]} {cost[2]} {cost[3]} {spread(u)} {spread(tr)}")
PY
)
  echo "  threads=$t: $line" | awk '{printf "  threads=%s  ns/event %s  traced/untraced %s  (untraced %s ms [%s], traced %s ms [%s])  counted %s  cow_fault=%s  [%s]\n", $2, $3, $4, $5, $10, $6, $11, $7, $8, $9}'
  summary+=("$line")
done

python3 - "$pages" "${summary[@]}" <<'PY'
import sys
pages = int(sys.argv[1])
rows = [r.split() for r in sys.argv[2:]]
one = float(rows[0][1])
print("summary (goal: ns/event at the most threads within 10% of one thread's; ratio <= 1.05 everywhere):")
print(f"  {'threads':>7} {'ns/event':>9} {'vs 1 thread':>11} {'traced/untraced':>15} {'counted':>9}")
for t, ns, ratio, mu, mt, counted, mode, parts, su, st in rows:
    print(f"  {t:>7} {float(ns):>9.1f} {float(ns) / one:>11.2f} {ratio:>15} {counted:>9}  (known answer {pages} + a few)")
PY
