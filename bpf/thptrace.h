/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* The ABI shared by the BPF programs and the daemon: plain fixed-width structs with explicit padding.
 * userspace/tracer/abi.h checks every size and offset with static_assert. */
#ifndef THPTRACE_ABI_H
#define THPTRACE_ABI_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* Children of one watched process that can be alive at once and still get their faults counted.
 * Redis never has more than one fork child; 4 leaves room for module forks and odd workloads. */
#define THPTRACE_MAX_ACTIVE 4
/* Lines of the fault programs' fast path (a power of two): a watched tgid owns line
 * thptrace_hot_index(tgid), or is counted on the slow path (hash maps) when another owns it. */
#define THPTRACE_HOT_LINES 1024
/* thptrace_hot.tgid while userspace sets a line up: no pid has this value. */
#define THPTRACE_HOT_CLAIMING 0xffffffffu
/* log2 buckets of per-fault latency in ns (fentry mode only): bucket i holds [2^i, 2^(i+1)) ns. */
#define THPTRACE_LAT_SLOTS 32
/* CPUs with their own fault counters (struct thptrace_pcpu); a CPU numbered above shares a region
 * (cpu % regions), which atomic adds keep exact, only no longer uncontended. */
#define THPTRACE_MAX_CPUS 1024
/* Frames of a sampled copy's user call stack (struct thptrace_copy_sample). */
#define THPTRACE_STACK_DEPTH 32
/* The prefix of the kernel's system-call wrappers (ARCH_HAS_SYSCALL_WRAPPER) that the disk family's
 * fentry programs attach to: for the programs' section names (bpf/arch.bpf.h) and the loader's
 * probe of them, on the architecture each is built for. */
#if defined(__TARGET_ARCH_arm64) || defined(__aarch64__)
#define THPTRACE_SYSCALL_WRAPPER_PREFIX "__arm64_sys_"
#elif defined(__TARGET_ARCH_x86) || defined(__x86_64__)
#define THPTRACE_SYSCALL_WRAPPER_PREFIX "__x64_sys_"
#else
#error "thptrace is built for x86_64 or arm64"
#endif

enum thptrace_reason {
	REASON_UNKNOWN = 0,
	REASON_BGSAVE = 1,
	REASON_FULL_SYNC_DISK = 2,
	REASON_FULL_SYNC_DISKLESS = 3,
	REASON_AOF_REWRITE = 4,
	REASON_MODULE = 5,
	REASON_FULL_SYNC_RDB_CHANNEL = 6, /* a full sync whose RDB goes over its own connection, forked
					   * per replica: Redis 8 repl-rdb-channel, Valkey 8 dual channel */
};

/* Bits set in the per-thread redis_ctx map while a Redis fork entry point is on that thread's stack. */
enum thptrace_redis_ctx {
	CTX_RDB_BGSAVE = 1 << 0,     /* rdbSaveBackground */
	CTX_RDB_SOCKETS = 1 << 1,    /* rdbSaveToSlavesSockets (Valkey: rdbSaveToReplicasSockets) */
	CTX_AOF_REWRITE = 1 << 2,    /* rewriteAppendOnlyFileBackground */
	CTX_REPLICATION = 1 << 3,    /* startBgsaveForReplication */
	CTX_MODULE_FORK = 1 << 4,    /* redisFork (Valkey: serverFork) with CHILD_TYPE_MODULE */
	CTX_FORK_RDB = 1 << 5,       /* redisFork/serverFork with CHILD_TYPE_RDB */
	CTX_FORK_AOF = 1 << 6,       /* redisFork/serverFork with CHILD_TYPE_AOF */
	CTX_FORK_LDB = 1 << 7,       /* redisFork/serverFork with CHILD_TYPE_LDB (Lua debugger) */
	CTX_RDB_CHANNEL = 1 << 8,    /* the sync's req has SLAVE_REQ_RDB_CHANNEL / REPLICA_REQ_RDB_CHANNEL */
};

/* Entry points attached in a process (redis_anchors map, by tgid): a context bit that cannot be set
 * there tells nothing by its absence. userspace/tracer/entry_points.cpp is the table. */
