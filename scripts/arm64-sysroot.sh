#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds an arm64 sysroot for cross-building thptrace (cmake/toolchain-aarch64.cmake) from Debian 12's
# own arm64 packages: the packages named as arguments and everything they depend on, resolved by apt
# for arm64 against an empty package database, downloaded with `apt-get download` and unpacked with
# dpkg-deb -x (nothing is installed). scripts/install-deps.sh names the packages and calls this script
# for its arm64 group. With --kernel it fetches Debian's arm64 kernel instead, whose BTF
# bpf/vmlinux/arm64/vmlinux.h is made from (scripts/arm64-vmlinux.sh).
# apt-get runs with a private configuration under the cache (its own sources list, lists, package
# cache, status file): the system's sources, architectures and apt state are never touched.
#
# With --root it unpacks the packages the same way into a second tree, the root filesystem of the arm64
# guest of tests/vm/guest.sh, which cannot be the build host's x86 root.
#
# usage: scripts/arm64-sysroot.sh PACKAGE...          prints the sysroot's path
#        scripts/arm64-sysroot.sh --root PACKAGE...   prints the guest root's path
#        scripts/arm64-sysroot.sh --kernel            prints the path of linux-image-6.1.0-*-arm64-unsigned's .deb
# Environment: THPTRACE_ARM64_CACHE (default /var/cache/thptrace-arm64); the sysroot is its sysroot/,
# the guest root its root/, the kernel in its kernel/. Exit 1 with one sentence on failure.
set -euo pipefail
me=$(basename "$0")
cache=${THPTRACE_ARM64_CACHE:-/var/cache/thptrace-arm64}

fail() { echo "$me: $*" >&2; exit 1; }

kernel=0
tree=sysroot
case ${1:-} in
  --kernel) kernel=1; shift ;;
  --root) tree=root; shift ;;
esac
[ $# -gt 0 ] || [ "$kernel" = 1 ] || fail "name the arm64 packages to unpack (scripts/install-deps.sh arm64 does)."

mkdir -p "$cache"
# Concurrent builds share the cache: one builds, the others wait.
exec 9>"$cache/.lock"
flock 9

apt_dir=$cache/apt
# APT::Architecture makes arm64 the native architecture of this configuration, so dependencies
# resolve to arm64 packages; the empty status file makes apt resolve the whole closure, libc included.
apt_opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=/nonexistent
          -o "Dir::Etc::PreferencesParts=$apt_dir/empty.d" -o "Dir::Etc::Preferences=$apt_dir/empty.d/none"
          -o "Dir::State=$apt_dir/state" -o "Dir::State::Lists=$apt_dir/lists"
          -o "Dir::State::status=$apt_dir/status" -o "Dir::Cache=$apt_dir/cache"
          -o APT::Architecture=arm64 -o APT::Architectures=arm64 -o APT::Install-Recommends=false
          -o Acquire::Languages=none -o APT::Sandbox::User=root -o Debug::NoLocking=1)
apt_ready=0
# Writes the private configuration and reads the suites' lists, once per run. Called in the main
# shell, not in a command substitution, so the second call knows the first happened.
apt_setup() {
  [ "$apt_ready" = 0 ] || return 0
  mkdir -p "$apt_dir/empty.d" "$apt_dir/state" "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
  : >"$apt_dir/status"
  local s
  for s in bookworm bookworm-updates; do
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $s main"
  done >"$apt_dir/sources.list"
  apt-get "${apt_opts[@]}" -qq update >&2 || fail "apt-get update with the private configuration in $apt_dir failed."
  apt_ready=1
}

# The tree is rebuilt when the list of packages asked for changes.
dest=$cache/$tree
mapfile -t wanted < <(printf '%s\n' "$@" | sort -u)
want=$(printf '%s\n' "${wanted[@]}")
if [ "$kernel" = 0 ] && { [ ! -f "$dest/.packages" ] || [ "$(cat "$dest/.packages")" != "$want" ]; }; then
  apt_setup
  # The closure as apt would install it on an empty arm64 system: one `Inst NAME (VERSION ...)` line each.
  closure=$(apt-get "${apt_opts[@]}" -s install "${wanted[@]}" 2>&1) ||
    fail "apt cannot resolve the arm64 packages: $(echo "$closure" | tail -n 3 | tr '\n' ' ')"
  debs=$cache/debs
  mkdir -p "$debs"
  names=() files=()
  while read -r name ver; do
    # Downloaded once; a newer version in the suites is a new file.
    file=$(printf '%s_%s_' "$name" "${ver//:/%3a}")
    compgen -G "$debs/${file}*.deb" >/dev/null || (cd "$debs" && apt-get "${apt_opts[@]}" -qq download "$name=$ver" >&2) ||
      fail "could not download $name=$ver."
    names+=("$name=$ver")
    files+=("$(compgen -G "$debs/${file}*.deb" | head -n 1)")
  done < <(echo "$closure" | awk '$1 == "Inst" {gsub(/[()]/, "", $3); print $2, $3}')
  [ ${#names[@]} -gt 0 ] || fail "apt resolved no arm64 packages from: $want."

  rm -rf "$dest.tmp"
  mkdir -p "$dest.tmp"
  for file in "${files[@]}"; do
    dpkg-deb -x "$file" "$dest.tmp"
  done
  # Absolute symlinks (libfoo.so -> /lib/aarch64-linux-gnu/libfoo.so.1) would point into the build
  # host's own /lib: made relative, they stay inside the tree.
  while IFS= read -r link; do
    target=$(readlink "$link")
    ln -sfn "$(realpath -m --relative-to="$(dirname "$link")" "$dest.tmp$target")" "$link"
  done < <(find "$dest.tmp" -type l -lname '/*')
  printf '%s\n' "${names[@]}" | sort >"$dest.tmp/.closure"
  echo "$want" >"$dest.tmp/.packages"
  rm -rf "$dest"
  mv "$dest.tmp" "$dest"
fi

if [ "$kernel" = 1 ]; then
  kdir=$cache/kernel
  # shellcheck disable=SC2012  # Debian package file names
  if [ -z "$(ls "$kdir"/linux-image-*.deb 2>/dev/null || true)" ]; then
    mkdir -p "$kdir"
    apt_setup
    # Newest ABI of the suites' 6.1 kernels.
    pkg=$(apt-cache "${apt_opts[@]}" search --names-only '^linux-image-6\.1\.0-[0-9]+-arm64-unsigned$' | cut -d' ' -f1 |
          sort -V | tail -n 1)
    [ -n "$pkg" ] || fail "bookworm lists no linux-image-6.1.0-*-arm64-unsigned."
    echo "$me: downloading $pkg into $kdir" >&2
    (cd "$kdir" && apt-get "${apt_opts[@]}" -qq download "$pkg" >&2) || fail "could not download $pkg."
  fi
  # shellcheck disable=SC2012  # Debian package file names
  ls "$kdir"/linux-image-*.deb | sort -V | tail -n 1
else
  echo "$dest"
fi
