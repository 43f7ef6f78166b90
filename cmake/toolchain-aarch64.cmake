# SPDX-License-Identifier: Apache-2.0
# Cross-builds thptrace for arm64 (aarch64) on an x86_64 Debian 12 host:
#   scripts/install-deps.sh build arm64
#   cmake -S . -B build-arm64 -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64.cmake -DTHPTRACE_BUILD_TESTS=OFF
# Debian's cross compiler (g++-aarch64-linux-gnu) compiles and links against the arm64 sysroot that
# scripts/arm64-sysroot.sh unpacks from Debian's arm64 packages; libraries, headers, CMake packages and
# pkg-config files are taken from the sysroot alone. The BPF objects are not cross-compiled: the
# host's clang builds them for the bpf target against bpf/vmlinux/arm64, and the host's bpftool makes
# the skeleton, so programs (clang, bpftool) are the host's.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

# The sysroot's place follows scripts/arm64-sysroot.sh's cache (THPTRACE_ARM64_CACHE).
if(DEFINED ENV{THPTRACE_ARM64_CACHE})
  set(thptrace_arm64_sysroot $ENV{THPTRACE_ARM64_CACHE}/sysroot)
else()
  set(thptrace_arm64_sysroot /var/cache/thptrace-arm64/sysroot)
endif()
if(NOT EXISTS ${thptrace_arm64_sysroot}/usr/lib/aarch64-linux-gnu)
  message(FATAL_ERROR "no arm64 sysroot at ${thptrace_arm64_sysroot}: run scripts/install-deps.sh build arm64")
endif()

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_SYSROOT ${thptrace_arm64_sysroot})
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# pkg-config reads the sysroot's .pc files only and prefixes the paths they give with it.
set(ENV{PKG_CONFIG_SYSROOT_DIR} ${thptrace_arm64_sysroot})
set(ENV{PKG_CONFIG_LIBDIR}
    ${thptrace_arm64_sysroot}/usr/lib/aarch64-linux-gnu/pkgconfig:${thptrace_arm64_sysroot}/usr/share/pkgconfig)
set(ENV{PKG_CONFIG_PATH} "")

# arm64 binaries run on this host under qemu-user, with the sysroot's loader and libraries.
find_program(THPTRACE_QEMU_AARCH64 qemu-aarch64-static)
if(THPTRACE_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${THPTRACE_QEMU_AARCH64} -L ${thptrace_arm64_sysroot})
endif()