enum thptrace_redis_anchor {
	REDIS_ANCHOR_FORK = 1 << 0,           /* redisFork / serverFork */
	REDIS_ANCHOR_REPLICATION = 1 << 1,    /* startBgsaveForReplication */
	REDIS_ANCHOR_RDB_SOCKETS = 1 << 2,    /* rdbSaveToSlavesSockets / rdbSaveToReplicasSockets */
	REDIS_ANCHOR_RDB_BACKGROUND = 1 << 3, /* rdbSaveBackground */
	REDIS_ANCHOR_AOF_REWRITE = 1 << 4,    /* rewriteAppendOnlyFileBackground */
};

enum thptrace_event_type {
	EV_FORK = 1,        /* a watched process created a child process (sched_process_fork) */
	EV_FORK_RETURN = 2, /* the clone syscall returned in the parent: fork duration */
	EV_CHILD_EXIT = 3,  /* a tracked child exited: carries the final episode */
	EV_TARGET_EXIT = 4, /* a watched process exited */
	EV_COLLAPSE = 5,    /* khugepaged collapsed (or failed to collapse) a range of a watched mm */
	EV_STALL = 6,       /* a watched process stalled in direct compaction or direct reclaim */
	EV_COPY_SAMPLE = 7, /* one sampled copy-on-write fault (struct thptrace_copy_sample, own ring) */
	/* the same with registers and stack to unwind (struct thptrace_copy_sample_dwarf) */
	EV_COPY_SAMPLE_DWARF = 8,
	/* a thread of a watched process returned from fsync, fdatasync or sync_file_range, or its
	 * main thread from a write() to a regular file: only the head of struct thptrace_event (no
	 * episode), THPTRACE_EVENT_HEAD_BYTES */
	EV_DISK = 9,
};

/* EV_DISK's value: the call. */
enum thptrace_disk_call {
	DISK_FSYNC = 1,
	DISK_FDATASYNC = 2,
	DISK_SYNC_FILE_RANGE = 3,
	DISK_WRITE = 4, /* a write() of the main thread to a regular file: Redis's AOF */
};

/* EV_DISK's value2: the thread that made it, as Redis and Valkey name their threads. */
enum thptrace_thread_kind {
	THREAD_MAIN = 0,    /* the process's main thread (tid == tgid): the event loop */
	THREAD_BIO_AOF = 1, /* "bio_aof" or "bio_aof_fsync": the AOF's background fsync thread */
	THREAD_OTHER = 2,
};

enum thptrace_stall_kind {
	STALL_COMPACTION = 0,
	STALL_RECLAIM = 1,
};

/* The write faults on present pages of one process: the one set that a target's totals, an episode
 * and a line owner's counters on one CPU each keep. One add for it on each side of the kernel
 * boundary: faults_add and faults_add_scaled (bpf/common.bpf.h), thptrace::add_faults
 * (userspace/kernel/abi.h). */
struct thptrace_faults {
	__u64 cow;        /* write faults on present pages (a split huge one: once, at pte level) */
	__u64 huge_cow;   /* fentry: do_huge_pmd_wp_page */
	__u64 thp_splits; /* fentry: huge COW faults that split the PMD (VM_FAULT_FALLBACK) */
	__u64 ns_total;   /* fentry: time in the wp handlers */
	__u64 ns_count;   /* fentry: faults timed */
	__u64 lat[THPTRACE_LAT_SLOTS];
};

/* Time a watched process's main thread spent runnable, waiting for a CPU, by what held the CPU whose
 * run queue it waited in (the sched family): its own fork child, another thread of its own process,
 * another process, or nothing (the CPU idle: the wake-up's own latency). */
struct thptrace_cpu_wait {
	__u64 child_ns;
	__u64 threads_ns;
	__u64 others_ns;
	__u64 idle_ns;
};

/* One fork of a watched process, from the child's creation to its exit. Counters are updated with
 * atomic adds from any CPU while the child lives. */
