#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Benchmark (not a test): what thptrace costs under a copy-on-write fault storm. Part 1 runs
# twice: on 4 KiB memory and on a MADV_HUGEPAGE region (where the huge-page allocation counter is on).
#  1. Per-event cost of each of thptrace's BPF programs from the kernel's own accounting
#     (kernel.bpf_stats_enabled: run_time_ns / run_cnt, read with `bpftool -j prog show` while the
#     capture runs), next to a bpftrace one-liner counting the same tracepoint for the same pid on
#     the same storm, run again right after.
#  2. Time for the parent to dirty PAGES pages after fork (every write a COW fault while the child
#     sleeps), untraced vs traced by thptrace (and vs the bpftrace one-liner alone), interleaved,
#     RUNS of each, statistics off; the ratio of the medians.
#  3. Events lost (dropped_events in the capture's JSON) at that burst, and at the fastest burst this
#     machine makes: write faults that reuse their page, from BURST_THREADS threads (fault_burst),
#     traced vs untraced, with the count the capture reports against the known answer.
#  Part 2 has a fourth arm: thptrace with copy sampling on (--sample-copies SAMPLE_COPIES, 64 unless
#  set; off by default), so the cost of sampling (docs/guide/attribution.md) is the ratio of the two traced
#  arms of one run, and per sample (the samples each run sent are in its report). SAMPLE_COPIES=0
#  leaves that arm out (e.g. for a THPTRACE_BIN from before --sample-copies).
#  A fifth arm samples with frame pointers alone (--unwind fp): sampled/that is what the default DWARF
#  unwind's registers and 8 KiB of stack per sample cost the faulting thread.
#  PARTS="2" runs part 2 alone (default "1 2 3").
# Usage (root): tests/bench/bpf_cost.sh [BUILD_DIR]     BUILD_DIR defaults to <repo>/build.
# Tunables (environment): PAGES=262144 (1 GiB) CHILD_MS=5000 RUNS=5 SAMPLE_COPIES=64 THPTRACE_BIN WORKLOAD_BIN
#   (default BUILD_DIR/userspace/cli/thptrace and BUILD_DIR/tests/runtime/dirty_after_fork).
# Changes to the system, all undone on exit: kernel.bpf_stats_enabled=1 during part 1, tracefs mounted at
# /sys/kernel/tracing when it was not (bpftrace needs it for tracepoint formats).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build}
thptrace=${THPTRACE_BIN:-$build/userspace/cli/thptrace}
workload=${WORKLOAD_BIN:-$build/tests/runtime/dirty_after_fork}
burst_bin=${FAULT_BURST_BIN:-$build/tests/runtime/fault_burst}
burst_threads=${BURST_THREADS:-$(nproc)}
pages=${PAGES:-262144}
child_ms=${CHILD_MS:-5000}
runs=${RUNS:-5}
sample_copies=${SAMPLE_COPIES:-64}
parts=${PARTS:-1 2 3}
has_part() { [[ " $parts " == *" $1 "* ]]; }
have_bt=0

source "$here/workload_lib.sh"
[ "$(id -u)" -eq 0 ] || die "run as root (it loads BPF programs and sets kernel.bpf_stats_enabled)."
[ -x "$thptrace" ] || die "no thptrace binary at $thptrace (build first, or set THPTRACE_BIN)."
[ -x "$workload" ] || die "no workload at $workload (build first, or set WORKLOAD_BIN)."
[ -x "$burst_bin" ] || die "no workload at $burst_bin (build first, or set FAULT_BURST_BIN)."
for tool in bpftool python3 sysctl; do
  command -v "$tool" >/dev/null || die "$tool is missing (scripts/install-deps.sh installs it)."
done

