#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The privileged binary holds only what it needs: thptrace (capture, probe, daemon; CAP_BPF on every
# host) defines no symbol of the load generator or the experiments, and thptrace-bench, which must,
# does (so that a check that finds nothing has looked in the right place).
# usage: binaries_check.sh THPTRACE THPTRACE_BENCH
set -uo pipefail
thptrace=${1:?usage: binaries_check.sh THPTRACE THPTRACE_BENCH}
bench=${2:?usage: binaries_check.sh THPTRACE THPTRACE_BENCH}
pattern='thptrace::(loadgen|bench)::'
failed=0

for bin in "$thptrace" "$bench"; do
  [ -x "$bin" ] || { echo "FAIL no executable at $bin"; exit 1; }
done
# Read whole before grep: a grep -q that stops early would make nm's exit status a SIGPIPE.
privileged=$(nm -C --defined-only "$thptrace") || { echo "FAIL nm could not read $thptrace"; exit 1; }
lab_side=$(nm -C --defined-only "$bench") || { echo "FAIL nm could not read $bench"; exit 1; }

lab=$(grep -E "$pattern" <<<"$privileged")
if [ -n "$lab" ]; then
  echo "FAIL $thptrace links loadgen/bench code ($(wc -l <<<"$lab") symbols), e.g.:"
  head -5 <<<"$lab" | sed 's/^/    /'
  failed=1
else
  echo "PASS $thptrace defines no thptrace::loadgen or thptrace::bench symbol"
fi
for ns in loadgen bench; do
  if grep -q "thptrace::$ns::" <<<"$lab_side"; then
    echo "PASS $bench defines thptrace::$ns symbols"
  else
    echo "FAIL $bench defines no thptrace::$ns symbol"
    failed=1
  fi
done
exit "$failed"
