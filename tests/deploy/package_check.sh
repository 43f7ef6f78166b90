#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `cmake --install` installs the binary, the systemd unit and the config; `cpack` builds a .deb that
# carries them, marks the config as a conffile and depends on Debian's library packages. Neither ships
# thptrace-bench, which `cmake --install --component bench` installs beside thptrace and the bench
# component's own package (asked for with CPACK_COMPONENTS_ALL=bench) carries alone. The package
# installs on this host with dpkg (its dependencies are the run group of scripts/install-deps.sh),
# its unit passes `systemd-analyze verify` where it lands, its binary runs, and `dpkg --purge` leaves
# none of its files; where systemd runs the machine, the unit starts and stops. A host that already
# has thptrace installed is not touched: that check fails and says so.
# usage: package_check.sh BUILD_DIR
set -uo pipefail
build=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
check() {
  local name=$1
  shift
  if "$@" >"$tmp/out" 2>&1; then
    echo "PASS $name"
    passed=$((passed + 1))
  else
    echo "FAIL $name"
    sed 's/^/    /' "$tmp/out"
    failed=$((failed + 1))
  fi
}
has_files() {
  local root=$1
  for f in usr/bin/thptrace usr/lib/systemd/system/thptrace.service etc/thptrace/thptrace.conf \
    usr/share/thptrace/thptrace.rules.yml usr/share/thptrace/thptrace.json usr/share/doc/thptrace/copyright \
    usr/share/doc/thptrace/README.md usr/share/doc/thptrace/docs/guide/daemon.md \
    usr/share/doc/thptrace/docs/reference/metrics.md usr/share/doc/thptrace/LICENSES/Apache-2.0.txt; do
    [ -f "$root/$f" ] || { echo "missing $f"; return 1; }
  done
}
no_bench() { [ ! -e "$1/usr/bin/thptrace-bench" ] || { echo "$1/usr/bin/thptrace-bench is there"; return 1; }; }
check "cmake --install" env DESTDIR="$tmp/stage" cmake --install "$build" --prefix /usr
check "installed files" has_files "$tmp/stage"
check "no thptrace-bench installed" no_bench "$tmp/stage"
check "cmake --install --component bench" env DESTDIR="$tmp/bench" cmake --install "$build" --prefix /usr --component bench
check "thptrace-bench installed alone" sh -c "[ -x '$tmp/bench/usr/bin/thptrace-bench' ] && [ ! -e '$tmp/bench/usr/bin/thptrace' ]"
check "cpack -G DEB" cpack -G DEB -B "$tmp/pkg" --config "$build/CPackConfig.cmake"
deb=$(ls "$tmp"/pkg/thptrace_*.deb 2>/dev/null | head -1)
check "package contents" sh -c "dpkg-deb -x '$deb' '$tmp/deb' && true" 
check "packaged files" has_files "$tmp/deb"
check "no thptrace-bench packaged" no_bench "$tmp/deb"
check "config is a conffile" sh -c "dpkg-deb -I '$deb' conffiles | grep -qx /etc/thptrace/thptrace.conf"
check "depends on libbpf and prometheus-cpp" sh -c "dpkg-deb -f '$deb' Depends | grep -q libbpf1 && dpkg-deb -f '$deb' Depends | grep -q libprometheus-cpp-pull"
check "cpack the bench component" cpack -G DEB -B "$tmp/bpkg" --config "$build/CPackConfig.cmake" \
  -D CPACK_DEB_COMPONENT_INSTALL=ON -D CPACK_COMPONENTS_ALL=bench
bdeb=$(ls "$tmp"/bpkg/thptrace-bench_*.deb 2>/dev/null | head -1)
check "bench package: thptrace-bench alone, needs thptrace" sh -c "dpkg-deb -c '$bdeb' | grep -q ' ./usr/bin/thptrace-bench\$' &&
  ! dpkg-deb -c '$bdeb' | grep -q ' ./usr/bin/thptrace\$' && dpkg-deb -f '$bdeb' Depends | grep -q '^thptrace (='"

# The package on this host, as an operator installs it, then gone again.
installed=0
purge() { [ "$installed" -eq 1 ] && dpkg --purge thptrace >/dev/null 2>&1; installed=0; }
trap 'purge; rm -rf "$tmp"' EXIT
not_installed_yet() {
  if dpkg-query -W -f='${Status}' thptrace 2>/dev/null | grep -q 'installed'; then
    echo "thptrace is already installed on this host: the install test does not replace it"
    return 1
  fi
}
install_deb() { dpkg -i "$deb" && installed=1; }
if check "thptrace not installed before the test" not_installed_yet; then
  check "dpkg -i" install_deb
  check "installed unit passes systemd-analyze verify" systemd-analyze verify /usr/lib/systemd/system/thptrace.service
  check "installed binary runs" /usr/bin/thptrace --version
  check "installed config and docs" sh -c "[ -f /etc/thptrace/thptrace.conf ] && [ -f /usr/share/doc/thptrace/copyright ]"
  if [ -d /run/systemd/system ]; then
    check "the unit starts" systemctl start thptrace.service
    check "the unit is active" systemctl is-active thptrace.service
    check "the unit stops" systemctl stop thptrace.service
  else
    echo "NOTE systemd is not PID 1 here: the unit's start and stop are not tried"
  fi
  gone() {
    local left
    left=$(dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\.||' | grep -v '/$' | while read -r f; do
      [ -e "$f" ] && echo "$f"
    done)
    [ -z "$left" ] || { echo "left after purge: $left"; return 1; }
    [ ! -e /etc/thptrace ] || { echo "/etc/thptrace left after purge"; return 1; }
  }
  check "dpkg --purge" sh -c "dpkg --purge thptrace"
  installed=0
  check "nothing of the package left" gone
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
