#!/usr/bin/env bash
# Records the inputs of real runs (a capture with uprobes, one with --force-fallback, a daemon) and
# the outputs the code of that moment gives them: the golden files of tests/unit/golden_test.cpp.
# Run as root, from a build directory's thptrace: `bash tests/unit/data/record.sh build/userspace/cli/thptrace`;
# a second argument `daemon` records the daemon's files alone.
# Re-record only on purpose (an output change that is intended), and say why in the commit.
set -euo pipefail
bin=$(realpath "$1")
out=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
port=$(free_port)
redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no --disable-thp no --dir "$work" --enable-debug-command local \
  --daemonize no --logfile "$work/redis.log" &
redis_pid=$!
cleanup() { kill "$redis_pid" 2>/dev/null || true; wait "$redis_pid" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
redis-cli -p "$port" debug populate 300000 key 256 >/dev/null

# Load (for the latency windows) and forks of three reasons while the capture runs. With the AOF on
# (appendfsync always: each write synced), SETs at about 80 a second beside GETs at full speed: at full
# speed, 17,000 fsyncs in 6 s made the recording 6 MB.
workload() {
  local bench sets=
  if [[ ${aof:-} == always ]]; then
    redis-benchmark -p "$port" -t get -n 2000000 -r 300000 -d 256 -c 4 -q >/dev/null 2>&1 &
    bench=$!
    for i in $(seq 600); do echo "SET key:$(((RANDOM * 32768 + RANDOM) % 300000)) v$i"; sleep 0.01; done |
      redis-cli -p "$port" >/dev/null &
    sets=$!
  else
    redis-benchmark -p "$port" -t set -n 2000000 -r 300000 -d 256 -c 4 -q >/dev/null 2>&1 &
    bench=$!
  fi
  sleep 1; redis-cli -p "$port" bgsave >/dev/null
  sleep 1.5; redis-cli -p "$port" bgrewriteaof >/dev/null
  sleep 1.5; redis-cli -p "$port" bgsave >/dev/null
  sleep 1.5; kill "$bench" 2>/dev/null || true; wait "$bench" 2>/dev/null || true
  [[ -z $sets ]] || wait "$sets"
}

capture() {  # NAME EXTRA-FLAGS...
  local name=$1; shift
  workload &
  local w=$!
  THPTRACE_RECORD_INPUTS="$out/$name.inputs.json" "$bin" --pid "$redis_pid" --redis "127.0.0.1:$port" \
    --duration 6 --json "$out/$name.report.json" "$@" >"$out/$name.report.txt"
  wait "$w"
  redis-cli -p "$port" config set appendonly no >/dev/null
}
# The AOF on, each write synced by the event loop (appendfsync always): fsyncs and AOF writes in and
# out of the fork windows, for the disk family. Turning it on forks a rewrite, done before the capture.
aof_always() {
  aof=always
  redis-cli -p "$port" config set appendfsync always >/dev/null
  redis-cli -p "$port" config set appendonly yes >/dev/null
  until redis-cli -p "$port" info persistence | grep -q '^aof_rewrite_in_progress:0'; do sleep 0.1; done
}
if [[ ${2:-all} != daemon ]]; then
  capture capture_uprobe
  aof_always
  capture capture_fallback --force-fallback --disk on
  aof=
fi

mport=$(free_port)
THPTRACE_RECORD_INPUTS="$out/daemon.inputs.jsonl" "$bin" daemon --listen "127.0.0.1:$mport" \
  --redis "127.0.0.1:$port" --force-fallback --disk on &
daemon=$!
sleep 1
workload
sleep 2
kill -INT "$daemon"; wait "$daemon"
mv "$out/daemon.inputs.jsonl.metrics" "$out/daemon.metrics.txt"
echo "recorded into $out"
