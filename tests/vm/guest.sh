#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs one command as root inside a qemu guest booted on one of Debian's stock kernels (5.10 from
# Debian 11, 6.1 from Debian 12, 6.12 from bookworm-backports), with this machine's root filesystem
# shared read-only over virtio-9p. It exists because the host kernel cannot load fentry/fexit and has no
# kprobes, so the attach paths production kernels take would otherwise never run in a test (issues 6
# and 12). With --arch arm64 it boots Debian 12's arm64 kernel on an emulated arm64 machine instead,
# whose root is Debian's arm64 packages unpacked by scripts/arm64-sysroot.sh --root, so that the
# cross-built thptrace runs on the architecture it was built for (issue 41). Everything comes from
# Debian packages; see tests/vm/README.md.
set -euo pipefail

usage() {
  cat <<'EOF'
Usage: tests/vm/guest.sh [--arch ARCH] [--kernel SERIES] [--tcg MODE] [--workdir DIR] [--share-rw DIR]... -- COMMAND [ARGS...]
       tests/vm/guest.sh [--arch ARCH] [--kernel SERIES] --prepare
       tests/vm/guest.sh --help

Boots a stock Debian kernel under qemu (TCG) with the host root mounted read-only, runs
COMMAND as root in DIR (default: the current directory) and exits with its exit status.
COMMAND's stdout/stderr are streamed to this script's stdout/stderr; the guest console goes to stderr.
--share-rw DIR   also mount host DIR read-write at the same path in the guest (repeatable);
                 everything else is read-only, except the guest's own tmpfs /tmp, /run and /dev/shm.
--kernel SERIES  5.10 (Debian 11), 6.1 (Debian 12, the default) or 6.12 (bookworm-backports).
--arch ARCH      amd64 (the default: the host's root, read-only) or arm64 (6.1 only: an emulated
                 arm64 machine whose root is Debian's arm64 packages from scripts/arm64-sysroot.sh
                 --root; DIR must then be inside a --share-rw directory).
--tcg MODE       multi (a host thread per vCPU; default on 5.10 and 6.1) or single (both vCPUs
                 taking turns on one host thread; default on 6.12, whose live code patching
                 crashes under qemu 7.2's multi-threaded TCG).
--prepare        only build the cached kernel and initramfs.
Exit status: COMMAND's, 2 on bad usage, 125 if the guest could not be built, booted or timed out.
Environment: THPTRACE_VM_CACHE (default /var/cache/thptrace-vm), THPTRACE_VM_TIMEOUT (seconds, default 900).
The guest command gets a fixed environment (PATH, HOME, THPTRACE_VM=1); pass more with `-- env VAR=VALUE COMMAND`.
EOF
}

me=guest.sh
bad_usage() { echo "$me: $1 (see --help)." >&2; exit 2; }
no_guest() { echo "$me: $1" >&2; exit 125; }

cache_root=${THPTRACE_VM_CACHE:-/var/cache/thptrace-vm}
timeout_s=${THPTRACE_VM_TIMEOUT:-900}
workdir=$PWD
prepare_only=0
series=6.1
arch=amd64
tcg=
shares=()
while [ $# -gt 0 ]; do
  case $1 in
    --help|-h) usage; exit 0 ;;
    --prepare) prepare_only=1; shift ;;
    --kernel) [ $# -ge 2 ] || bad_usage "--kernel needs a series"; series=$2; shift 2 ;;
    --arch) [ $# -ge 2 ] || bad_usage "--arch needs an architecture"; arch=$2; shift 2 ;;
    --tcg) [ $# -ge 2 ] || bad_usage "--tcg needs a mode"; tcg=$2; shift 2 ;;
    --workdir) [ $# -ge 2 ] || bad_usage "--workdir needs a directory"; workdir=$2; shift 2 ;;
    --share-rw) [ $# -ge 2 ] || bad_usage "--share-rw needs a directory"; shares+=("$2"); shift 2 ;;
    --) shift; break ;;
    *) bad_usage "unexpected argument '$1'" ;;
  esac
done
# Each series: the Debian suites that carry it and the package name pattern of its generic flavour
# (the cloud flavour lacks 9p). The unsigned package is the same kernel as the signed one, without the
# shim-signed wrapper package.
case $series in
  5.10) suites="bullseye bullseye-updates"; pkg_re='^linux-image-5\.10\.0-[0-9]+-amd64-unsigned$' ;;
  6.1) suites="bookworm bookworm-updates"; pkg_re='^linux-image-6\.1\.0-[0-9]+-amd64-unsigned$' ;;
  6.12) suites="bookworm-backports"; pkg_re='^linux-image-6\.12\.[0-9]+\+deb12-amd64-unsigned$' ;;
  *) bad_usage "unknown kernel series '$series' (5.10, 6.1 or 6.12)" ;;
