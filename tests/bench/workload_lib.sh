# SPDX-License-Identifier: Apache-2.0
# Shared by the benchmark scripts that drive dirty_after_fork (sourced, not run): the background
# processes a run starts and their cleanup, kernel.bpf_stats_enabled saved for the end, the workload
# on FIFOs, and a capture started and waited for. The sourcing script sets, before it calls these:
# work (its temporary folder), workload, pages, child_ms and thptrace.

die() { echo "$0: $*" >&2; exit 1; }

pids=()  # background processes of ours not yet reaped: only these are ever killed
forget() {
  local keep=() p
  for p in "${pids[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
  pids=("${keep[@]}")
}
stats_before=$(sysctl -n kernel.bpf_stats_enabled)

# Kills and reaps the background processes still ours and restores kernel.bpf_stats_enabled: the
# sourcing script's EXIT trap calls it.
workload_cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  sysctl -q -w kernel.bpf_stats_enabled="$stats_before" || true
}

# start_workload [ARG...]: the workload (PAGES CHILD_MS ARG...) with its stdin and stdout on FIFOs
# (fds wl_in, wl_out); sets wl_pid once it has populated its pages.
start_workload() {
  rm -f "$work/in" "$work/out"
  mkfifo "$work/in" "$work/out"
  "$workload" "$pages" "$child_ms" "$@" <"$work/in" >"$work/out" &
  wl_bg=$!
  pids+=("$wl_bg")
  exec {wl_in}>"$work/in" {wl_out}<"$work/out"
  local line
  read -r -t 300 line <&"$wl_out" || die "the workload did not get ready"
  [[ $line == ready\ * ]] || die "unexpected workload output: $line"
  wl_pid=${line#ready }
}

# go_and_time [CMD...]: lets the workload warm up the memory its copies will take, runs CMD, lets it
# fork and dirty; sets dirty_ns. The workload's child then still sleeps, so the target (and a
# capture of it) is alive until finish_workload.
go_and_time() {
  echo go >&"$wl_in"
  local line
  read -r -t 300 line <&"$wl_out" || die "the workload did not warm up"
  [ "$line" = warm ] || die "unexpected workload output: $line"
  "$@"
  echo go >&"$wl_in"
  read -r -t 300 line <&"$wl_out" || die "the workload did not report dirty_ns (does $workload support 'timing'?)"
  [[ $line == dirty_ns\ * ]] || die "unexpected workload output: $line"
  dirty_ns=${line#dirty_ns }
  if [ "$dirty_ns" -ge $((child_ms * 1000000)) ]; then
    echo "warning: dirtying took ${dirty_ns} ns, longer than the child's ${child_ms} ms: raise CHILD_MS" >&2
  fi
}

finish_workload() {
  local line
  read -r -t 300 line <&"$wl_out" || die "the workload did not finish"
  exec {wl_in}>&- {wl_out}<&-
  wait "$wl_bg" || die "the workload failed"
  forget "$wl_bg"
}

# start_capture JSON [FLAG...]: thptrace on wl_pid (cap_pid); returns once its probes are attached.
start_capture() {
  "$thptrace" --pid "$wl_pid" --duration 300 --json "$@" >"$work/capture.out" 2>"$work/capture.err" &
  cap_pid=$!
  pids+=("$cap_pid")
  local i
  for i in $(seq 1 300); do
    grep -q "tracing pid" "$work/capture.err" 2>/dev/null && return 0
    kill -0 "$cap_pid" 2>/dev/null || break
    sleep 0.1
  done
  cat "$work/capture.err" >&2
  die "thptrace did not start tracing"
}

# The capture ends by itself when the target exits: waits for it, and fails on an exit status.
wait_capture() {
  local rc=0
  wait "$cap_pid" || rc=$?
  forget "$cap_pid"
  [ "$rc" -eq 0 ] || { cat "$work/capture.err" >&2; die "thptrace exited with $rc"; }
}