struct thptrace_episode {
	__u32 parent_tgid;
	__u32 child_pid;
	__u32 reason;               /* enum thptrace_reason, from the Redis uprobes; 0 when unknown */
	__u32 redis_ctx;            /* enum thptrace_redis_ctx bits seen at fork time */
	__u32 tracked;              /* 1 when the fork took an active slot (and a slow-path reference on
				     * the child's hot line), which closing the episode gives back */
	__u32 based;                /* 1 while faults holds minus the parent's per-CPU sums at fork (the
				     * parent owns its hot line): the episode's own count is that plus
				     * the sums now; closing the episode adds them */
	__u64 fork_ts_ns;           /* sched_process_fork, CLOCK_MONOTONIC */
	__u64 exit_ts_ns;           /* child exit; 0 while alive */
	__u64 clone_start_ns;       /* clone syscall entry in the parent; 0 when not seen */
	__u64 clone_end_ns;         /* clone syscall return in the parent; 0 when not seen */
	__u64 libc_fork_ns;         /* libc fork() call to return in the parent (uprobe); 0 when not seen */
	__u64 child_cow_faults;     /* write faults on present pages taken by the child */
	__u64 huge_allocs;          /* order-9 page allocations by the parent */
	__u64 compaction_stalls;
	__u64 compaction_ns;
	__u64 reclaim_stalls;
	__u64 reclaim_ns;
	__u64 child_wchar;          /* at the child's exit: bytes it passed to write calls */
	__u64 child_write_bytes;    /* at the child's exit: bytes of page cache it dirtied */
	__u64 child_cpu_ns;         /* at the child's exit: its time on a CPU (se.sum_exec_runtime) */
	__u64 child_runqueue_ns;    /* at the child's exit: its time runnable, waiting for a CPU
				     * (sched_info.run_delay, CONFIG_SCHED_INFO) */
	struct thptrace_cpu_wait main_wait; /* the parent's main thread's, while the child lives */
	struct thptrace_faults faults; /* the parent's, while the child lives */
};

/* Per watched process state and totals over the whole capture. */
struct thptrace_target {
	__u32 active[THPTRACE_MAX_ACTIVE]; /* child pids of live episodes, 0 = free slot */
	__u64 child_cow_faults;
	__u64 huge_allocs;
	__u64 khugepaged_scans;
	__u64 thp_collapses;
	__u64 compaction_stalls;
	__u64 compaction_ns;
	__u64 reclaim_stalls;
	__u64 reclaim_ns;
	__u64 untracked_forks;     /* forks seen while every active slot, or the episodes map, was full */
	/* The sched family: what ran on its main thread's CPU while that thread was runnable and
	 * waiting for it (struct thptrace_cpu_wait), summed over the times the family was attached
	 * (while a tracked fork child of any watched process lived). */
	struct thptrace_cpu_wait main_wait;
	/* The sched family's state of the main thread: when its current wait was last charged (its
	 * wake-up or preemption, then each switch on its CPU), 0 while it is not waiting; and the CPU
	 * whose run queue it waits in. */
	__u64 main_wait_charged_ns;
	__u32 main_wait_cpu;
	__u32 main_wait_pad;
	/* The target's own; a line owner's are counted on its CPUs (pcpu map) and added on reading. */
	struct thptrace_faults faults;
};

/* One cache line per watched tgid, read (not written) by every write fault of the machine in the
 * tracepoint modes and by every wp fault in fentry mode. Userspace claims and releases lines
 * through an mmap of the map. The owner's fault counters are per CPU, in the pcpu map (struct
 * thptrace_pcpu): a fault adds to its CPU's copy, so the threads of a target on different cores
 * never write to the same cache line. An episode's count is the difference of their sums at its
 * child's exit and at its fork, which the fork programs take (thptrace_episode.based). */
struct thptrace_hot {
	__u32 tgid;        /* the target counted here; 0 = free, THPTRACE_HOT_CLAIMING while set up */
	__u32 slow;        /* other watched tgids with this index (fork children, collisions): when
			    * non-zero, a fault by a tgid that does not own the line looks in the hash maps */
	__u32 pcpu_slot;   /* the owner's counters: entry region * slots + pcpu_slot of the pcpu map */
	__u32 live;        /* the owner's episodes counted by difference (based) whose child lives: the
			    * fault programs sample copies while it is non-zero, without a hash lookup */
	__u64 spare[6];
};

