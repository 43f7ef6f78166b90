// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Disk family: each fsync, fdatasync and sync_file_range a watched process's threads make, timed
 * from the system call's entry to its return, with the thread that made it (the main thread, Redis's
 * bio AOF thread, another), and each write() of its main thread to a regular file (the event loop
 * blocked in its AOF write). fentry on those four system calls where the kernel allows it (bottom of
 * the file), else the syscall tracepoints, which run for every system call of the machine: the call
 * number is compared first and almost every call leaves there; one of the four then leaves after an
 * array read (its hot line) unless its process is watched. */
#include "common.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

static __always_inline __u32 disk_call(long id)
{
	switch (id) {
	case NR_fsync:
		return DISK_FSYNC;
	case NR_fdatasync:
		return DISK_FDATASYNC;
	case NR_sync_file_range:
		return DISK_SYNC_FILE_RANGE;
	case NR_write:
		return DISK_WRITE;
	}
	return 0;
}

/* Redis names its AOF fsync thread "bio_aof_fsync" (7.0) or "bio_aof" (7.2, Valkey). */
static __always_inline __u32 thread_kind(__u32 tgid, __u32 tid)
{
	char comm[16];

	if (tid == tgid)
		return THREAD_MAIN;
	if (bpf_get_current_comm(comm, sizeof(comm)))
		return THREAD_OTHER;
	if (comm[0] == 'b' && comm[1] == 'i' && comm[2] == 'o' && comm[3] == '_' && comm[4] == 'a' &&
	    comm[5] == 'o' && comm[6] == 'f')
		return THREAD_BIO_AOF;
	return THREAD_OTHER;
}

#define THPTRACE_S_IFMT 0170000
#define THPTRACE_S_IFREG 0100000

/* Whether the current task's descriptor fd is open on a regular file (not a socket or a pipe). */
static __always_inline bool fd_is_regular(long fd)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct fdtable *fdt = BPF_CORE_READ(task, files, fdt);
	struct file **fds, *file = NULL;

	if (!fdt || fd < 0 || fd >= BPF_CORE_READ(fdt, max_fds))
		return false;
	fds = BPF_CORE_READ(fdt, fd);
	if (bpf_probe_read_kernel(&file, sizeof(file), &fds[fd]) || !file)
		return false;
	return (BPF_CORE_READ(file, f_inode, i_mode) & THPTRACE_S_IFMT) == THPTRACE_S_IFREG;
}

/* btf: regs may be read directly (tp_btf), else through probe reads (raw_tp); a write's descriptor is
 * read only once the call is known to be a watched main thread's write. */
static __always_inline int disk_enter(long id, struct pt_regs *regs, bool btf)
{
	__u32 call = disk_call(id);
	__u32 tgid;

	if (!call)
		return 0;
	tgid = current_tgid();
	if (!maybe_watched(tgid) || !bpf_map_lookup_elem(&targets, &tgid))
		return 0;
	/* Writes: the main thread's to files only; its replies to clients go to sockets. */
	if (call == DISK_WRITE &&
	    (current_tid() != tgid ||
	     !fd_is_regular(btf ? PT_REGS_PARM1_SYSCALL(regs) : PT_REGS_PARM1_CORE_SYSCALL(regs))))
		return 0;
	start_record(START_DISK);
	return 0;
}

/* The end of a call of a watched process's thread begun at its START_DISK: one head-only record. */
static __always_inline int disk_end(__u32 call)
{
	struct thptrace_event *e;
	__u32 tgid, tid;
	__u64 begin;

	tgid = current_tgid();
	if (!maybe_watched(tgid) || (call == DISK_WRITE && current_tid() != tgid))
		return 0;
	begin = start_take(START_DISK);
	if (!begin)
		return 0;
	tid = current_tid();
	e = bpf_ringbuf_reserve(&events, THPTRACE_EVENT_HEAD_BYTES, 0);
	if (!e) {
		count_drop();
		return 0;
	}
	e->type = EV_DISK;
	e->tgid = tgid;
	e->pid = tid;
	e->child_pid = 0;
	e->ts_ns = bpf_ktime_get_ns();
	e->start_ns = begin;
	e->value = call;
	e->value2 = thread_kind(tgid, tid);
	bpf_ringbuf_submit(e, 0);
	return 0;
}

