#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Configures and builds thptrace into ./build (or $THPTRACE_BUILD_DIR).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${THPTRACE_BUILD_DIR:-$root/build}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
cmake --build "$build" -j"$(nproc)"
