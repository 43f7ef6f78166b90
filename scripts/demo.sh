#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The README's main job: installs and builds thptrace, starts a local redis-server (127.0.0.1 only)
# with a dataset and a write load, captures while a fresh replica does a full sync, prints the
# report, and stops everything it started.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${THPTRACE_BUILD_DIR:-$root/build}
keys=${THPTRACE_DEMO_KEYS:-500000}
port=${THPTRACE_DEMO_PORT:-16379}
replica_port=$((port + 1))

# Only what the demo runs: the build group and redis-server; the thptrace binary, no test suites. A
# build directory already configured with the tests (scripts/test.sh's, a developer's) keeps them:
# configured without, its next build would leave the test binaries stale.
bash "$root/scripts/install-deps.sh" build run
tests=OFF
if grep -qs '^THPTRACE_BUILD_TESTS:BOOL=ON$' "$build/CMakeCache.txt"; then tests=ON; fi
THPTRACE_BUILD_TARGETS=thptrace bash "$root/scripts/build.sh" -DTHPTRACE_BUILD_TESTS=$tests

work=$(mktemp -d /tmp/thptrace-demo.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  redis-cli -p "$replica_port" shutdown nosave >/dev/null 2>&1 || true
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  wait 2>/dev/null || true
  [ -n "${THPTRACE_DEMO_KEEP:-}" ] || rm -rf "$work"
}
trap cleanup EXIT INT TERM

mkdir -p "$work/primary" "$work/replica"
redis-server --bind 127.0.0.1 --port "$port" --dir "$work/primary" --save '' --appendonly no \
  --repl-diskless-sync no --client-output-buffer-limit "replica 2gb 2gb 0" --enable-debug-command local --logfile "$work/primary/redis.log" --daemonize no &
pids+=($!)
until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.1; done
primary_pid=$(redis-cli -p "$port" info server | tr -d '\r' | awk -F: '/^process_id:/{print $2}')

echo "thptrace demo: loading $keys keys of 400 bytes into redis-server pid $primary_pid (port $port)"
redis-cli -p "$port" debug populate "$keys" key 400 >/dev/null

echo "thptrace demo: starting a write load (redis-benchmark, 4 connections)"
redis-benchmark -p "$port" -t set -r "$keys" -d 400 -c 4 -n 1000000000 -q >/dev/null 2>&1 &
pids+=($!)
sleep 2

echo "thptrace demo: capturing; a fresh replica attaches in 2 s and does a full sync"
"$build/userspace/cli/thptrace" --pid "$primary_pid" --redis "127.0.0.1:$port" --json "$work/report.json" \
  --svg "$work/timeline.svg" &
tracer=$!
sleep 2
redis-server --bind 127.0.0.1 --port "$replica_port" --dir "$work/replica" --save '' --appendonly no \
  --replicaof 127.0.0.1 "$port" --logfile "$work/replica/redis.log" --daemonize no &
pids+=($!)
for _ in $(seq 1 600); do
  status=$(redis-cli -p "$replica_port" info replication 2>/dev/null | tr -d '\r' | awk -F: '/^master_link_status:/{print $2}' || true)
  busy=$(redis-cli -p "$port" info persistence | tr -d '\r' | awk -F: '/^rdb_bgsave_in_progress:/{print $2}' || true)
  [ "$status" = up ] && [ "$busy" = 0 ] && break
  sleep 0.1
done
sleep 2
kill -INT "$tracer"
wait "$tracer"
cp "$work/report.json" "$root/thptrace-demo-report.json"
cp "$work/timeline.svg" "$root/thptrace-demo-timeline.svg"
echo "thptrace demo: JSON report saved to $root/thptrace-demo-report.json, timeline to $root/thptrace-demo-timeline.svg"