work=$(mktemp -d /tmp/thptrace-bpfcost.XXXXXX)
mounted_tracefs=0
cleanup() {
  workload_cleanup
  if [ "$mounted_tracefs" -eq 1 ]; then umount /sys/kernel/tracing || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- helpers --------------------------------------------------------------------------------

# prog_ids PID: ids of the BPF programs PID holds (program and link fds show "prog_id:" in their
# fdinfo). Read from /proc rather than from `bpftool prog show`'s pids, which Debian's bpftool lacks,
# and rather than by name, so another thptrace running on the machine is not counted.
prog_ids() {
  cat /proc/"$1"/fdinfo/* 2>/dev/null | sed -n 's/^prog_id:[[:space:]]*//p' | sort -un | tr '\n' ' '
}

# holds_prog PID: prints "y" when PID holds a BPF program.
holds_prog() {
  if [ -n "$(prog_ids "$1")" ]; then echo y; fi
}

# prog_stats FILE PID: run_cnt/run_time_ns of every BPF program PID holds, as JSON {id: {...}}.
prog_stats() {
  bpftool -j prog show | python3 -c '
import json, sys
ids = {int(i) for i in sys.argv[1].split()}
out = {}
for p in json.load(sys.stdin):
    if p["id"] in ids:
        out[p["id"]] = {"name": p.get("name", "?"), "type": p.get("type", "?"),
                        "run_cnt": p.get("run_cnt", 0), "run_time_ns": p.get("run_time_ns", 0)}
json.dump(out, sys.stdout)' "$(prog_ids "$2")" >"$1"
}

# start_bpftrace: the one-liner on wl_pid; sets bt_pid once attached, or leaves it empty and says
# why in bt_status. Mounts tracefs first when needed (bpftrace reads tracepoint formats there).
start_bpftrace() {
  bt_pid=
  if ! command -v bpftrace >/dev/null; then
    bt_status="bpftrace is not installed"
    return
  fi
  if ! mountpoint -q /sys/kernel/tracing; then
    mount -t tracefs nodev /sys/kernel/tracing && mounted_tracefs=1
  fi
  bpftrace -e "tracepoint:exceptions:page_fault_user /pid == $wl_pid/ { @ = count(); }" \
    >"$work/bpftrace.out" 2>"$work/bpftrace.err" &
  bt_pid=$!
  pids+=("$bt_pid")
  # Attached once it holds a program, plus a moment for the perf event to be enabled.
  for _ in $(seq 1 300); do
    [ -n "$(holds_prog "$bt_pid")" ] && { sleep 1; break; }
    kill -0 "$bt_pid" 2>/dev/null || break
    sleep 0.1
  done
  if [ -n "$(holds_prog "$bt_pid")" ]; then
    bt_status="attached"
  else
    bt_status="could not attach: $(tr '\n' ' ' <"$work/bpftrace.err")"
    stop_bpftrace
  fi
}

# stop_bpftrace: SIGINT, which makes bpftrace print its map and detach. A SIGINT can go unnoticed
# (one that lands just before bpftrace blocks in epoll_wait), so it is repeated each second, and
# after ten a SIGKILL ends it.
stop_bpftrace() {
  [ -n "$bt_pid" ] || return 0
  local i
  for i in $(seq 1 10); do
    kill -INT "$bt_pid" 2>/dev/null || break
    for _ in $(seq 1 10); do
      kill -0 "$bt_pid" 2>/dev/null || break 2
      sleep 0.1
    done
  done
  kill -KILL "$bt_pid" 2>/dev/null || true
  wait "$bt_pid" 2>/dev/null || true
  forget "$bt_pid"
  bt_pid=
}

# ---- warm-up: the first touches of fresh memory are slow on a VM; not counted ------------------

start_workload "${variant:-4k}" timing
go_and_time
finish_workload

# ---- 1. per-event cost, thptrace and bpftrace on the same storm --------------------------------
# Twice: on 4 KiB memory, where the huge-page allocation counter is not attached (THP madvise and no
# MADV_HUGEPAGE region; with THP always it is), and on a MADV_HUGEPAGE region, where it is and runs
# on every allocation (each COW fault allocates the copy).

stats_before_thp() { prog_stats "$work/thp.before" "$cap_pid"; }
stats_before_bt() { prog_stats "$work/bt.before" "$bt_pid"; }

# measure_storm VARIANT: the storm once under thptrace, then once more under the bpftrace one-liner
# alone (sharing a storm, the program that runs second finds the task's lines warm in the cache).
measure_storm() {
  variant=$1
  echo "fault storm ($variant memory): $pages pages ($((pages * 4 / 1024)) MiB) dirtied after fork by $(basename "$workload"), child sleeps ${child_ms} ms"
  start_workload "${variant:-4k}" timing
  start_capture "$work/cost.json"
  sysctl -q -w kernel.bpf_stats_enabled=1
  go_and_time stats_before_thp
  prog_stats "$work/thp.after" "$cap_pid"
  storm_ns=$dirty_ns
  # Statistics cost two clock reads per program run: off again for the timing below.
  sysctl -q -w kernel.bpf_stats_enabled="$stats_before"
  finish_workload
  wait_capture

  start_workload "${variant:-4k}" timing
  start_bpftrace
  have_bt=$([ -n "$bt_pid" ] && echo 1 || echo 0)
  if [ "$have_bt" -eq 1 ]; then
    sysctl -q -w kernel.bpf_stats_enabled=1
    go_and_time stats_before_bt
    prog_stats "$work/bt.after" "$bt_pid"
    sysctl -q -w kernel.bpf_stats_enabled="$stats_before"
    stop_bpftrace
  else
    go_and_time
  fi
  finish_workload
  variant=4k

  python3 - "$work" "$pages" "$storm_ns" "$bt_status" <<'PY'
import json, os, sys
work, pages, storm_ns, bt_status = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]

def delta(prefix):
    before = json.load(open(f"{work}/{prefix}.before"))
    after = json.load(open(f"{work}/{prefix}.after"))
    rows = []
    for pid, a in after.items():
        b = before.get(pid, {"run_cnt": 0, "run_time_ns": 0})
        rows.append((a["name"], a["type"], a["run_cnt"] - b["run_cnt"], a["run_time_ns"] - b["run_time_ns"]))
    return sorted(rows, key=lambda r: -r[2])

def table(title, rows):
    print(title)
    print(f"  {'program':<16} {'type':<10} {'runs':>10} {'run_time_ns':>13} {'ns/event':>9}")
    for name, typ, cnt, ns in rows:
        per = f"{ns / cnt:.1f}" if cnt else "-"
        print(f"  {name:<16} {typ:<10} {cnt:>10} {ns:>13} {per:>9}")

report = json.load(open(f"{work}/cost.json"))
rows = delta("thp")
table("thptrace programs during the storm (kernel.bpf_stats_enabled; runs are system-wide; attached ones only):", rows)
# The programs a COW fault runs: the fault hook (page_fault_user, or fentry/fexit on do_wp_page)
# and, when attached, the huge-page allocation counter on the copy's allocation. The others run per
# syscall or per fork, not per fault.
fault_path = [r for r in rows if r[2] and r[0].startswith(("fault_", "wp_", "huge_wp_", "page_alloc_"))]
per_fault = sum(r[3] / r[2] for r in fault_path)
print(f"  per COW fault: {' + '.join(f'{r[0]} {r[3] / r[2]:.1f}' for r in fault_path)} = {per_fault:.1f} ns "
      f"(goal <= 100 ns)")
print(f"  report: cow_faults={report['totals']['cow_faults']} dropped_events={report['totals']['dropped_events']}")
print(f"  storm: {storm_ns / 1e6:.1f} ms for {pages} faults = {pages / (storm_ns / 1e9) / 1e6:.2f} M faults/s")
print(f"  probes: " + " ".join(f"{k}={v}" for k, v in report.get("probes", {}).items() if isinstance(v, str)))
if os.path.exists(f"{work}/bt.after"):
    table("bpftrace one-liner alone, the same storm again (tracepoint:exceptions:page_fault_user /pid == N/ { @ = count(); }):",
          delta("bt"))
    out = open(f"{work}/bpftrace.out").read().strip().splitlines()
    print("  bpftrace printed: " + " ".join(l for l in out if l.startswith("@")) +
          " (every fault of the pid since it attached: the warm-up's too)")
else:
    print(f"bpftrace: {bt_status}")
PY
  rm -f "$work"/thp.* "$work"/bt.*
}

