#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Benchmark (not a test): what the first-choice COW fault path (fentry/fexit on do_wp_page) costs per
# fault, against an EMPTY fentry/fexit pair on the same function, in the same run. Meant for a kernel
# that takes fentry: the kernel-matrix guests (TCG, where absolute times mean nothing and only ratios
# do), e.g.
#   tests/vm/guest.sh --kernel 6.1 --share-rw "$PWD/build" -- bash tests/bench/fentry_cost.sh "$PWD/build"
# A parent dirties PAGES pages after fork (dirty_after_fork: every write a COW fault while the child
# sleeps), ROUNDS times under each arm, the arms taking turns going first:
#   untraced   nothing attached
#   empty      an empty fentry and an empty fexit program on do_wp_page (tests/bench/empty_progs)
#   thptrace   a capture of the parent (`thptrace --pid`), in its default modes
#   unwatched  a capture of another process (a sleep): what the parent, unwatched, pays
#   baseline, baseline_unwatched   the same two with BASELINE_BIN (an older thptrace), when set
# For each it prints the fault programs' cost per run from the kernel's own accounting
# (kernel.bpf_stats_enabled, run_time_ns / run_cnt over the dirty window), the ratio to the empty
# pair's, the time per fault, and the programs' sizes (`bpftool prog show`: xlated and jited bytes;
# a BPF instruction is 8 bytes xlated).
# Usage (root): tests/bench/fentry_cost.sh [BUILD_DIR]     BUILD_DIR defaults to <repo>/build.
# Tunables (environment): PAGES=16384 CHILD_MS=10000 ROUNDS=3 THPTRACE_BIN BASELINE_BIN WORKLOAD_BIN
#   EMPTY_BIN. Changes to the system, undone on exit: kernel.bpf_stats_enabled=1.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build}
thptrace=${THPTRACE_BIN:-$build/userspace/cli/thptrace}
baseline=${BASELINE_BIN:-}
workload=${WORKLOAD_BIN:-$build/tests/runtime/dirty_after_fork}
empty_bin=${EMPTY_BIN:-$build/tests/bench/empty_progs}
pages=${PAGES:-16384}
child_ms=${CHILD_MS:-10000}
rounds=${ROUNDS:-3}

source "$here/workload_lib.sh"
[ "$(id -u)" -eq 0 ] || die "run as root (it loads BPF programs and sets kernel.bpf_stats_enabled)."
[ -x "$thptrace" ] || die "no thptrace binary at $thptrace (build first, or set THPTRACE_BIN)."
[ -z "$baseline" ] || [ -x "$baseline" ] || die "BASELINE_BIN=$baseline is not an executable."
[ -x "$workload" ] || die "no workload at $workload (build the dirty_after_fork target, or set WORKLOAD_BIN)."
[ -x "$empty_bin" ] || die "no empty_progs at $empty_bin (build the empty_progs target, or set EMPTY_BIN)."
for tool in bpftool python3 sysctl; do
  command -v "$tool" >/dev/null || die "$tool is missing (scripts/install-deps.sh installs it)."
done

