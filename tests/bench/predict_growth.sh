#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Benchmark (not a test): forecasts of a dataset that grows between saves (issue 40, item 3). A
# redis-server of KEYS keys under a SET load whose keys are almost all new (redis-benchmark over a
# range of RANGE keys, so each save has more to write and lives longer than the last), and ROUNDS
# rounds of: `thptrace predict` (history: the last save, Redis's own figures), then the BGSAVE it
# predicted. Each prediction is held to the save that followed it (rdb_last_cow_size; the child's
# life from the RDB file's birth to its rename where the filesystem keeps birth times, else
# INFO's whole seconds) twice, from the same run: as predict states it (scaled by the growth it read,
# predicted.growth) and as the last save's figures alone (the value divided by that factor, the
# ±25% range of the history before growth was read). Prints per round, then per figure and
# variant the rounds whose truth lay in the stated range and the median error.
#
# usage (root): tests/bench/predict_growth.sh [BUILD_DIR]
# Tunables: ROUNDS=6 KEYS=200000 RANGE=20000000 CLIENTS=4 THPTRACE_BIN
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build}
bin=${THPTRACE_BIN:-$build/userspace/cli/thptrace}
rounds=${ROUNDS:-6}
keys=${KEYS:-200000}
range=${RANGE:-20000000}
clients=${CLIENTS:-4}
. "$here/redis_lib.sh"

die() { echo "$0: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "run as root (predict reads the server's /proc files and its RDB file)."
[ -x "$bin" ] || die "$bin is not an executable; build first or set THPTRACE_BIN."
command -v redis-benchmark >/dev/null || die "redis-benchmark is missing (scripts/install-deps.sh installs it)."

work=$(mktemp -d /tmp/thptrace-predict-growth.XXXXXX)
load=
cleanup() {
  [ -z "$load" ] || kill "$load" 2>/dev/null || true
  bench_stop_redis
  rm -rf "$work"
}
trap cleanup EXIT
port=$(bench_free_port 7400)
bench_start_redis "$port" "$work" --enable-debug-command local
cli() { redis-cli -p "$port" "$@"; }
info() { cli info persistence | tr -d '\r' | sed -n "s/^$1://p"; }
save() {
  cli bgsave >/dev/null
  while [ "$(info rdb_bgsave_in_progress)" != 0 ]; do sleep 0.05; done
  [ "$(info rdb_last_bgsave_status)" = ok ] || die "a BGSAVE failed; see $work/redis.log."
}
# The last save's life: the RDB file's birth to its change (the rename), else INFO's whole seconds.
life() {
  local birth change
  read -r birth change < <(stat -c '%.9W %.9Z' "$work/dump.rdb")
  if [ "${birth%.*}" -gt 0 ]; then
    python3 -c 'import sys; print(float(sys.argv[2]) - float(sys.argv[1]))' "$birth" "$change"
  else
    info rdb_last_bgsave_time_sec
  fi
}

cli debug populate "$keys" key 256 >/dev/null
redis-benchmark -p "$port" -t set -r "$range" -d 256 -c "$clients" -n 2000000000 -q >/dev/null 2>&1 &
load=$!
sleep 2
save
echo "round | figure | predicted value [low, high] | last save's alone value [low, high] | truth"
results=$work/results
for i in $(seq "$rounds"); do
  sleep 2
  "$bin" predict --pid "$BENCH_REDIS_PID" --redis "127.0.0.1:$port" --seconds 1 --no-rehearsal \
    --json "$work/p$i.json" >/dev/null 2>"$work/p$i.err" || die "predict failed: $(cat "$work/p$i.err")"
  save
  python3 - "$work/p$i.json" "$i" "$(info rdb_last_cow_size)" "$(life)" >>"$results" <<'EOF'
import json, sys
p = json.load(open(sys.argv[1]))["predicted"]
g = p["growth"]["factor"] if p["growth"] else 1.0
for figure, truth in (("copied_bytes", float(sys.argv[3])), ("child_lifetime_s", float(sys.argv[4]))):
    f = p[figure]
    if not f or f["method"] != "history":
        continue
    base = f["value"] / g
    # The history's range before the growth was read: ±25% (the RDB file's life, the copies), or
    # the whole seconds' ±1 (a life from INFO).
    lo, hi = (base * 0.75, base * 1.25) if "±1" not in f["basis"] and "whole seconds" not in f["basis"] else (base - 1, base + 1)
    print(json.dumps({"round": int(sys.argv[2]), "figure": figure, "growth": g, "value": f["value"], "low": f["low"],
                      "high": f["high"], "base": base, "base_low": lo, "base_high": hi, "truth": truth}))
EOF
  tail -n 2 "$results" | python3 -c '
import json, sys
for line in sys.stdin:
    r = json.loads(line)
    print("{round} | {figure} | {value:.3g} [{low:.3g}, {high:.3g}] (x{growth:.2f}) | {base:.3g} [{base_low:.3g}, {base_high:.3g}] | {truth:.3g}".format(**r))'
done
python3 - "$results" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for figure in ("copied_bytes", "child_lifetime_s"):
    rs = [r for r in rows if r["figure"] == figure and r["truth"] > 0]
    if not rs:
        continue
    for name, v, lo, hi in (("as predicted (growth read)", "value", "low", "high"), ("the last save's alone", "base", "base_low", "base_high")):
        inside = sum(1 for r in rs if r[lo] <= r["truth"] <= r[hi])
        err = statistics.median(abs(r[v] - r["truth"]) / r["truth"] for r in rs)
        print(f"{figure}, {name}: truth in range {inside}/{len(rs)}, median error {err * 100:.1f}%")
EOF
