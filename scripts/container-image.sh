#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the container images thptrace's tests and deployment use, without a registry: a root
# filesystem assembled from Debian packages (apt-get download + dpkg-deb -x: the package that ships
# each binary and the packages of every library it links), imported with `podman import`.
#
#   container-image.sh redis              -> localhost/thptrace-redis:<key>   (redis-server, redis-cli)
#   container-image.sh thptrace BUILD_DIR -> localhost/thptrace:<version>     (the daemon of BUILD_DIR)
#                                            from the Debian package `cpack -G DEB` makes of that build,
#                                            as an operator installs it (binary, config, docs, licenses;
#                                            no thptrace-bench), and the libraries its binary links
#
# Prints the image name on stdout. The .deb files are cached in /var/cache/thptrace-containers and an
# image is rebuilt only when its key (package versions, this script, the binary) changes, so only the
# first run on a machine downloads (about 10 MB for redis, 12 MB for thptrace) and each build takes a
# few seconds. Needs root, podman and runc (scripts/install-deps.sh).
set -euo pipefail

cache=/var/cache/thptrace-containers
podman_cmd=(podman --cgroup-manager cgroupfs --runtime runc)
kind=${1:?usage: container-image.sh redis | thptrace BUILD_DIR}

# The Debian packages that own the shared libraries a binary links (ld.so included).
library_packages() {
  ldd "$1" | awk '/=>/ {print $3} /ld-linux/ {print $1}' | while read -r lib; do
    [ -n "$lib" ] || continue
    dpkg -S "*/$(basename "$lib")" 2>/dev/null | grep -E '^[^ ]+:amd64: (/usr)?/lib(64|/x86_64-linux-gnu)/' | head -1 | cut -d: -f1
  done | sort -u
}

# Downloads (once) and unpacks the named packages into $1: the versions installed here where the
# archive still has them, its current version otherwise.
unpack_packages() {
  local root=$1; shift
  mkdir -p "$cache/debs"
  local p want=() debs=()
  for p in "$@"; do
    ls "$cache/debs/${p}_"*.deb >/dev/null 2>&1 || want+=("$p=$(dpkg-query -W -f='${Version}' "$p")")
  done
  if [ ${#want[@]} -gt 0 ]; then
    (cd "$cache/debs" && apt-get download -qq -o APT::Sandbox::User=root "${want[@]}" >/dev/null 2>&1) ||
      for p in "${want[@]}"; do
        (cd "$cache/debs" && { apt-get download -qq -o APT::Sandbox::User=root "$p" >/dev/null 2>&1 ||
                               apt-get download -qq -o APT::Sandbox::User=root "${p%%=*}" >/dev/null; })
      done
  fi
  for p in "$@"; do
    dpkg-deb -x "$(ls -t "$cache/debs/${p}_"*.deb | head -1)" "$root"
  done
}

# A root filesystem with the merged-/usr links, /tmp, and root in /etc/passwd.
base_root() {
  local root=$1
  mkdir -p "$root"/{usr/bin,usr/sbin,usr/lib64,usr/lib/x86_64-linux-gnu,etc,tmp,data,proc,sys,dev,run}
  ln -sfn usr/bin "$root/bin"; ln -sfn usr/sbin "$root/sbin"; ln -sfn usr/lib "$root/lib"; ln -sfn usr/lib64 "$root/lib64"
  chmod 1777 "$root/tmp"
  printf 'root:x:0:0:root:/root:/bin/sh\n' >"$root/etc/passwd"
  printf 'root:x:0:\n' >"$root/etc/group"
}

# Imports $root as image $name unless it exists; $@ are --change options.
import_image() {
  local root=$1 name=$2; shift 2
  if ! "${podman_cmd[@]}" image exists "$name"; then
    tar -C "$root" --numeric-owner -c . | "${podman_cmd[@]}" import -q "$@" - "$name" >/dev/null
  fi
  echo "$name"
}

case $kind in
  redis)
    pkgs=(redis-server redis-tools $(library_packages /usr/bin/redis-check-rdb))
    key=$( (cat "$0"; for p in "${pkgs[@]}"; do dpkg-query -W -f='${Package}=${Version}\n' "$p"; done) | sha256sum | cut -c1-12)
    name=localhost/thptrace-redis:$key
    if "${podman_cmd[@]}" image exists "$name"; then echo "$name"; exit 0; fi
    root=$(mktemp -d); trap 'rm -rf "$root"' EXIT
    base_root "$root"
    unpack_packages "$root" "${pkgs[@]}"
    # The stock config daemonizes, logs to a file and binds loopback: the tests pass every setting.
    rm -f "$root/etc/redis/redis.conf"
    import_image "$root" "$name" --change 'WORKDIR /data' --change 'CMD ["redis-server", "--save", "", "--bind", "0.0.0.0", "--protected-mode", "no"]'
    ;;
  thptrace)
    build=${2:?usage: container-image.sh thptrace BUILD_DIR}
    [ -f "$build/CPackConfig.cmake" ] || { echo "container-image.sh: $build is not a configured build directory" >&2; exit 2; }
    work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
    root=$work/root
    if ! cpack -G DEB -B "$work/pkg" --config "$build/CPackConfig.cmake" >"$work/cpack.log" 2>&1; then
      echo "container-image.sh: cpack could not package $build:" >&2
      cat "$work/cpack.log" >&2
      exit 1
    fi
    deb=$(ls "$work"/pkg/thptrace_*.deb)
    version=$(dpkg-deb -f "$deb" Version)
    name=localhost/thptrace:$version
    base_root "$root"
    dpkg-deb -x "$deb" "$root"
    unpack_packages "$root" $(library_packages "$root/usr/bin/thptrace")
    # The binary changes with every build: the image is replaced, not kept.
    "${podman_cmd[@]}" rmi -f "$name" >/dev/null 2>&1 || true
    import_image "$root" "$name" --change 'ENTRYPOINT ["thptrace"]' --change 'CMD ["daemon", "--discover", "--listen", "0.0.0.0:9966"]' \
      --change 'EXPOSE 9966/tcp' --change "LABEL org.opencontainers.image.version=$version"
    ;;
  *)
    echo "container-image.sh: unknown image '$kind' (redis or thptrace)." >&2
    exit 2
    ;;
esac
