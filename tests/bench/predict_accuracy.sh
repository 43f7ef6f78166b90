#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Benchmark (not a test): how far the forecasts land from the forks they predict, and how often the
# truth falls inside the range the tool states. The runtime tests hold each prediction to its known
# answers (the server's own figures of its last save, the rehearsal's curve) and print it beside the
# fork it predicted, made and captured on the same load ("predict-outcome" lines); this runs them for
# ROUNDS rounds each and gathers, per test and figure: the rounds, the share whose truth lay inside
# [low, high] (the stated coverage; the goal in docs/guide/predict.md is 80%), and the median and
# worst errors of the value. Those are properties of the host's load as much as of the code, so they
# are measured here, on this machine type, not asserted by a test (docs/development/measurements.md).
#
# Usage (root): tests/bench/predict_accuracy.sh [BUILD_DIR]    BUILD_DIR defaults to <repo>/build.
# Tunables (environment): ROUNDS=10, TESTS (a gtest filter; default the host's prediction tests:
#   PredictPattern.* by history, the full sync of three replicas, the daemon's forecast),
#   GUEST=6.1 to run the rehearsal's predictions (by soft-dirty) in that kernel-matrix guest instead,
#   BUSY=1 to run one CPU-bound loop beside them (a Redis host is rarely idle).
# Takes about a minute a round per test on the host (2 vCPUs), several in a guest.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build}
rounds=${ROUNDS:-10}
tests=${TESTS:-"Predict/PredictPattern.*:Predict.NextFullSyncOfThreeReplicas:Daemon.ForecastsTheNextForkFromTheLastAndItsHeadroom"}
bin=$build/tests/runtime/runtime_tests

die() {
  echo "predict_accuracy.sh: $*" >&2
  exit 1
}
[ "$(id -u)" -eq 0 ] || die "run as root (the tests load BPF programs)."
[ -x "$bin" ] || die "no runtime tests at $bin (build first: scripts/build.sh)."
[[ $rounds =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive number."

log=$(mktemp /tmp/thptrace-predict-accuracy.XXXXXX)
busy=
cleanup() {
  [ -z "$busy" ] || kill "$busy" 2>/dev/null || true
}
trap cleanup EXIT
if [ "${BUSY:-0}" = 1 ]; then
  sh -c 'while :; do :; done' &
  busy=$!
fi

echo "predict_accuracy: $rounds rounds of $tests${GUEST:+ in the $GUEST guest}${busy:+, beside a busy loop}; log $log"
status=0
if [ -n "${GUEST:-}" ]; then
  tests=${TESTS:-"Predict/PredictPattern.*"}
  "$root/tests/vm/guest.sh" --kernel "$GUEST" --share-rw "$build" -- \
    env THPTRACE_REQUIRE_BPF=1 THPTRACE_PREDICT_ROUNDS="$rounds" "$bin" --gtest_color=no --gtest_filter="$tests" \
    >"$log" 2>&1 || status=$?
else
  THPTRACE_REQUIRE_BPF=1 THPTRACE_PREDICT_ROUNDS="$rounds" "$bin" --gtest_color=no --gtest_filter="$tests" \
    >"$log" 2>&1 || status=$?
fi
[ "$status" -eq 0 ] || echo "predict_accuracy: the tests exited $status (their known answers failed; see $log)"

# "predict-outcome WHAT | FIGURE | METHOD | value V low L high H truth T"
grep '^predict-outcome ' "$log" | python3 -c '
import collections, statistics, sys
rows = collections.defaultdict(list)
for line in sys.stdin:
    what, figure, method, numbers = [x.strip() for x in line[len("predict-outcome "):].split("|")]
    f = numbers.split()
    v, lo, hi, t = (float(f[i]) for i in (1, 3, 5, 7))
    rows[(what, figure, method)].append((v, lo, hi, t))
print("%-34s %-17s %-10s %6s %7s %10s %10s" % ("test", "figure", "method", "rounds", "inside", "median err", "worst err"))
for (what, figure, method), xs in sorted(rows.items()):
    inside = sum(lo <= t <= hi for v, lo, hi, t in xs)
    errs = [(v - t) / t * 100 for v, lo, hi, t in xs if t > 0]
    med = statistics.median(errs) if errs else float("nan")
    worst = max(errs, key=abs) if errs else float("nan")
    print(f"{what:34} {figure:17} {method:10} {len(xs):6} {inside / len(xs) * 100:6.0f}% {med:+9.1f}% {worst:+9.1f}%")
'
exit "$status"