work=$(mktemp -d /tmp/thptrace-fentry.XXXXXX)
cleanup() {
  workload_cleanup
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# dirty BEFORE AFTER: warms up, runs BEFORE, lets the workload fork and dirty (dirty_ns), runs AFTER.
dirty() {
  go_and_time $1
  $2
}

# ids of the BPF programs PID holds (from the fdinfo of its program and link fds).
prog_ids() {
  cat /proc/"$1"/fdinfo/* 2>/dev/null | sed -n 's/^prog_id:[[:space:]]*//p' | sort -un | tr '\n' ' '
}

# prog_stats FILE PID: name, run_cnt, run_time_ns and sizes of every fentry/fexit program PID holds.
prog_stats() {
  bpftool -j prog show | python3 -c '
import json, sys
ids = {int(i) for i in sys.argv[1].split()}
out = {}
for p in json.load(sys.stdin):
    if p["id"] in ids and p.get("type") == "tracing":
        out[p["id"]] = {k: p.get(k, 0) for k in ("name", "run_cnt", "run_time_ns", "bytes_xlated", "bytes_jited")}
json.dump(out, sys.stdout)' "$(prog_ids "$2")" >"$1"
}

# ---- arms -------------------------------------------------------------------------------------

results=$work/results  # one JSON object per line: arm, dirty_ns and the programs' deltas
arm_untraced() {
  start_workload 4k timing
  dirty : :
  finish_workload
  echo "{\"arm\": \"untraced\", \"dirty_ns\": $dirty_ns, \"progs\": {}}" >>"$results"
}

empty_stats() {  # empty_stats FILE: the empty programs' counters as prog_stats writes them
  echo stats >&"$em_in"
  local line i=0
  echo -n "{" >"$1"
  for hook in fentry:do_wp_page fexit:do_wp_page; do
    read -r -t 30 line <&"$em_out" || die "empty_progs did not answer"
    read -r name cnt ns <<<"$line"
    [ $i -eq 0 ] || echo -n ", " >>"$1"
    echo -n "\"$i\": {\"name\": \"empty_${name%%:*}\", \"run_cnt\": $cnt, \"run_time_ns\": $ns}" >>"$1"
    i=$((i + 1))
  done
  echo "}" >>"$1"
}
empty_before() { empty_stats "$work/before"; }
empty_after() { empty_stats "$work/after"; }

arm_empty() {
  start_workload 4k timing
  rm -f "$work/em_in" "$work/em_out"
  mkfifo "$work/em_in" "$work/em_out"
  "$empty_bin" fentry:do_wp_page fexit:do_wp_page <"$work/em_in" >"$work/em_out" 2>"$work/em_err" &
  em_bg=$!
  pids+=("$em_bg")
  exec {em_in}>"$work/em_in" {em_out}<"$work/em_out"
  local line
  read -r -t 60 line <&"$em_out" || die "empty_progs did not attach: $(cat "$work/em_err")"
  [ "$line" = attached ] || die "unexpected empty_progs output: $line"
  dirty empty_before empty_after
  exec {em_in}>&- {em_out}<&-
  wait "$em_bg" || die "empty_progs failed"
  forget "$em_bg"
  finish_workload
  record empty
}

capture_before() { prog_stats "$work/before" "$cap_pid"; }
capture_after() { prog_stats "$work/after" "$cap_pid"; }

arm_capture() {  # arm_capture NAME BINARY [unwatched]
  start_workload 4k timing
  local target=$wl_pid sleeper=
  if [ -n "${3:-}" ]; then
    # The capture watches another process: the workload is one the machine's tracer does not watch.
    sleep 3600 &
    sleeper=$!
    pids+=("$sleeper")
    target=$sleeper
  fi
  "$2" --pid "$target" --duration 600 --json "$work/report.json" >"$work/capture.out" 2>"$work/capture.err" &
  cap_pid=$!
  pids+=("$cap_pid")
  local i
  for i in $(seq 1 600); do
    grep -q "tracing pid" "$work/capture.err" 2>/dev/null && break
    kill -0 "$cap_pid" 2>/dev/null || { cat "$work/capture.err" >&2; die "$2 did not start tracing"; }
    sleep 0.1
  done
  dirty capture_before capture_after
  finish_workload
  if [ -n "$sleeper" ]; then
    kill -INT "$cap_pid"
  fi
  wait "$cap_pid" || { cat "$work/capture.err" >&2; die "$2 exited with an error"; }
  forget "$cap_pid"
  if [ -n "$sleeper" ]; then
    kill "$sleeper"
    wait "$sleeper" 2>/dev/null || true
    forget "$sleeper"
  fi
  record "$1" "$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["probes"]["cow_fault"], r["forks"][0]["cow_faults"] if r["forks"] else 0)' "$work/report.json")"
}

record() {  # record ARM [PROBE_MODE COUNTED]: appends the arm's deltas to the results
  python3 - "$work/before" "$work/after" "$1" "$dirty_ns" "${2:-}" >>"$results" <<'PY'
import json, sys
before, after = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
extra = sys.argv[5].split()
progs = {}
for k, a in after.items():
    b = before.get(k, {"run_cnt": 0, "run_time_ns": 0})
    progs[a["name"]] = {"runs": a["run_cnt"] - b["run_cnt"], "ns": a["run_time_ns"] - b["run_time_ns"],
                        "xlated": a.get("bytes_xlated", 0), "jited": a.get("bytes_jited", 0)}
print(json.dumps({"arm": sys.argv[3], "dirty_ns": int(sys.argv[4]), "progs": progs,
                  "mode": extra[0] if extra else "", "counted": int(extra[1]) if extra else 0}))
PY
  rm -f "$work/before" "$work/after"
}

arms=(untraced empty thptrace unwatched)
[ -z "$baseline" ] || arms+=(baseline baseline_unwatched)
run_arm() {
  case $1 in
    untraced) arm_untraced ;;
    empty) arm_empty ;;
    thptrace) arm_capture thptrace "$thptrace" ;;
    unwatched) arm_capture unwatched "$thptrace" unwatched ;;
    baseline) arm_capture baseline "$baseline" ;;
    baseline_unwatched) arm_capture baseline_unwatched "$baseline" unwatched ;;
  esac
}

