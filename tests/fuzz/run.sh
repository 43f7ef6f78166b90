#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the libFuzzer targets (this folder's CMake project, with clang) and runs each one for a
# bounded time over a copy of its committed corpus, so new inputs never land in the repository.
# Every committed input (crash-* regressions included) is replayed first; dict/<target>.dict, when
# present, seeds the mutations with the tokens and edge numbers that matter to that parser. Any
# crash, sanitizer report, invariant failure, timeout or OOM fails the run. Prints one line per
# target, then "N passed, M failed"; exits non-zero when a target failed or the build did.
#
# Environment: FUZZ_SECONDS (per target, default 20), FUZZ_BUILD_DIR (default <repo>/build-fuzz),
# FUZZ_JOBS (build parallelism, default 2), FUZZ_PARALLEL (targets fuzzed at once, default 1),
# FUZZ_BUILD_ONLY=1 (build the targets and stop), FUZZ_TARGETS (space-separated subset, default all),
# FUZZ_ARTIFACTS (where failing inputs are kept, default $FUZZ_BUILD_DIR/artifacts),
# FUZZ_MAX_LEN (longest input tried, bytes, default 1 MiB: a quadratic parser shows on long inputs),
# FUZZ_FLAGS (more libFuzzer flags, e.g. -len_control=0 to try long inputs from the start).
# regress/<target>/ holds long inputs (MiBs) that once took minutes: each runs once, within 10 s,
# before the fuzzing; they are not seeds, which would make every mutation that long.
# The report writers (report_json, timeline_svg) also run with -len_control=0: names of a
# megabyte are part of what they must survive.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
seconds=${FUZZ_SECONDS:-20}
jobs=${FUZZ_JOBS:-2}
parallel=${FUZZ_PARALLEL:-1}
artifacts=${FUZZ_ARTIFACTS:-$build/artifacts}
max_len=${FUZZ_MAX_LEN:-1048576}
read -r -a extra_flags <<<"${FUZZ_FLAGS:-}"

if ! command -v clang++ >/dev/null; then
  echo "run.sh: clang++ not found (scripts/install-deps.sh installs it)" >&2
  exit 1
fi

echo "building fuzz targets in $build"
mkdir -p "$build"
if ! CC=clang CXX=clang++ cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$build/configure.log" 2>&1; then
  cat "$build/configure.log" >&2
  echo "run.sh: configuring the fuzz targets failed" >&2
  exit 1
fi
if ! cmake --build "$build" -j"$jobs" >"$build/build.log" 2>&1; then
  tail -n 40 "$build/build.log" >&2
  echo "run.sh: building the fuzz targets failed (log: $build/build.log)" >&2
  exit 1
fi
if [ "${FUZZ_BUILD_ONLY:-0}" = 1 ]; then
  echo "built the fuzz targets in $build"
  exit 0
fi

if [ -n "${FUZZ_TARGETS:-}" ]; then
  read -r -a targets <<<"$FUZZ_TARGETS"
else
  targets=()
  for src in "$here"/fuzz_*.cpp; do
    name=$(basename "$src" .cpp)
    targets+=("${name#fuzz_}")
  done
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/thptrace-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT

# UBSan findings are already fatal at compile time (-fno-sanitize-recover); these make every report
# carry a stack. LeakSanitizer stays on: a leak in a parser is a finding too.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}

# One target: replays its regressions, fuzzes a copy of its corpus; prints its one line and
# exits non-zero when it failed.
fuzz_target() {
  local t=$1 bin seeds log start dict len rc elapsed execs cov seeds_n corp
  bin=$build/fuzz_$t
  seeds=$here/corpus/$t
  if [ ! -x "$bin" ] || [ ! -d "$seeds" ]; then
    printf 'FAIL  %-18s no binary %s or no corpus %s\n' "$t" "$bin" "$seeds"
    return 1
  fi
  mkdir -p "$work/$t/corpus" "$work/$t/artifacts"
  if [ -d "$here/regress/$t" ] &&
    ! "$bin" -timeout=10 -rss_limit_mb=2048 "$here/regress/$t"/* >"$work/$t/regress.log" 2>&1; then
    mkdir -p "$artifacts/$t"
    cp -- "$work/$t/regress.log" "$artifacts/$t/regress.log"
    printf 'FAIL  %-18s an input of regress/%s failed or took over 10 s; log kept in %s\n' "$t" "$t" "$artifacts/$t"
    grep -E 'ERROR: |ALARM|invariant failed|runtime error|SUMMARY' "$work/$t/regress.log" | head -n 5 | sed 's/^/      /'
    return 1
  fi
  cp -- "$seeds"/* "$work/$t/corpus/"
  log=$work/$t/log
  start=$(date +%s)
  dict=()
  [ -f "$here/dict/$t.dict" ] && dict=(-dict="$here/dict/$t.dict")
  len=()
  case $t in report_json | timeline_svg) len=(-len_control=0) ;; esac
  "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 "${dict[@]}" \
    -max_len="$max_len" "${len[@]}" "${extra_flags[@]}" \
    -artifact_prefix="$work/$t/artifacts/" "$work/$t/corpus" >"$log" 2>&1
  rc=$?
  elapsed=$(($(date +%s) - start))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | cut -d' ' -f2)
  seeds_n=$(find "$seeds" -type f | wc -l)
  corp=$(find "$work/$t/corpus" -type f | wc -l)
  if [ "$rc" -eq 0 ]; then
    printf 'PASS  %-18s %6s execs in %3ss, cov %s, corpus %s -> %s\n' "$t" "${execs:-?}" "$elapsed" "${cov:-?}" "$seeds_n" "$corp"
  else
    mkdir -p "$artifacts/$t"
    cp -- "$work/$t/artifacts"/* "$artifacts/$t/" 2>/dev/null
    cp -- "$log" "$artifacts/$t/log"
    printf 'FAIL  %-18s exit %s after %ss; inputs and log kept in %s\n' "$t" "$rc" "$elapsed" "$artifacts/$t"
    grep -E 'ERROR: |invariant failed|runtime error|SUMMARY|deadly signal|uncaught exception' "$log" | head -n 5 | sed 's/^/      /'
  fi
  return "$rc"
}

# FUZZ_PARALLEL targets at a time (each libFuzzer process uses one core); their lines in order.
passed=0
failed=0
for i in "${!targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$parallel" ]; do wait -n || true; done
  {
    rc=0
    fuzz_target "${targets[$i]}" || rc=$?
    echo "$rc" >"$work/rc.$i"
  } >"$work/result.$i" 2>&1 &
done
wait
for i in "${!targets[@]}"; do
  cat "$work/result.$i"
  if [ "$(cat "$work/rc.$i" 2>/dev/null)" = 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
done

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
