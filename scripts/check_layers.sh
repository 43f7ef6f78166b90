#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The layers of userspace/ (docs/development/development.md), as the build links them: a folder may
# include a header of another folder only when its library links that folder's library, directly or
# through another. Static libraries link whatever they include until the final binary, so without
# this check an include from a layer above goes unseen. Exit 0 clean, 1 with the includes that cross.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root/userspace"

# folder -> the thptrace_* libraries its library links (thptrace_<folder>; cli's thptrace_cli_lib),
# and the library's sources. A folder's other sources are its executables' (cli/main.cpp): they may
# include whatever that CMakeLists links to anything.
folders=()
declare -A deps all_deps sources
names() { grep -oE 'thptrace_[a-z_]+' | sed -e 's/^thptrace_//' -e 's/^cli_lib$/cli/' | sort -u | tr '\n' ' '; }
for cm in */CMakeLists.txt; do
  f=${cm%/CMakeLists.txt}
  folders+=("$f")
  lib=thptrace_$f
  [ "$f" = cli ] && lib=thptrace_cli_lib
  text=$(tr '\n' ' ' <"$cm")
  deps[$f]=$(grep -oE "target_link_libraries\(\s*$lib\s[^)]*\)" <<<"$text" | names || true)
  all_deps[$f]=$(grep -oE "target_link_libraries\([^)]*\)" <<<"$text" | names || true)
  sources[$f]=" $(grep -oE "add_library\(\s*$lib\s[^)]*\)" <<<"$text" | grep -oE '[a-z_/]+\.cpp' | tr '\n' ' ' || true) "
done

# Every folder reached from folder $1 through the links of $2 (deps or all_deps) then deps.
reach() {
  local todo=() seen=" $1 " f d
  local -n first=$2
  for d in ${first[$1]:-}; do
    seen+="$d "
    todo+=("$d")
  done
  while [ ${#todo[@]} -gt 0 ]; do
    f=${todo[0]}
    todo=("${todo[@]:1}")
    for d in ${deps[$f]:-}; do
      case "$seen" in *" $d "*) ;; *) seen+="$d " todo+=("$d") ;; esac
    done
  done
  echo "$seen"
}

status=0
for f in "${folders[@]}"; do
  library=$(reach "$f" deps)
  executables=$(reach "$f" all_deps)
  # Includes of the form "folder/...", of the folders this script knows.
  while IFS=: read -r file line inc; do
    allowed=$library
    case "$file" in *.cpp) case "${sources[$f]}" in *" ${file#*/} "*) ;; *) allowed=$executables ;; esac ;; esac
    target=${inc%%/*}
    case " ${folders[*]} " in *" $target "*) ;; *) continue ;; esac
    case "$allowed" in *" $target "*) continue ;; esac
    echo "check_layers: userspace/$file:$line includes \"$inc\": $f does not link $target"
    status=1
  done < <(grep -noE '^#include "[a-z_]+/[^"]+"' "$f"/*.h "$f"/*.cpp 2>/dev/null | sed -E 's/#include "([^"]+)"/\1/')
done
[ $status -eq 0 ] && echo "check_layers: every include stays within what its folder links"
exit $status