if has_part 1; then
  measure_storm 4k
  measure_storm thp
fi

# ---- 2 and 3. dirty time untraced vs traced, interleaved; drops at the burst --------------------
# bpf_stats are off here, as in production. When bpftrace attached above, a third arm runs the
# one-liner alone, for the same comparison of whole-path cost (its tracepoint is a perf event,
# whose own overhead run_time_ns does not show).

untraced=()
traced=()
sampled=()
sent=()
sampled_fp=()
sent_fp=()
bpftraced=()
drops=()
run_untraced() {
  start_workload "${variant:-4k}" timing
  go_and_time
  finish_workload
  untraced+=("$dirty_ns")
}

run_traced() {
  start_workload "${variant:-4k}" timing
  start_capture "$work/run$1.json"
  go_and_time
  finish_workload
  wait_capture
  traced+=("$dirty_ns")
  drops+=("$(python3 -c 'import json,sys; t=json.load(open(sys.argv[1]))["totals"]; print(t["dropped_events"], t["cow_faults"])' "$work/run$1.json")")
}

run_sampled() {
  [ "$sample_copies" -gt 0 ] || return 0
  start_workload "${variant:-4k}" timing
  start_capture "$work/sampled$1.json" --sample-copies "$sample_copies"
  go_and_time
  finish_workload
  wait_capture
  sampled+=("$dirty_ns")
  sent+=("$(python3 -c 'import json,sys; print(sum((f.get("copies") or {}).get("samples", 0) for f in json.load(open(sys.argv[1]))["forks"]))' "$work/sampled$1.json")")
}

