#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The README's test command: installs the dependencies, builds, and runs every test (unit tests,
# runtime tests that load the real BPF programs and start real redis-server processes, and the
# deployment checks) after the lint of the changed lines. Needs root for the runtime tests; with
# THPTRACE_REQUIRE_BPF=1 a test that cannot load BPF fails instead of skipping. Then the fuzzers run
# over their committed corpora (FUZZ_SECONDS each, here 10) and the unit and runtime tests run
# again under ASan+UBSan.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${THPTRACE_BUILD_DIR:-$root/build}
bash "$root/scripts/install-deps.sh"
bash "$root/scripts/build.sh" -DTHPTRACE_BUILD_TESTS=ON
# Formatting, clang-tidy and comment style of what the last change touched (scripts/lint.sh).
THPTRACE_BUILD_DIR=$build bash "$root/scripts/lint.sh"
(cd "$build" && ctest --output-on-failure --timeout 1800)
# Ten seconds a target: the committed corpora are replayed whole first, which is what catches a
# regression; longer fuzzing belongs to a run of its own (FUZZ_SECONDS).
FUZZ_SECONDS=${FUZZ_SECONDS:-10} bash "$root/tests/fuzz/run.sh"
bash "$root/scripts/sanitize.sh"
