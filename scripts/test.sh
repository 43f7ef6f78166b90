#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The README's test command: installs the dependencies, builds, lints the changed lines, and runs every
# test: unit tests and deployment checks; runtime tests that load the real BPF programs and start real
# redis-server processes (and a real Prometheus); the kernel matrix in qemu guests; the fuzzers over
# their committed corpora (FUZZ_SECONDS each, here 10); the unit tests and the capture and daemon
# runtime tests again under ASan+UBSan. Needs root; with THPTRACE_REQUIRE_BPF=1 a test that cannot
# load BPF fails instead of skipping. Ends with a table of each stage's wall time, also on failure.
#
# While the host's runtime tests and the kernel matrix run, the ASan+UBSan build (one compile job)
# and then the fuzzers (one core) run beside them: a CPU-bound neighbour such as every Redis host has,
# which the runtime tests must pass beside, and CPU time the tests leave idle while they wait on
# servers and guests. Each stage's time: docs/development/tests.md, "Where the time goes".
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${THPTRACE_BUILD_DIR:-$root/build}
logs=$build/logs

run_start=$(date +%s)
# Each stage's "NAME|seconds|result", foreground and background alike, in the order they ended.
times=$logs/stages.times

table() {
  local rc=$? n t r
  [ -z "${beside:-}" ] || kill -- "-$beside" 2>/dev/null || true  # its process group
  echo
  echo "== stages (wall time)"
  printf '%-34s %7s  %s\n' stage seconds result
  if [ -f "$times" ]; then
    while IFS='|' read -r n t r; do printf '%-34s %7s  %s\n' "$n" "$t" "$r"; done <"$times"
  fi
  printf '%-34s %7s  %s\n' "total" "$(($(date +%s) - run_start))" "$([ "$rc" -eq 0 ] && echo passed || echo FAILED)"
  # The failed tests by name, last: a log cut in the middle still shows which ones.
  if [ "$rc" -ne 0 ] && compgen -G "$logs/*.out" >/dev/null; then
    echo
    echo "== failed tests"
    grep -hE -e '^\[  FAILED  \] [A-Za-z]' -e '^\s*[0-9]+ - .*\((Failed|Timeout)\)' "$logs"/*.out | sed 's/ ([0-9]* ms)$//' | sort -u
  fi
}
trap table EXIT

# timed NAME COMMAND...: runs COMMAND, appends its line to $times; its exit status.
timed() {
  local name=$1 t0 rc=0
  shift
  t0=$(date +%s)
  "$@" || rc=$?
  echo "$name|$(($(date +%s) - t0))|$([ "$rc" -eq 0 ] && echo passed || echo "FAILED ($rc)")" >>"$times"
  return "$rc"
}

# stage NAME COMMAND...: a timed stage in the foreground; a failure ends the run (after the table).
# Its output is also kept in $logs/stage-N.out, for the failed tests' names at the end.
stage() {
  local out
  out=$logs/stage-$(wc -l <"$times").out
  echo "== $1"
  timed "$@" > >(tee "$out") 2>&1
}

mkdir -p "$logs"
rm -f "$logs"/stage-*.out
: >"$times"
stage "install dependencies" bash "$root/scripts/install-deps.sh"
stage "build" bash "$root/scripts/build.sh" -DTHPTRACE_BUILD_TESTS=ON

# Beside the host's tests: the ASan+UBSan build at one compile job, then the fuzzers (one core), in
# the background, their output in $logs/beside.log (printed when they end). In a process group of
# their own (job control on for this one start), so that a failed run stops them all.
set -m
(
  timed "ASan+UBSan build (1 job, beside)" env JOBS=1 bash "$root/scripts/sanitize.sh" build &&
    timed "fuzzers (beside)" env FUZZ_SECONDS="${FUZZ_SECONDS:-10}" FUZZ_JOBS=1 bash "$root/tests/fuzz/run.sh"
) >"$logs/beside.log" 2>&1 &
beside=$!
set +m
echo "== ASan+UBSan build, then the fuzzers: beside the stages below (log: $logs/beside.log)"

# A failure in the foreground is reported after the background has ended too.
status=0
# Formatting, clang-tidy and comment style of what the last change touched (scripts/lint.sh).
stage "lint" env THPTRACE_BUILD_DIR="$build" bash "$root/scripts/lint.sh" || status=1
stage "unit tests, deploy checks" bash -c "cd '$build' && ctest --output-on-failure -L 'unit|deploy' -j2" || status=1
stage "runtime tests" bash -c "cd '$build' && ctest --output-on-failure -L runtime --timeout 1800" || status=1
stage "kernel matrix" bash -c "cd '$build' && ctest --output-on-failure -L vm" || status=1
timed "(waiting for the background)" wait "$beside" || status=1
beside=
echo "== ASan+UBSan build, then the fuzzers (log)"
cat "$logs/beside.log"
[ "$status" -eq 0 ]

stage "ASan+UBSan tests" bash "$root/scripts/sanitize.sh" test
