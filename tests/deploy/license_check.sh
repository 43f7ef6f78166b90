#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Every source file of the project names its license (SPDX-License-Identifier in its first three
# lines): Apache-2.0, and the BPF programs "(LGPL-2.1 OR BSD-2-Clause)", GPL-compatible as the
# helpers they call require ("Dual BSD/GPL" in their license section). The license texts are in
# LICENSE and LICENSES/. bpf/vmlinux/ is generated from the kernel's BTF and is not ours.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
bad=0
checked=0
while IFS= read -r f; do
  case "$f" in bpf/vmlinux/* | tests/fuzz/corpus/* | tests/unit/data/*) continue ;; esac
  want='Apache-2.0'
  case "$f" in bpf/*.c | bpf/*.h | tests/bench/empty_progs.c) want='(LGPL-2.1 OR BSD-2-Clause)' ;; esac
  checked=$((checked + 1))
  if ! head -n 3 "$f" | grep -qF "SPDX-License-Identifier: $want"; then
    echo "license_check: $f does not say 'SPDX-License-Identifier: $want' in its first three lines" >&2
    bad=$((bad + 1))
  fi
done < <(git ls-files | grep -E '\.(cpp|h|c|sh|py)$|(^|/)CMakeLists\.txt$|\.cmake$|\.h\.in$')
for f in LICENSE LICENSES/Apache-2.0.txt LICENSES/LGPL-2.1.txt LICENSES/BSD-2-Clause.txt; do
  [ -s "$f" ] || { echo "license_check: $f is missing" >&2; bad=$((bad + 1)); }
done
# The BPF objects' license section must stay the GPL-compatible one the kernel checks.
# (A *_compat.bpf.c build includes its twin and, with it, the section.)
for f in bpf/*.bpf.c; do
  case "$f" in *_compat.bpf.c) continue ;; esac
  grep -q 'char LICENSE\[\] SEC("license") = "Dual BSD/GPL";' "$f" ||
    { echo "license_check: $f has no 'Dual BSD/GPL' license section" >&2; bad=$((bad + 1)); }
done
echo "license_check: $checked files, $bad problems"
[ "$bad" -eq 0 ]