# The same with frame pointers alone (--unwind fp): no registers or stack copied per sample, so
# sampled/sampled_fp is what the DWARF unwinder's default costs the faulting thread.
run_sampled_fp() {
  [ "$sample_copies" -gt 0 ] || return 0
  start_workload "${variant:-4k}" timing
  start_capture "$work/sampled_fp$1.json" --sample-copies "$sample_copies" --unwind fp
  go_and_time
  finish_workload
  wait_capture
  sampled_fp+=("$dirty_ns")
  sent_fp+=("$(python3 -c 'import json,sys; print(sum((f.get("copies") or {}).get("samples", 0) for f in json.load(open(sys.argv[1]))["forks"]))' "$work/sampled_fp$1.json")")
}

run_bpftraced() {
  [ "$have_bt" -eq 1 ] || return 0
  start_workload "${variant:-4k}" timing
  start_bpftrace
  [ -n "$bt_pid" ] || die "bpftrace attached once but not again: $bt_status"
  go_and_time
  stop_bpftrace
  finish_workload
  bpftraced+=("$dirty_ns")
}

# The arms take turns going first, so that whatever a run leaves behind (memory state, a detaching
# tracer) does not always fall on the same arm.
for i in $(seq 1 "$runs"); do
  has_part 2 || break
  case $((i % 3)) in
    1) run_untraced; run_traced "$i"; run_sampled "$i"; run_sampled_fp "$i"; run_bpftraced ;;
    2) run_traced "$i"; run_sampled_fp "$i"; run_sampled "$i"; run_bpftraced; run_untraced ;;
    0) run_bpftraced; run_sampled "$i"; run_untraced; run_sampled_fp "$i"; run_traced "$i" ;;
  esac
done

has_part 2 && SAMPLED_FP="${sampled_fp[*]}" SENT_FP="${sent_fp[*]}" python3 - "$pages" "$sample_copies" "${sent[*]}" "${untraced[*]}" "${traced[*]}" "${bpftraced[*]}" "${sampled[*]}" "${drops[@]}" <<'PY'
import os, statistics, sys
pages = int(sys.argv[1])
sfp = [int(x) for x in os.environ.get("SAMPLED_FP", "").split()]
sent_fp = [int(x) for x in os.environ.get("SENT_FP", "").split()]
every = int(sys.argv[2])
sent = [int(x) for x in sys.argv[3].split()]
del sys.argv[2:4]
u = [int(x) for x in sys.argv[2].split()]
t = [int(x) for x in sys.argv[3].split()]
b = [int(x) for x in sys.argv[4].split()]
s = [int(x) for x in sys.argv[5].split()]
drops = [tuple(int(v) for v in d.split()) for d in sys.argv[6:]]
ms = lambda v: " ".join(f"{x / 1e6:.0f}" for x in v)
med = statistics.median
print(f"dirty {pages} pages after fork, {len(u)} interleaved runs of each (ms; bpf_stats off):")
print(f"  untraced:          {ms(u)}   median {med(u) / 1e6:.1f}")
print(f"  thptrace:          {ms(t)}   median {med(t) / 1e6:.1f}   (defaults: copies not sampled)")
if s:
    print(f"  thptrace sampled:  {ms(s)}   median {med(s) / 1e6:.1f}   (--sample-copies {every}; "
          f"samples sent: {' '.join(map(str, sent))})")
if sfp:
    print(f"  thptrace sampled, frame pointers alone: {ms(sfp)}   median {med(sfp) / 1e6:.1f}   (--unwind fp; "
          f"samples sent: {' '.join(map(str, sent_fp))})")
if b:
    print(f"  bpftrace one-liner: {ms(b)}   median {med(b) / 1e6:.1f}")
