#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The quick loop for the people who work on thptrace: the build (incremental), the lint of the changed
# lines, the unit tests and deploy checks, and a smoke run of the runtime tests (real BPF, real Redis:
# a known-answer COW count in both attach modes, the CLI's errors and signal, one Redis capture with
# its four fork reasons, the daemon scraped through a BGSAVE and a restart, the soft-dirty rehearsal,
# a hostile server). Under 10 minutes on 2 cores once a build exists (the first build takes about 8);
# installs nothing: the full command, scripts/test.sh, does. Root, for the runtime tests.
#
# Environment: THPTRACE_BUILD_DIR (default <repo>/build), THPTRACE_QUICK_FILTER (the runtime tests'
# gtest filter; default the smoke set below).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${THPTRACE_BUILD_DIR:-$root/build}
filter=${THPTRACE_QUICK_FILTER:-"Cow.KnownPages4K*:Cli.*:Redis.FourForksWithTheirReasons:Daemon.CountsForksFollowsRestartsAndExitsClean:Predict.RehearsalCountsThePagesAKnownWriterWrote:HostileRedis.CaptureSaysWhyRedisFiguresAreMissing"}

if [ "$(id -u)" -ne 0 ]; then
  echo "quick.sh: run as root (the runtime tests load BPF programs)." >&2
  exit 1
fi
start=$(date +%s)
bash "$root/scripts/build.sh" -DTHPTRACE_BUILD_TESTS=ON
THPTRACE_BUILD_DIR=$build bash "$root/scripts/lint.sh"
(cd "$build" && ctest --output-on-failure -L 'unit|deploy' -E package_check -j2)
THPTRACE_REQUIRE_BPF=${THPTRACE_REQUIRE_BPF:-1} "$build/tests/runtime/runtime_tests" --gtest_color=no \
  --gtest_brief=1 --gtest_filter="$filter"
echo "quick.sh: passed in $(($(date +%s) - start)) s"
