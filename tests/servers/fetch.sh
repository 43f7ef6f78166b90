#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fetches the Redis-family servers the runtime tests run besides Debian's own redis-server, into a
# cache shared by every checkout (built once, reused):
#   valkey-8.0.1/   valkey-server and valkey-cli 8.0.1 from bookworm-backports, extracted from their
#                   .debs with dpkg-deb -x (not installed; they link libjemalloc2, liblzf1 and
#                   libsystemd, which the machine has)
#   redis-8.0.2/    Redis 8.0.2 built from upstream's tarball (redis_8.0.2.orig.tar.gz, trixie's
#                   source package) with plain `make`, i.e. upstream's defaults: -O3 -flto
# apt-get runs with a private configuration under the cache (its own sources list, lists, package
# cache): the system's sources and apt state are never touched.
#
# usage: tests/servers/fetch.sh [--print-dir]
# Environment: THPTRACE_SERVERS_CACHE (default /var/cache/thptrace-servers).
# Prints one line per server: NAME PATH-TO-SERVER PATH-TO-CLI. Exit 1 with one sentence on failure.
set -euo pipefail
me=$(basename "$0")
cache=${THPTRACE_SERVERS_CACHE:-/var/cache/thptrace-servers}
valkey_version=8.0.1
redis_version=8.0.2

fail() { echo "$me: $*" >&2; exit 1; }

mkdir -p "$cache"
# Concurrent test runs share the cache: one builds, the others wait.
exec 9>"$cache/.lock"
flock 9

apt_dir=$cache/apt
apt_opts=(-o "Dir::Etc::sourcelist=$apt_dir/sources.list" -o "Dir::Etc::sourceparts=$apt_dir/empty.d"
          -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
          -o "Dir::Cache::archives=$apt_dir/archives" -o "Dir::Etc::preferencesparts=$apt_dir/empty.d"
          -o "APT::Sandbox::User=root" -o "Debug::NoLocking=1" -o "Acquire::Languages=none")
apt_ready=0
private_apt() {
  if [ "$apt_ready" = 0 ]; then
    mkdir -p "$apt_dir/empty.d" "$apt_dir/lists/partial" "$apt_dir/cache" "$apt_dir/archives/partial"
    cat >"$apt_dir/sources.list" <<SRC
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm-backports main
deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main
SRC
    apt-get "${apt_opts[@]}" -qq update >&2 || fail "apt-get update with the private configuration in $apt_dir failed."
    apt_ready=1
  fi
  "$tool" "${apt_opts[@]}" "$@"
}
# apt-get for update, download and source; apt-cache for look-ups; the same private configuration.
tool=apt-get
private_apt_cache() { local tool=apt-cache; private_apt "$@"; }

valkey_dir=$cache/valkey-$valkey_version
if [ ! -x "$valkey_dir/usr/bin/valkey-server" ]; then
  dl=$(mktemp -d "$cache/valkey.XXXXXX")
  trap 'rm -rf "$dl"' EXIT
  for pkg in valkey-server valkey-tools; do
    ver=$(private_apt_cache madison "$pkg" 2>/dev/null | awk -F'|' '{gsub(/ /,"",$2); print $2}' |
          grep "^$valkey_version" | head -n 1 || true)
    [ -n "$ver" ] || ver=$(private_apt_cache madison "$pkg" 2>/dev/null | awk -F'|' '{gsub(/ /,"",$2); print $2}' |
                           grep "$valkey_version" | head -n 1 || true)
    [ -n "$ver" ] || fail "bookworm-backports has no $pkg $valkey_version."
    (cd "$dl" && private_apt -qq download "$pkg=$ver" >&2) || fail "could not download $pkg=$ver."
  done
  rm -rf "$valkey_dir.tmp"
  for deb in "$dl"/*.deb; do dpkg-deb -x "$deb" "$valkey_dir.tmp"; done
  rm -rf "$dl"
  [ -x "$valkey_dir.tmp/usr/bin/valkey-server" ] || fail "the valkey .debs hold no usr/bin/valkey-server."
  mv "$valkey_dir.tmp" "$valkey_dir"
fi

redis_dir=$cache/redis-$redis_version
if [ ! -x "$redis_dir/src/redis-server" ]; then
  src=$cache/redis-src
  mkdir -p "$src"
  tarball=$src/redis_$redis_version.orig.tar.gz
  if [ ! -f "$tarball" ]; then
    ver=$(private_apt_cache showsrc redis 2>/dev/null | awk '/^Version:/ {print $2}' | grep ":$redis_version-" | head -n 1 || true)
    [ -n "$ver" ] || fail "trixie has no redis $redis_version source package."
    # Only the upstream tarball is used: the Debian parts (.dsc, .debian.tar.xz) of a version the
    # mirror already superseded may be gone while its orig tarball, shared by every revision, is not.
    (cd "$src" && private_apt -qq source --download-only "redis=$ver" >&2) || true
    [ -f "$tarball" ] || fail "apt-get source gave no $(basename "$tarball")."
  fi
  rm -rf "$redis_dir.tmp" && mkdir -p "$redis_dir.tmp"
  tar -xzf "$tarball" -C "$redis_dir.tmp" --strip-components=1
  echo "$me: building Redis $redis_version with upstream's make defaults (a few minutes)" >&2
  # Upstream's defaults: no OPTIMIZATION, CFLAGS or BUILD_* override. The bundled modules are not
  # built by plain make (BUILD_WITH_MODULES is opt-in, and they fetch from the network).
  (cd "$redis_dir.tmp" && make -j"$(nproc)" >"$cache/redis-build.log" 2>&1) ||
    fail "building Redis $redis_version failed (see $cache/redis-build.log)."
  mv "$redis_dir.tmp" "$redis_dir"
fi

echo "valkey-$valkey_version $valkey_dir/usr/bin/valkey-server $valkey_dir/usr/bin/valkey-cli"
echo "redis-$redis_version $redis_dir/src/redis-server $redis_dir/src/redis-cli"
