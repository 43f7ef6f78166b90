# SPDX-License-Identifier: Apache-2.0
# Shared by the benchmark scripts (sourced, not run): a throw-away redis-server on loopback that
# is always stopped on exit, and the loadgen command line for whichever binary was given.

# bench_loadgen_cmd BINARY: sets LOADGEN=(...) so "${LOADGEN[@]}" --flags runs the load generator.
# thptrace-bench and thptrace (which execs thptrace-bench) need the subcommand; the stand-in driver
# (loadgen_driver) does not.
bench_loadgen_cmd() {
  local bin=$1
  if [ ! -x "$bin" ]; then
    echo "$0: $bin is not an executable; pass build/userspace/cli/thptrace-bench or a loadgen_driver." >&2
    exit 2
  fi
  case "$(basename "$bin")" in
    thptrace | thptrace-bench) LOADGEN=("$bin" loadgen) ;;
    *) LOADGEN=("$bin") ;;
  esac
}

# bench_free_port START: prints the first port from START up that nothing listens on.
bench_free_port() {
  local port=$1
  while (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
    port=$((port + 1))
  done
  echo "$port"
}

# bench_start_redis PORT DIR [extra redis-server args...]: starts redis-server in the foreground
# of a background job (no daemonize, so its pid is ours to stop), waits for PING.
bench_start_redis() {
  local port=$1 dir=$2
  shift 2
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
    --dir "$dir" --logfile "$dir/redis.log" "$@" &
  BENCH_REDIS_PID=$!
  for _ in $(seq 50); do
    if [ "$(redis-cli -p "$port" ping 2>/dev/null)" = PONG ]; then return 0; fi
    if ! kill -0 "$BENCH_REDIS_PID" 2>/dev/null; then break; fi
    sleep 0.1
  done
  echo "$0: redis-server did not start on 127.0.0.1:$port; see $dir/redis.log." >&2
  exit 1
}

# Stops the redis-server this script started (and only it); installed as the EXIT trap.
bench_stop_redis() {
  if [ -n "${BENCH_REDIS_PID:-}" ] && kill -0 "$BENCH_REDIS_PID" 2>/dev/null; then
    kill "$BENCH_REDIS_PID"
    wait "$BENCH_REDIS_PID" 2>/dev/null || true
  fi
  BENCH_REDIS_PID=
}
