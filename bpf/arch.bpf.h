/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* What differs between the architectures thptrace's programs are built for (-D__TARGET_ARCH_x86 or
 * -D__TARGET_ARCH_arm64, with bpf/vmlinux/<arch>): the system calls' numbers and where struct
 * pt_regs keeps a call's number; the names of the kernel's system-call wrappers (fentry targets)
 * come from thptrace.h, which the loader shares. A call's arguments are read with libbpf's
 * PT_REGS_PARM*_SYSCALL. */
#ifndef THPTRACE_ARCH_BPF_H
#define THPTRACE_ARCH_BPF_H

#if defined(__TARGET_ARCH_x86)
/* arch/x86/entry/syscalls/syscall_64.tbl */
#define NR_write 1
#define NR_clone 56
#define NR_fork 57
#define NR_vfork 58
#define NR_fsync 74
#define NR_fdatasync 75
#define NR_sync_file_range 277
#define NR_clone3 435
/* The call's number, kept by the entry code (regs->ax becomes the return value). */
#define PT_REGS_SYSCALL_NR(regs) ((regs)->orig_ax)
#define PT_REGS_SYSCALL_NR_CORE(regs) BPF_CORE_READ(regs, orig_ax)
#elif defined(__TARGET_ARCH_arm64)
/* include/uapi/asm-generic/unistd.h. arm64 has no fork or vfork system call (libc forks with
 * clone): -1 is no call's number. */
#define NR_write 64
#define NR_fsync 82
#define NR_fdatasync 83
#define NR_sync_file_range 84
#define NR_clone 220
#define NR_fork -1
#define NR_vfork -1
#define NR_clone3 435
#define PT_REGS_SYSCALL_NR(regs) ((regs)->syscallno)
#define PT_REGS_SYSCALL_NR_CORE(regs) BPF_CORE_READ(regs, syscallno)
#else
#error "thptrace's BPF programs are built for __TARGET_ARCH_x86 or __TARGET_ARCH_arm64"
#endif

/* A system call's wrapper, as a section name's part: SEC("fentry/" SYSCALL_WRAPPER(fsync)). */
#define SYSCALL_WRAPPER(name) THPTRACE_SYSCALL_WRAPPER_PREFIX #name

#endif /* THPTRACE_ARCH_BPF_H */
