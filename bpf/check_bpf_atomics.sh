#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# check_bpf_atomics.sh OBJECT...: fails when a BPF object holds an atomic instruction other than a
# plain add (BPF_XADD). Linux before 5.12 rejects the whole object for one such instruction, even in
# dead code, so only the programs that have a *_compat twin may use them; those objects are not
# passed here (see bpf/CMakeLists.txt). Decoded from the raw bytes: llvm-objdump before 15 prints
# these instructions as <unknown>.
set -euo pipefail
status=0
for obj in "$@"; do
  # An atomic is class STX (0x3) with mode ATOMIC (0xc0): opcode 0xc3 (32-bit) or 0xdb (64-bit); its
  # operation is the 32-bit little-endian immediate in bytes 4-7, 0 for a plain add.
  bad=$(llvm-objdump -d --no-leading-addr "$obj" 2>/dev/null |
    awk 'NF >= 8 && ($1 == "c3" || $1 == "db") && ($5 $6 $7 $8) != "00000000" { n++ } END { print n + 0 }')
  if [ "$bad" != 0 ]; then
    echo "check_bpf_atomics.sh: $obj holds $bad fetching or compare-and-exchange atomics, which kernels before 5.12 refuse to load; use thptrace_cas in a program that has a *_compat twin." >&2
    status=1
  fi
done
exit $status