esac
case $arch in
  amd64) ;;
  arm64) [ "$series" = 6.1 ] || bad_usage "the arm64 guest runs Debian 12's 6.1 kernel only" ;;
  *) bad_usage "unknown architecture '$arch' (amd64 or arm64)" ;;
esac
# 6.12 under multi-threaded TCG oopsed on "int3" at live text-patching sites (jump labels in
# enqueue_timer at 1.2 s of boot, before any command ran, and __schedule), twice in one CI run: qemu's
# cross-modifying code racing the kernel's int3-based patching. One host thread for both vCPUs cannot
# race, and the 6.12 matrix runs no slower that way (98-101 s; 77-187 s multi-threaded). 5.10 and
# 6.1 keep a thread per vCPU: the Redis prediction test in the 6.1 guest needs the server's main
# thread to keep its pace while the fork's child runs beside it, which one host thread does not give
# (-65% writes/s).
if [ -z "$tcg" ]; then
  case $series in 6.12) tcg=single ;; *) tcg=multi ;; esac
fi
case $tcg in single|multi) ;; *) bad_usage "unknown --tcg mode '$tcg' (single or multi)" ;; esac
if [ $prepare_only = 0 ] && [ $# -eq 0 ]; then bad_usage "no command given after --"; fi
if [ $prepare_only = 1 ] && [ $# -gt 0 ]; then bad_usage "--prepare takes no command"; fi
[[ $timeout_s =~ ^[1-9][0-9]*$ ]] || bad_usage "THPTRACE_VM_TIMEOUT must be a positive number of seconds"
[ "$(id -u)" -eq 0 ] || bad_usage "must run as root (qemu's 9p passthrough needs it to act as the guest's root)"
# The guest sees the host's paths unchanged, so canonical absolute paths are what it can mount and cd to.
# Newlines are rejected because the share list is handed to the guest one path per line.
canon() { [ -d "$1" ] || bad_usage "'$1' is not a directory"; (cd -P -- "$1" && pwd); }
workdir=$(canon "$workdir")
for i in "${!shares[@]}"; do shares[i]=$(canon "${shares[i]}"); done
for p in "$workdir" "${shares[@]}"; do
  [[ $p != *$'\n'* ]] || bad_usage "directory names with newlines are not supported"
done
# The guest mounts its own /tmp, /run, /dev, /proc and /sys over the host's, so a working directory
# there exists in the guest only if it is (inside) a share; better to say so now than after a boot.
# The arm64 guest's root holds none of the host's directories, so there every working directory must be.
hidden=0
case $workdir/ in /tmp/*|/run/*|/dev/*|/proc/*|/sys/*) hidden=1 ;; esac
[ "$arch" = amd64 ] || [ $prepare_only = 1 ] || hidden=1
if [ $hidden = 1 ]; then
  visible=0
  for p in "${shares[@]}"; do [[ $workdir/ == "$p"/* ]] && visible=1; done
  [ $visible = 1 ] || bad_usage "working directory $workdir is hidden in the guest unless it is inside a --share-rw directory"
fi

# PID 1 of the guest. It is part of this script (not a separate file) because the cached initramfs is
# keyed by this script's hash, so it can never go stale after an edit. If it fails, PID 1 dies, the kernel
# panics, panic=-1 + -no-reboot end qemu, and the host reports a boot failure (no status file).
read -r -d '' GUEST_INIT <<'EOF' || true
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t devtmpfs dev /dev
exec </dev/null >/dev/console 2>&1
set -e
while read -r m; do insmod "/lib/modules/$m"; done </lib/modules/order
o=trans=virtio,version=9p2000.L,msize=512000
mkdir -p /ctl /newroot
mount -t 9p -o "$o" ctl /ctl
# cache=loose: the root is read-only here and must only hold still for one command; without a page
# cache every exec re-reads its binary and libraries through 9p.
mount -t 9p -o "$o,ro,cache=loose" hostroot /newroot
r=/newroot
mount -t proc proc $r/proc
mount -t sysfs sys $r/sys
mount -t devtmpfs dev $r/dev
mkdir -p $r/dev/pts $r/dev/shm
mount -t devpts devpts $r/dev/pts
mount -t tmpfs -o mode=1777 shm $r/dev/shm
mount -t tmpfs -o mode=1777 tmp $r/tmp
mount -t tmpfs -o mode=755 run $r/run
# Mounted as systemd does on a real Debian 6.1 machine, so the guest matches production rather than
# the container-like host (where tracefs is missing).
mount -t bpf bpf $r/sys/fs/bpf
mount -t tracefs tracefs $r/sys/kernel/tracing
mount -t debugfs debugfs $r/sys/kernel/debug
ip link set lo up   # tests talk to redis on 127.0.0.1
# Mounted after the tmpfs above so shares under /tmp stay visible; mkdir only where tmpfs hid the path.
# cache=mmap: writes go straight to the host, yet shared writable mmap (linkers, mmap'd files) works.
i=0
while IFS= read -r p; do
  [ -d "$r$p" ] || mkdir -p "$r$p"
  mount -t 9p -o "$o,cache=mmap" "rw$i" "$r$p"
  i=$((i + 1))
done </ctl/shares
echo "guest.sh: guest up after $(cut -d' ' -f1 $r/proc/uptime) s, running the command"
set +e
chroot $r /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  HOME=/root LANG=C.UTF-8 THPTRACE_VM=1 /bin/bash -c "$(cat /ctl/cmd)" </dev/null >>/ctl/stdout 2>>/ctl/stderr
echo $? >/ctl/status.tmp && mv /ctl/status.tmp /ctl/status
sync
poweroff -f
EOF

# Builds the cache under a lock (concurrent CI jobs share it); each step writes to a temp name and
# renames, so an interrupted build is simply redone next time.
prepare() {
  cache=$cache_root/$series
  [ "$arch" = amd64 ] || cache=$cache_root/$arch-$series
  mkdir -p "$cache"
  exec 9>"$cache/.lock"
  flock 9
  local deb
  # shellcheck disable=SC2012  # names are Debian package file names
  deb=$(ls "$cache"/linux-image-*.deb 2>/dev/null | sort -V | tail -n 1 || true)
  if [ "$arch" = arm64 ]; then
    # The arm64 kernel and root come from scripts/arm64-sysroot.sh's cache, which holds them already
    # for the cross-build. The root: busybox for the initramfs, bash and env for the command, Redis,
    # and the runtime half of the build sysroot (its packages less the -dev ones), which is what the
    # cross-built binaries link.
    local sysroot_sh closure runtime
    sysroot_sh=$(dirname "${BASH_SOURCE[0]}")/../../scripts/arm64-sysroot.sh
    closure=${THPTRACE_ARM64_CACHE:-/var/cache/thptrace-arm64}/sysroot/.closure
    [ -f "$closure" ] || { echo "$me: no arm64 sysroot (run scripts/install-deps.sh build arm64)." >&2; return 1; }
    mapfile -t runtime < <(cut -d= -f1 "$closure" | grep -v -e '-dev$' -e '^libc-dev-bin$' -e '^rpcsvc-proto$' -e '^googletest$')
    deb=$(bash "$sysroot_sh" --kernel)
    root=$(bash "$sysroot_sh" --root base-files bash dash coreutils busybox-static redis-server redis-tools "${runtime[@]}")
  elif [ ! -d "$cache/linux" ] && [ -z "$deb" ]; then
    # A private apt configuration that names only this series' suites: its package lists, cache and
    # lock live under $cache/apt, so the system's sources and state are never touched.
    local apt=$cache/apt
    mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial"
    local s
    for s in $suites; do
      echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $s main"
    done >"$apt/sources.list"
    local apt_opts=(-o "Dir::Etc::SourceList=$apt/sources.list" -o Dir::Etc::SourceParts=/nonexistent
                    -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -o APT::Architectures=amd64
                    -o Acquire::Languages=none -o APT::Sandbox::User=root)
    apt-get -qq "${apt_opts[@]}" update
    local pkg
    # Newest ABI wins if the suites list several.
    pkg=$(apt-cache "${apt_opts[@]}" search --names-only "$pkg_re" | cut -d' ' -f1 | sort -V | tail -n 1)
    [ -n "$pkg" ] || { echo "$me: $suites list no package matching $pkg_re." >&2; return 1; }
    echo "$me: downloading $pkg into $cache" >&2
    # Sandbox user root: _apt cannot write into a root-owned cache directory.
    (cd "$cache" && apt-get download -qq "${apt_opts[@]}" "$pkg")
    deb=$(ls "$cache"/"$pkg"_*.deb)
    rm -rf "$apt"
  fi
  if [ ! -d "$cache/linux" ]; then
    rm -rf "$cache/linux.tmp"
    dpkg -x "$deb" "$cache/linux.tmp"
    # The package ships no modules.dep (its postinst makes it), and dependency order must come from it.
    depmod -b "$cache/linux.tmp" "$(ls "$cache/linux.tmp/lib/modules")"
    mv "$cache/linux.tmp" "$cache/linux"
  fi
  kver=$(ls "$cache/linux/lib/modules")
  kernel=$cache/linux/boot/vmlinuz-$kver
  initrd=$cache/initramfs-$kver-$(sha256sum <"${BASH_SOURCE[0]}" | cut -c1-12).cpio.gz
  if [ ! -f "$initrd" ]; then
    local busybox=$root/bin/busybox
    if [ "$arch" = amd64 ]; then
      dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q 'install ok installed' ||
        { echo "$me: busybox-static is not installed (run scripts/install-deps.sh)." >&2; return 1; }
    fi
    local st
    st=$(mktemp -d "$cache/initramfs.XXXXXX")
    mkdir -p "$st/bin" "$st/dev" "$st/proc" "$st/lib/modules"
    cp "$busybox" "$st/bin/busybox"
    printf '%s\n' "$GUEST_INIT" >"$st/init"
    chmod 755 "$st/init"
    # virtio_pci finds the 9p device, 9pnet_virtio carries it, 9p mounts it; modprobe resolves the rest
    # (virtio, virtio_ring, the pci transports, netfs, fscache, 9pnet) in load order, skipping built-ins.
    modprobe -d "$cache/linux" -S "$kver" --show-depends -a virtio_pci 9pnet_virtio 9p |
      awk '$1 == "insmod" && !seen[$2]++ { print $2 }' | while read -r ko; do
        cp "$ko" "$st/lib/modules/"
        basename "$ko" >>"$st/lib/modules/order"
      done
    (cd "$st" && find . | cpio -o -H newc --quiet | gzip -1) >"$st.cpio.gz"
    rm -rf "$st"
    rm -f "$cache"/initramfs-*.cpio.gz
    mv "$st.cpio.gz" "$initrd"
  fi
  exec 9>&-
}

ctl='' vm_pid='' tails=()
root=''   # the guest's root filesystem on the host: the host's own (/) unless prepare() sets it
# shellcheck disable=SC2317  # invoked by trap
cleanup() {
  local rc=$?
  trap - EXIT
  # Never leave qemu behind: TERM reaches timeout(1), which forwards it to qemu.
  if [ -n "$vm_pid" ]; then kill "$vm_pid" 2>/dev/null || true; wait "$vm_pid" 2>/dev/null || true; fi
  for t in "${tails[@]}"; do kill "$t" 2>/dev/null || true; done
  if [ -n "$ctl" ]; then rm -rf "$ctl"; fi
  if [ "$phase" = prepare ] && [ "$rc" -ne 0 ]; then
    echo "$me: could not build the guest kernel and initramfs in $cache (see the messages above)." >&2
    rc=125
  fi
  exit "$rc"
}
phase=prepare
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
prepare
phase=run
if [ $prepare_only = 1 ]; then
  echo "$me: cache ready: kernel $kver, $initrd" >&2
  exit 0
fi

# Per-run control directory, shared read-write with the guest init (not with the command): it carries
# the command, the share list, the command's output and its exit status.
ctl=$(mktemp -d "${TMPDIR:-/tmp}/thptrace-vm.XXXXXX")
# bash -c with %q quoting keeps every argument intact whatever characters it holds.
printf -v q_workdir '%q' "$workdir"
printf -v q_cmd ' %q' "$@"
printf 'cd -- %s || { echo "guest.sh: working directory %s is not visible in the guest." >&2; exit 125; }\nexec%s\n' \
  "$q_workdir" "$q_workdir" "$q_cmd" >"$ctl/cmd"
: >"$ctl/shares"
virtfs=(-virtfs "local,path=${root:-/},mount_tag=hostroot,security_model=passthrough,readonly=on,multidevs=remap"
        -virtfs "local,path=$ctl,mount_tag=ctl,security_model=passthrough")
for i in "${!shares[@]}"; do
  printf '%s\n' "${shares[i]}" >>"$ctl/shares"
  # The guest cannot make a mount point in its read-only root; an arm64 root is ours to add it to.
  if [ -n "$root" ]; then mkdir -p "$root${shares[i]}"; fi
  virtfs+=(-virtfs "local,path=${shares[i]},mount_tag=rw$i,security_model=passthrough,multidevs=remap")
done

# One boot of the guest running the command; its exit status is in $ctl/status unless it crashed.
# Nested KVM hangs at boot on this machine type, hence TCG. mitigations=off: KPTI/retpolines cost a lot
# under TCG and change nothing the tests look at. -nographic is spelled out as -display none and a
# serial chardev on stdio because -nographic also makes SeaBIOS write screen-clearing escapes to the
# serial console. The console goes to stderr so that stdout carries only the command's output, and to
# $ctl/console for the crash check below. softlockup_panic: a CPU stuck in the kernel for a minute
# (watchdog_thresh=30 doubled) panics the guest, which the crash check below retries, where it would
# otherwise hang until the timeout: under multi-threaded TCG the 6.1 guest once hung with both vCPUs
# stuck in the kernel for 9 minutes (a thptrace process on one, redis-server on the other; `quiet`
# hid the stacks, a panic prints the stuck CPU's), where 6.12 oopsed at live code-patching sites.
# arm64: qemu's virt board, booting the kernel image directly (no firmware), its PL011 UART as the
# console. pauth-impdef: qemu's own advice for TCG (docs/system/arm/cpu-features.rst), whose
# emulation of the architected pointer-authentication cipher (QARMA5) is slow; the kernel signs and
# checks return addresses the same way with either.
if [ "$arch" = arm64 ]; then
  machine=(qemu-system-aarch64 -M virt -accel "tcg,thread=$tcg" -cpu "max,pauth-impdef=on")
  console=ttyAMA0
else
  machine=(qemu-system-x86_64 -accel "tcg,thread=$tcg" -cpu max -vga none)
  console=ttyS0
fi
boot() {
  start=$SECONDS
  : >"$ctl/stdout"
  : >"$ctl/stderr"
  : >"$ctl/console"
  rm -f "$ctl/status"
  timeout -k 10 "$timeout_s" "${machine[@]}" -m 2G -smp 2 \
    -display none -monitor none -no-reboot -nic none \
    -chardev "stdio,id=console,signal=off,logfile=$ctl/console" -serial chardev:console \
    -kernel "$kernel" -initrd "$initrd" \
    -append "console=$console quiet panic=-1 mitigations=off softlockup_panic=1 watchdog_thresh=30" \
    "${virtfs[@]}" </dev/null >&2 &
  vm_pid=$!
  # The guest writes straight through 9p into these host files; tail streams them live and, with --pid,
  # drains them and exits once qemu is gone.
  tail -q -s 0.2 --pid=$vm_pid -c +1 -f "$ctl/stdout" &
  tails+=($!)
  tail -q -s 0.2 --pid=$vm_pid -c +1 -f "$ctl/stderr" >&2 &
  tails+=($!)
  vm_rc=0
  wait "$vm_pid" || vm_rc=$?
  vm_pid=
  wait "${tails[@]}" || true
  tails=()
  # 124: timeout(1) sent TERM; 137: qemu ignored it and got KILL.
  if [ $vm_rc -eq 124 ] || { [ $vm_rc -eq 137 ] && [ $((SECONDS - start)) -ge "$timeout_s" ]; }; then
    no_guest "the guest did not finish within $timeout_s s (THPTRACE_VM_TIMEOUT) and was killed."
  fi
}
boot
# A guest kernel that oopses or locks up under TCG (6.12 under multi-threaded TCG oopsed, see --tcg
# above; 6.1 locked up once; 5.10 never has) ends the run with no status. Such a crash gets one more boot, said out loud, so that
# a qemu race does not fail the matrix; a crash the command causes crashes the second boot too.
if [ ! -s "$ctl/status" ] && grep -qE 'Kernel panic|Oops' "$ctl/console"; then
  echo "$me: the guest kernel crashed (console above; qemu exit $vm_rc); running the command once more in a fresh guest." >&2
  boot
fi
if [ ! -s "$ctl/status" ]; then
  no_guest "the guest failed to boot or crashed before the command finished (qemu exit $vm_rc; see the console above)."
fi
rc=$(cat "$ctl/status")
label=$series
[ "$arch" = amd64 ] || label="$arch $series"
echo "$me: $label guest ($tcg-threaded TCG) finished in $((SECONDS - start)) s, command exit status $rc" >&2
exit "$rc"
