#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs every build, test and run-time dependency of thptrace from Debian 12 packages.
# This script is the only place dependencies are named; .ci/run and the README call it.
set -euo pipefail

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps.sh: run as root (it calls apt-get)." >&2
  exit 1
fi

packages=(
  # build
  build-essential cmake pkg-config clang llvm bpftool libbpf-dev libelf-dev zlib1g-dev
  libdw-dev  # elfutils: symbolizing the call stacks of sampled copies (userspace/symbolize)
  # libraries
  libhiredis-dev libssl-dev prometheus-cpp-dev libboost-program-options-dev nlohmann-json3-dev libfmt-dev
  libgtest-dev libgmock-dev
  libyaml-cpp-dev  # the daemon's --web.config.file (userspace/daemon/web_config.cpp); bcrypt is libcrypt's
  # runtime peers used by the demo and the tests
  redis-server redis-tools procps openssl  # openssl: the TLS tests make their CA and certificates
  qemu-system-x86 busybox-static cpio kmod  # kernel matrix (tests/vm/guest.sh)
  # Valkey 8.0.1 and Redis 8.0.2 (tests/servers/fetch.sh: fetched with a private apt configuration into
  # /var/cache/thptrace-servers, not installed): the libraries the extracted valkey binaries link, and
  # flock and dpkg-deb; Redis builds with build-essential
  libjemalloc2 liblzf1 libsystemd0 libssl3 libatomic1 util-linux dpkg
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

export DEBIAN_FRONTEND=noninteractive
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

