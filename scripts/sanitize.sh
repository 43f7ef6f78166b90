#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The sanitizer run: builds thptrace, the unit tests and the runtime tests with
# AddressSanitizer and UndefinedBehaviorSanitizer (THPTRACE_SANITIZE=ON, its own build directory),
# then runs the unit tests and, as root with BPF required, the runtime tests of the capture and daemon
# paths (the filter below), which spawn the sanitized thptrace binary of that build. Any ASan,
# LeakSanitizer or UBSan report fails the run: in a test binary it aborts the test, in a spawned
# thptrace it changes the exit code the test checks. Exits non-zero on any failure. Called by
# scripts/test.sh after the dependencies are installed.
#
#   scripts/sanitize.sh [build|test]   only build, or only run the tests of a build made before;
#                                      default both
# Environment: THPTRACE_SANITIZE_BUILD_DIR (default <repo>/build-asan), JOBS (default 2),
# THPTRACE_SANITIZE_FILTER (a gtest filter of the runtime tests; default the one below).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${THPTRACE_SANITIZE_BUILD_DIR:-$root/build-asan}
jobs=${JOBS:-2}
mode=${1:-all}
case $mode in
  build | test | all) ;;
  *)
    echo "sanitize.sh: unknown mode '$mode' (build, test, or none for both)." >&2
    exit 2
    ;;
esac
# The runtime tests under the sanitizers: every path through the capture and the daemon, where
# outside bytes are parsed and written (hostile Redis replies and names, TLS, unix sockets, the HTTP
# endpoint, the SVG and JSON writers, the DWARF unwinder, the soft-dirty walk, cgroups, signals,
# dropped events, restarts, targets coming and going). Left to the optimised build alone: tests of
# the same paths on other servers or at other scales (Valkey and Redis 8 builds, three-replica
# scale-outs, forecasts made again and again, containers, the bench binary's scenarios, the same
# counts in the forced fallback's BPF programs), which repeat the userspace code above.
filter=${THPTRACE_SANITIZE_FILTER:-"-Bench.*:Containers.*:ScaleOut.*:*RedisBuild.*:*PredictPattern.*:Predict.NextFullSync*:*ForcedFallback:Attribution.RedisKeysExpiringDuringBgsave:Attribution.DebianRedisStacksArePartial*:Daemon.IdleSeriesStayFresh:*DaemonSlowIdle.*:Cow.KnownPagesKernelWrites*:Cow.KnownPagesTwoWriterThreads*"}

if [ "$(id -u)" -ne 0 ]; then
  echo "sanitize.sh: run as root (the runtime tests load BPF programs)." >&2
  exit 1
fi

start=$(date +%s)
if [ "$mode" != test ]; then
  # -O1, as ASan's documentation suggests, and -g1: reports keep function names and line numbers (-g1
  # has the line tables), and the build takes less than half the time of -O2 -g. Clang, whose
  # sanitizers these are (and the fuzzers'), built it in 7.5 minutes at two jobs against 10.3 with g++.
  flags="-O1 -g1 -DNDEBUG"
  CC=clang CXX=clang++ cmake -S "$root" -B "$build" -DTHPTRACE_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$flags" -DCMAKE_C_FLAGS_RELWITHDEBINFO="$flags" >/dev/null
  cmake --build "$build" -j"$jobs" --target unit_tests runtime_tests thptrace dirty_after_fork fork_burst fault_burst thread_exit
fi
built=$(date +%s)
if [ "$mode" = build ]; then
  echo "sanitize.sh: built in $((built - start)) s"
  exit 0
fi

# LeakSanitizer works under these tests (not under ptrace: do not run them in gdb or strace).
export ASAN_OPTIONS=detect_leaks=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export THPTRACE_REQUIRE_BPF=1

status=0
echo "== unit_tests (ASan+UBSan)"
"$build/tests/unit_tests" --gtest_color=no --gtest_brief=1 || status=1
echo "== runtime_tests (ASan+UBSan, BPF required)"
"$build/tests/runtime/runtime_tests" --gtest_color=no --gtest_brief=1 --gtest_filter="$filter" || status=1

end=$(date +%s)
echo "sanitize.sh: build $((built - start)) s, tests $((end - built)) s: $([ "$status" -eq 0 ] && echo passed || echo FAILED)"
exit "$status"
