#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Configures and builds thptrace into ./build (or $THPTRACE_BUILD_DIR). Arguments go to the configure
# step (e.g. -DTHPTRACE_BUILD_TESTS=OFF); THPTRACE_BUILD_TARGETS names the targets to build (default
# all).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${THPTRACE_BUILD_DIR:-$root/build}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
targets=()
for t in ${THPTRACE_BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build" -j"$(nproc)" "${targets[@]}"