sysctl -q -w kernel.bpf_stats_enabled=1
echo "fentry_cost: kernel $(uname -r), $(nproc) CPUs, $pages pages dirtied after fork, $rounds rounds, thptrace $thptrace${baseline:+, baseline $baseline}"
# Warm-up, not counted: the first touches of fresh memory are slow on a VM.
start_workload 4k timing
dirty : :
finish_workload
for r in $(seq 1 "$rounds"); do
  for k in $(seq 0 $((${#arms[@]} - 1))); do
    run_arm "${arms[$(((r + k) % ${#arms[@]}))]}"
  done
  echo "  round $r done"
done

python3 - "$results" "$pages" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
pages = int(sys.argv[2])
arms = [a for a in ("untraced", "empty", "thptrace", "baseline", "unwatched", "baseline_unwatched")
        if any(r["arm"] == a for r in rows)]
med = statistics.median

def per_run(r, names):
    """ns per run of the programs on do_wp_page (fentry + fexit), over the dirty window."""
    total = 0.0
    for n, p in r["progs"].items():
        if n in names and p["runs"]:
            total += p["ns"] / p["runs"]
    return total

# The fentry/fexit pair on do_wp_page: the empty pair, thptrace's wp_fentry/wp_fexit (or their
# *_compat build; the kernel truncates names to 15 characters).
def pair_names(r):
    return [n for n in r["progs"] if n.startswith(("empty_", "wp_f"))]

# Under TCG a vCPU thread descheduled by the host in the middle of a program adds that time to its
# run_time_ns: a round's mean per run can jump several-fold. So the fastest round is shown next to
# the median, and the ratios are given for both.
print()
print("| arm | per fault on do_wp_page: fentry + fexit, ns (bpf_stats), median / fastest round | ratio to the empty pair, median / fastest | dirty, ns per fault (median) | ratio to untraced | counted / mode |")
print("|---|---|---|---|---|---|")
base_dirty = med([r["dirty_ns"] for r in rows if r["arm"] == "untraced"]) / pages
costs = {a: [per_run(r, pair_names(r)) for r in rows if r["arm"] == a] for a in arms if a != "untraced"}
empty = costs.get("empty", [0])
for a in arms:
    rs = [r for r in rows if r["arm"] == a]
    d = med([r["dirty_ns"] for r in rs]) / pages
    if a == "untraced":
        print(f"| {a} | - | - | {d:.0f} | 1.000 | - |")
        continue
    c = costs[a]
    ratio = f"{med(c) / med(empty):.2f} / {min(c) / min(empty):.2f}" if min(empty) else "-"
    counted = (" ".join(f"{r['counted']}" for r in rs) + f" / {rs[0]['mode']}") if rs[0].get("mode") else "-"
    print(f"| {a} | {med(c):.0f} / {min(c):.0f} | {ratio} | {d:.0f} | {d / base_dirty:.3f} | {counted} |")
print()
print("Per program (medians over the rounds; runs are system-wide; sizes from bpftool prog show):")
for a in arms:
    if a == "untraced":
        continue
    rs = [r for r in rows if r["arm"] == a]
    names = sorted({n for r in rs for n in r["progs"]})
    for n in names:
        ps = [r["progs"][n] for r in rs if n in r["progs"]]
        runs = med([p["runs"] for p in ps])
        per = med([p["ns"] / p["runs"] for p in ps if p["runs"]]) if any(p["runs"] for p in ps) else 0
        size = f"xlated {ps[0]['xlated']} B ({ps[0]['xlated'] // 8} insns), jited {ps[0]['jited']} B" if ps[0]["xlated"] else "2 insns"
        if runs or n.startswith(("wp_", "huge_wp_", "empty_")):
            print(f"  {a:<9} {n:<16} runs {runs:>8.0f}  {per:7.1f} ns/run  {size}")
print()
for r in rows:
    print(f"  {r['arm']}: dirty {r['dirty_ns'] / pages:.0f} ns/fault; " +
          ", ".join(f"{n} {p['runs']} runs {p['ns'] / p['runs'] if p['runs'] else 0:.0f} ns" for n, p in sorted(r["progs"].items())))
PY