print(f"  thptrace/untraced: {med(t) / med(u):.3f} (ratio of medians; goal <= 1.05), "
      f"{statistics.mean(t) / statistics.mean(u):.3f} (ratio of means), {min(t) / min(u):.3f} (ratio of fastest runs)")
if s:
    print(f"  thptrace sampled/untraced: {med(s) / med(u):.3f}; sampled/unsampled: {med(s) / med(t):.3f} "
          f"(+{(med(s) - med(t)) / pages:.0f} ns per fault, "
          f"{(med(s) - med(t)) / max(1, med(sent)) / 1e3:.1f} us per sample sent)")
if s and sfp:
    print(f"  sampled dwarf/fp: {med(s) / med(sfp):.3f} ("
          f"{(med(s) - med(sfp)) / max(1, med(sent)) / 1e3:+.1f} us per sample for the registers and 8 KiB of stack)")
if b:
    print(f"  bpftrace/untraced: {med(b) / med(u):.3f} (ratio of medians)")
us_per_fault = lambda v: med(v) / pages / 1e3
extra = (med(t) - med(u)) / pages
print(f"  per fault: {us_per_fault(u):.2f} us untraced, {us_per_fault(t):.2f} us traced: +{extra:.0f} ns")
rates = [pages / (x / 1e9) / 1e6 for x in t]
print(f"  burst rate while traced: {min(rates):.2f}-{max(rates):.2f} M faults/s")
print(f"  dropped_events per traced run: {' '.join(str(d[0]) for d in drops)}   "
      f"cow_faults reported: {' '.join(str(d[1]) for d in drops)}")
PY

# ---- 3b. the fastest burst: reuse faults from every CPU -----------------------------------------

# burst_run JSON|"": one fault_burst run, traced by a capture writing JSON when given; prints
# "<faults> <ns> [<counted> <dropped>]".
burst_run() {
  rm -f "$work/in" "$work/out"
  mkfifo "$work/in" "$work/out"
  "$burst_bin" "$pages" "$burst_threads" <"$work/in" >"$work/out" &
  wl_bg=$!
  pids+=("$wl_bg")
  exec {wl_in}>"$work/in" {wl_out}<"$work/out"
  local line
  read -r -t 60 line <&"$wl_out" || die "fault_burst did not get ready"
  wl_pid=${line#ready }
  [ -n "$1" ] && start_capture "$1"
  echo go >&"$wl_in"
  read -r -t 120 line <&"$wl_out" || die "fault_burst did not report"
  local faults ns
  read -r _ faults _ ns <<<"$line"
  read -r -t 60 line <&"$wl_out" || true
  exec {wl_in}>&- {wl_out}<&-
  wait "$wl_bg" || die "fault_burst failed"
  forget "$wl_bg"
  if [ -n "$1" ]; then
    wait_capture
    echo "$faults $ns $(python3 -c 'import json,sys; t=json.load(open(sys.argv[1]))["totals"]; print(t["cow_faults"], t["dropped_events"])' "$1")"
  else
    echo "$faults $ns"
  fi
}

has_part 3 || exit 0
burst_plain=()
burst_traced=()
for i in $(seq 1 "$runs"); do
  burst_plain+=("$(burst_run "")")
  burst_traced+=("$(burst_run "$work/burst$i.json")")
done
python3 - "$burst_threads" "${#burst_plain[@]}" "${burst_plain[@]}" "${burst_traced[@]}" <<'PY'
import statistics, sys
threads, n = int(sys.argv[1]), int(sys.argv[2])
plain = [tuple(int(v) for v in r.split()) for r in sys.argv[3:3 + n]]
traced = [tuple(int(v) for v in r.split()) for r in sys.argv[3 + n:]]
rate = lambda r: r[0] / (r[1] / 1e9) / 1e6
print(f"fastest burst: {plain[0][0]} write faults reusing their page, {threads} threads, {n} interleaved runs of each:")
print(f"  untraced: {' '.join(f'{rate(r):.2f}' for r in plain)} M faults/s   median {statistics.median(map(rate, plain)):.2f}")
print(f"  thptrace: {' '.join(f'{rate(r):.2f}' for r in traced)} M faults/s   median {statistics.median(map(rate, traced)):.2f}")
print(f"  counted by thptrace (known answer {traced[0][0]} + a few stack pages): {' '.join(str(r[2]) for r in traced)}")
print(f"  dropped_events: {' '.join(str(r[3]) for r in traced)}")
PY