/* A line owner's fault counters on one CPU (pcpu map: one region of `slots` entries per CPU). Only
 * that CPU adds to them; userspace and the fork programs sum the regions. */
struct thptrace_pcpu {
	__u64 sample_at; /* faults.cow at which this CPU's next copy is sampled (0: none drawn) */
	struct thptrace_faults faults;
	__u64 pad[2]; /* to whole cache lines */
};

static inline __u32 thptrace_hot_index(__u32 tgid)
{
	return tgid & (THPTRACE_HOT_LINES - 1);
}

/* One ring-buffer record. Only low-rate events travel this way; faults are counted in maps. */
struct thptrace_event {
	__u32 type;        /* enum thptrace_event_type */
	__u32 tgid;        /* the watched process */
	__u32 pid;         /* the thread that did it */
	__u32 child_pid;   /* EV_FORK, EV_FORK_RETURN, EV_CHILD_EXIT */
	__u64 ts_ns;       /* CLOCK_MONOTONIC */
	__u64 start_ns; /* EV_FORK_RETURN: clone entry; EV_FORK: the fork call's start (libc fork()
			 * or clone entry; 0 when neither is timed); EV_STALL, EV_DISK: its start */
	__u64 value;       /* EV_STALL: kind; EV_COLLAPSE: status (1 = success); EV_FORK: reason;
			    * EV_DISK: enum thptrace_disk_call */
	__u64 value2;      /* EV_COLLAPSE: 1 for a khugepaged collapse, 0 for a scan; EV_DISK: enum
			    * thptrace_thread_kind */
	struct thptrace_episode episode; /* EV_CHILD_EXIT: the final counters */
};

/* The bytes of struct thptrace_event before its episode: the whole of a record that carries none
 * (EV_DISK), which keeps the frequent ones small. */
#define THPTRACE_EVENT_HEAD_BYTES 48

/* One sampled copy-on-write fault of a watched process while a fork child of it lives (1 in
 * sample_every of them, counted per CPU), in the `samples` ring buffer. */
struct thptrace_copy_sample {
	__u32 type;        /* EV_COPY_SAMPLE */
	__u32 tgid;
	__u32 pid;         /* the thread that faulted */
	__u32 frames;      /* entries of stack[] filled: stack[0] is the faulting instruction */
	__u64 ts_ns;       /* CLOCK_MONOTONIC */
	__u64 address;     /* the faulting user address */
	__u64 stack[THPTRACE_STACK_DEPTH]; /* user return addresses (frame-pointer walk by the kernel) */
};

/* A sampled copy with what a userspace unwinder needs where frame pointers are missing (Debian's
 * Redis): the thread's user registers and the top of its user stack, as `perf record --call-graph
 * dwarf` takes them; the call stack is unwound from the binaries' .eh_frame (libdw). */
#define THPTRACE_USER_REGS 21	  /* struct pt_regs on x86_64: r15 ... ss */
#define THPTRACE_USER_REG_SP 19   /* the index of sp in it */
#define THPTRACE_DWARF_STACK 8192 /* bytes of stack copied from sp upward, at most */
struct thptrace_copy_sample_dwarf {
	struct thptrace_copy_sample base; /* type EV_COPY_SAMPLE_DWARF */
	__u64 regs[THPTRACE_USER_REGS];	  /* the faulting thread's user registers (pt_regs order) */
	__u32 stack_bytes; /* of stack[] copied: 8192, 4096, 2048 or 0 (sp too near its end) */
	__u32 pad;
	__u8 stack[THPTRACE_DWARF_STACK]; /* user memory from regs' sp upward */
};

/* Per-CPU state of the copy sampler (sample_state map). */
struct thptrace_sample_state {
	__u64 tick;        /* slow-path faults of sampled processes on this CPU */
	__u64 dropped;     /* samples that found the samples ring buffer full */
	__u64 sample_at;   /* tick at which the next slow-path copy is sampled (0: none drawn) */
};

#endif /* THPTRACE_ABI_H */
