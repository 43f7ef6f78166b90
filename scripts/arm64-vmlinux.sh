#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Regenerates bpf/vmlinux/arm64/vmlinux.h from the BTF of Debian 12's own arm64 kernel
# (linux-image-6.1.0-*-arm64-unsigned, fetched by scripts/arm64-sysroot.sh --kernel), so the arm64
# header comes from a kernel anyone can download, as the x86 one does, not from a build host's.
# Debian's arm64 /boot/vmlinuz is the uncompressed Image: no ELF, no section table, but the .BTF
# section's bytes are in it whole. They are found by the BTF header (magic 0xeB9F, version 1, a
# 24-byte header) whose lengths end inside the file, cut out and read by `bpftool btf dump`, which
# takes raw BTF as it takes /sys/kernel/btf/vmlinux.
#
# usage: scripts/arm64-vmlinux.sh   (as root: the cache is /var/cache/thptrace-arm64)
set -euo pipefail
me=$(basename "$0")
root=$(cd "$(dirname "$0")/.." && pwd)

fail() { echo "$me: $*" >&2; exit 1; }

deb=$(bash "$root/scripts/arm64-sysroot.sh" --kernel)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$work" --wildcards './boot/vmlinuz-*'
image=$(ls "$work"/boot/vmlinuz-*)
python3 - "$image" "$work/vmlinux.btf" <<'EOF' || fail "no BTF found in $(basename "$image")."
import struct, sys
data = open(sys.argv[1], 'rb').read()
magic = struct.pack('<HBBI', 0xeB9F, 1, 0, 24)
found = []
at = data.find(magic)
while at >= 0:
    type_off, type_len, str_off, str_len = struct.unpack_from('<4I', data, at + 8)
    end = at + 24 + max(type_off + type_len, str_off + str_len)
    if type_len and str_len and end <= len(data):
        found.append((at, end))
    at = data.find(magic, at + 1)
if len(found) != 1:
    sys.exit(f'{len(found)} BTF headers')
open(sys.argv[2], 'wb').write(data[found[0][0]:found[0][1]])
EOF
out=$root/bpf/vmlinux/arm64/vmlinux.h
mkdir -p "$(dirname "$out")"
bpftool btf dump file "$work/vmlinux.btf" format c >"$out.tmp"
mv "$out.tmp" "$out"
echo "$me: $out from $(basename "$deb")"