/* id: the call's number, read back from the registers at its return (PT_REGS_SYSCALL_NR). */
static __always_inline int disk_exit(long id)
{
	__u32 call = disk_call(id);

	if (!call)
		return 0;
	return disk_end(call);
}

SEC("tp_btf/sys_enter")
int BPF_PROG(disk_enter_btf, struct pt_regs *regs, long id)
{
	return disk_enter(id, regs, true);
}

SEC("raw_tp/sys_enter")
int BPF_PROG(disk_enter_raw, struct pt_regs *regs, long id)
{
	return disk_enter(id, regs, false);
}

SEC("tp_btf/sys_exit")
int BPF_PROG(disk_exit_btf, struct pt_regs *regs, long ret)
{
	return disk_exit(PT_REGS_SYSCALL_NR(regs));
}

SEC("raw_tp/sys_exit")
int BPF_PROG(disk_exit_raw, struct pt_regs *regs, long ret)
{
	return disk_exit(PT_REGS_SYSCALL_NR_CORE(regs));
}

/* fentry mode: the system calls' own entry points, which only these calls reach, instead of a
 * program on every system call of the machine. Not the VFS's vfs_fsync_range: a kernel build may
 * inline it into one call and not the other (Debian's 5.10 and 6.1 do for fdatasync, whose calls
 * then went unseen), while a system call's entry is reached through the call table and never
 * inlined. The wrappers take the user registers, as the tracepoints do. */
static __always_inline int disk_begin(struct pt_regs *regs, bool write)
{
	__u32 tgid = current_tgid();

	if (!maybe_watched(tgid) || !bpf_map_lookup_elem(&targets, &tgid))
		return 0;
	if (write && (current_tid() != tgid || !fd_is_regular(PT_REGS_PARM1_CORE_SYSCALL(regs))))
		return 0;
	start_record(START_DISK);
	return 0;
}

SEC("fentry/" SYSCALL_WRAPPER(fsync))
int BPF_PROG(disk_fsync_fentry, struct pt_regs *regs)
{
	return disk_begin(regs, false);
}

SEC("fexit/" SYSCALL_WRAPPER(fsync))
int BPF_PROG(disk_fsync_fexit, struct pt_regs *regs, long ret)
{
	return disk_end(DISK_FSYNC);
}

SEC("fentry/" SYSCALL_WRAPPER(fdatasync))
int BPF_PROG(disk_fdatasync_fentry, struct pt_regs *regs)
{
	return disk_begin(regs, false);
}

SEC("fexit/" SYSCALL_WRAPPER(fdatasync))
int BPF_PROG(disk_fdatasync_fexit, struct pt_regs *regs, long ret)
{
	return disk_end(DISK_FDATASYNC);
}

SEC("fentry/" SYSCALL_WRAPPER(sync_file_range))
int BPF_PROG(disk_range_fentry, struct pt_regs *regs)
{
	return disk_begin(regs, false);
}

SEC("fexit/" SYSCALL_WRAPPER(sync_file_range))
int BPF_PROG(disk_range_fexit, struct pt_regs *regs, long ret)
{
	return disk_end(DISK_SYNC_FILE_RANGE);
}

SEC("fentry/" SYSCALL_WRAPPER(write))
int BPF_PROG(disk_write_fentry, struct pt_regs *regs)
{
	return disk_begin(regs, true);
}

SEC("fexit/" SYSCALL_WRAPPER(write))
int BPF_PROG(disk_write_fexit, struct pt_regs *regs, long ret)
{
	return disk_end(DISK_WRITE);
}
