#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Checks the layers of userspace/ (scripts/check_layers.sh, the whole tree), then what a change
# touched in the C++ side (userspace/, tests/): formatting (.clang-format, on
# the changed lines only, with git-clang-format), clang-tidy (.clang-tidy, on the changed lines only)
# and the comment style (`//` everywhere: no `///`). Files nobody touched are left as they are.
#
#   scripts/lint.sh [REF]   REF: what to compare with; default the merge base with main, or the
#                           parent commit when HEAD is main itself (CI on a fresh clone).
# Needs a configured build directory (THPTRACE_BUILD_DIR, default build/) for clang-tidy's
# compile_commands.json. Exit 0 clean, 1 with findings.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${THPTRACE_BUILD_DIR:-$root/build}

ref=${1:-}
if [ -z "$ref" ]; then
  base=$(git merge-base HEAD main 2>/dev/null || true)
  if [ -z "$base" ] || [ "$base" = "$(git rev-parse HEAD)" ]; then
    base=$(git rev-parse HEAD~1 2>/dev/null || git rev-parse HEAD)
  fi
  ref=$base
fi

# 0. The layers, over the whole tree: an include from a layer above is an error wherever it is.
layers_status=0
bash "$root/scripts/check_layers.sh" || layers_status=1

mapfile -t files < <(git diff --name-only --diff-filter=ACMR "$ref" -- \
  'userspace/*.cpp' 'userspace/*.h' 'tests/*.cpp' 'tests/*.h')
if [ ${#files[@]} -eq 0 ]; then
  echo "lint: no C++ file changed since $(git rev-parse --short "$ref")"
  exit $layers_status
fi
echo "lint: ${#files[@]} C++ file(s) changed since $(git rev-parse --short "$ref")"
status=$layers_status

# 1. Formatting of the changed lines.
if ! out=$(git-clang-format-14 --binary clang-format-14 --extensions cpp,h,c --diff "$ref" -- "${files[@]}" 2>&1); then
  :  # git-clang-format exits non-zero when it has a diff to show
fi
if [ -n "$out" ] && ! grep -qE '^(no modified files to format|clang-format did not modify any files)$' <<<"$out"; then
  echo "lint: formatting differs from .clang-format (apply with: git clang-format-14 $ref):"
  echo "$out"
  status=1
fi

# 2. One comment style: `//` (a `///` is a doc-comment of a tool we do not run).
if grep -nE '(^|\s)///' "${files[@]}"; then
  echo "lint: use // for comments, not ///"
  status=1
fi

# 3. clang-tidy on the changed lines of the changed sources.
if [ ! -f "$build/compile_commands.json" ]; then
  echo "lint: $build/compile_commands.json is missing: configure the build first (scripts/build.sh)" >&2
  exit 1
fi
tidy_out=$(mktemp)
git diff -U0 "$ref" -- "${files[@]}" |
  clang-tidy-diff-14.py -p1 -path "$build" -quiet -clang-tidy-binary clang-tidy-14 -iregex '.*\.(cpp|h)' \
    >"$tidy_out" 2>/dev/null || true
if grep -qE '(warning|error):' "$tidy_out"; then
  grep -E -A3 '(warning|error):' "$tidy_out"
  echo "lint: clang-tidy found the above"
  status=1
fi
rm -f "$tidy_out"
[ $status -eq 0 ] && echo "lint: clean"
exit $status
