#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs thptrace's dependencies from Debian 12 packages. This script is the only place dependencies
# are named; .ci/run, the README and the demo call it. Its one list is in four groups, and the
# arguments name the groups to install (default: build, run and test):
#   build  what compiles thptrace itself (the binaries and BPF objects, no tests)
#   run    what the demo runs beside it (a local redis-server and its tools)
#   test   what the test command adds: test libraries, the kernel matrix, containers, Prometheus,
#          Chromium, fuzzing, lint and the benchmarks' peers
#   arm64  cross-building for arm64: the cross compiler and an arm64 sysroot of the build group's
#          libraries under /var/cache/thptrace-arm64; with build for cmake, clang and bpftool (never
#          part of the default)
set -euo pipefail

usage="usage: install-deps.sh [build] [run] [test] [arm64]"
if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps.sh: run as root (it calls apt-get)." >&2
  exit 1
fi

# The libraries thptrace links: the build group's, and the arm64 sysroot's in their arm64 build.
libs=(
  libbpf-dev libelf-dev zlib1g-dev
  libdw-dev  # elfutils: symbolizing the call stacks of sampled copies (userspace/symbolize)
  libhiredis-dev libssl-dev prometheus-cpp-dev libboost-program-options-dev nlohmann-json3-dev libfmt-dev
  libyaml-cpp-dev  # the daemon's --web.config.file (userspace/daemon/web_config.cpp); bcrypt is libcrypt's
)
build=(
  build-essential cmake pkg-config clang llvm bpftool "${libs[@]}"
)
run=(
  redis-server redis-tools procps
)
test=(
  libgtest-dev libgmock-dev
  openssl  # the TLS tests make their CA and certificates
  qemu-system-x86 busybox-static cpio kmod  # kernel matrix (tests/vm/guest.sh)
  # Valkey 8.0.1 and Redis 8.0.2 (tests/servers/fetch.sh: fetched with a private apt configuration into
  # /var/cache/thptrace-servers, not installed): the libraries the extracted valkey binaries link, and
  # flock and dpkg-deb; Redis builds with build-essential
  libjemalloc2 liblzf1 libsystemd0 libssl3 libatomic1 util-linux dpkg
  e2fsprogs mount  # a slow disk for the disk family's Redis tests: an ext4 on a loop device (losetup), throttled
  prometheus python3-yaml systemd  # deploy checks (tests/deploy/check.sh)
  libclang-rt-14-dev  # fuzzing (tests/fuzz): libFuzzer and the sanitizer runtimes for clang
  bpftrace curl  # benchmarks (tests/bench/bpf_cost.sh compares against a bpftrace one-liner)
  # containers (tests/runtime/container_test.cpp, scripts/container-image.sh): podman with runc, not
  # crun (crun refuses this host's hybrid cgroups); netavark and iptables publish ports
  podman runc netavark iptables
  python3-jsonschema  # docs/reference/report.schema.json checked against real reports (tests/schema)
  clang-format-14 clang-tidy-14  # scripts/lint.sh (.clang-format, .clang-tidy) on changed lines
  chromium libpng-dev  # the --svg timeline rendered by a real browser and its pixels read (timeline_test.cpp)
)
# Cross-building for arm64 (cmake/toolchain-aarch64.cmake), asked for by name only: the host's cross
# compiler and qemu-user to run the result, qemu-system-arm for the arm64 guest of tests/vm/guest.sh;
# the arm64 libraries are unpacked into a sysroot below.
arm64=(
  g++-aarch64-linux-gnu qemu-user-static qemu-system-arm
)
# The arm64 sysroot (scripts/arm64-sysroot.sh): the libraries above, the C and C++ runtimes, and the
# test group's libraries, so that the runtime tests cross-build too (run in the arm64 guest).
arm64_sysroot=(libc6-dev libstdc++-12-dev "${libs[@]}" libgtest-dev libgmock-dev libpng-dev)

groups=("$@")
[ ${#groups[@]} -gt 0 ] || groups=(build run test)
packages=()
for g in "${groups[@]}"; do
  case "$g" in
    build) packages+=("${build[@]}") ;;
    run) packages+=("${run[@]}") ;;
    test) packages+=("${test[@]}") ;;
    arm64) packages+=("${arm64[@]}") ;;
    *)
      echo "install-deps.sh: unknown group '$g'; $usage" >&2
      exit 2
      ;;
  esac
done

export DEBIAN_FRONTEND=noninteractive
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Unpacked, not installed: Debian's kubectl (kubernetes-client) for `kubectl kustomize` of
# deploy/kubernetes (tests/deploy/check.sh). Installing it would replace a kubectl the machine may
# already have from another source; unpacked into a cache it is used by the tests alone.
kubectl_cache=/var/cache/thptrace/kubernetes-client
if [[ " ${groups[*]} " == *" test "* ]] && [ ! -x "$kubectl_cache/root/usr/bin/kubectl" ]; then
  mkdir -p "$kubectl_cache"
  rm -f "$kubectl_cache"/*.deb
  (cd "$kubectl_cache" && apt-get download -qq -o APT::Sandbox::User=root kubernetes-client) ||
    { apt-get update -qq && (cd "$kubectl_cache" && apt-get download -qq -o APT::Sandbox::User=root kubernetes-client); }
  rm -rf "$kubectl_cache/root"
  dpkg-deb -x "$kubectl_cache"/kubernetes-client_*.deb "$kubectl_cache/root"
fi

if [[ " ${groups[*]} " == *" arm64 "* ]]; then
  bash "$(dirname "${BASH_SOURCE[0]}")/arm64-sysroot.sh" "${arm64_sysroot[@]}" >/dev/null
fi
