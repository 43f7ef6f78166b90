/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Maps and helpers shared by every probe family. The maps are __weak so that each family's object
 * can name them and `bpftool gen object` folds them into one map per name. */
#ifndef THPTRACE_COMMON_BPF_H
#define THPTRACE_COMMON_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "thptrace.h"

#define MAX_TARGETS 64
#define MAX_EPISODES 256

/* Watched tgids, written by userspace. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_TARGETS);
	__type(key, __u32);
	__type(value, struct thptrace_target);
} targets SEC(".maps") __weak;

/* Live (and not yet collected) episodes, keyed by the child's pid. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_EPISODES);
	__type(key, __u32);
	__type(value, struct thptrace_episode);
} episodes SEC(".maps") __weak;

/* The fault programs' fast path (struct thptrace_hot); mmapped by userspace. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, THPTRACE_HOT_LINES);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct thptrace_hot);
} hot SEC(".maps") __weak;

/* Discrete events to userspace; its size is set by userspace before load. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} events SEC(".maps") __weak;

/* Ring-buffer records that did not fit, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} dropped SEC(".maps") __weak;

/* Start time of an in-flight clone, wp fault, compaction or reclaim, keyed by (kind << 32 | tid). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u64);
	__type(value, __u64);
} starts SEC(".maps") __weak;

/* Redis fork entry points on each thread's stack (enum thptrace_redis_ctx bits), keyed by tid. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u32);
} redis_ctx SEC(".maps") __weak;

/* Who closed an episode: the child's pid and its fork time (a pid alone is reused). */
struct closed_key {
	__u32 pid;
	__u32 pad;
	__u64 fork_ts_ns;
};

/* Episodes closed, so that each is closed once (fork.bpf.c). An LRU map forgets old keys by itself. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, struct closed_key);
	__type(value, __u32);
} closed SEC(".maps") __weak;

/* Entry points attached per Redis process (enum thptrace_redis_anchor bits), keyed by tgid. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_TARGETS);
	__type(key, __u32);
	__type(value, __u32);
} redis_anchors SEC(".maps") __weak;

enum start_kind {
	START_CLONE = 1,
	START_WP_FAULT = 2,
	START_HUGE_WP_FAULT = 3,
	START_COMPACTION = 4,
	START_RECLAIM = 5,
	START_LIBC_FORK = 6,
	/* Not a time: the pid of the child the thread's fork in flight made (set by the fork
	 * program, read when the call returns). */
	START_FORK_CHILD = 7,
};

static __always_inline __u64 start_key(enum start_kind kind, __u32 tid)
{
	return ((__u64)kind << 32) | tid;
}

/* Records now as the start of `kind` on the current thread. */
static __always_inline void start_record(enum start_kind kind)
{
	__u64 key = start_key(kind, (__u32)bpf_get_current_pid_tgid());
	__u64 now = bpf_ktime_get_ns();

	bpf_map_update_elem(&starts, &key, &now, BPF_ANY);
}

/* Takes and forgets the start of `kind` on the current thread; 0 when none was recorded. */
static __always_inline __u64 start_take(enum start_kind kind)
{
	__u64 key = start_key(kind, (__u32)bpf_get_current_pid_tgid());
	__u64 *start = bpf_map_lookup_elem(&starts, &key);
	__u64 begin;

	if (!start)
		return 0;
	begin = *start;
	bpf_map_delete_elem(&starts, &key);
	return begin;
}

/* The live episode of the child a fork call returned in the parent (ret > 0), or NULL for a failed
 * call, a thread creation, or a fork that is not tracked. ret is the child's pid in the parent's PID
 * namespace (in a container not the pid the kernel's records use), so the child is the one the fork
 * program saw this thread make; *child is set to its pid. */
static __always_inline struct thptrace_episode *episode_of_fork_return(long ret, __u32 *child)
{
	__u64 key = start_key(START_FORK_CHILD, (__u32)bpf_get_current_pid_tgid());
	__u64 *made;

	if (ret <= 0)
		return NULL;
	made = bpf_map_lookup_elem(&starts, &key);
	if (!made)
		return NULL;
	*child = (__u32)*made;
	return bpf_map_lookup_elem(&episodes, child);
}

static __always_inline void count_drop(void)
{
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(&dropped, &zero);

	if (n)
		*n += 1;
}

/* Reserves a zeroed event record; counts a drop when the ring buffer is full. */
static __always_inline struct thptrace_event *event_reserve(__u32 type, __u32 tgid, __u32 pid)
{
	struct thptrace_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);

	if (!e) {
		count_drop();
		return NULL;
	}
	__builtin_memset(e, 0, sizeof(*e));
	e->type = type;
	e->tgid = tgid;
	e->pid = pid;
	e->ts_ns = bpf_ktime_get_ns();
	return e;
}

/* Compare-and-exchange, returning the old value. BPF_CMPXCHG and the other fetching atomics arrived in
 * Linux 5.12 (commit 5ffa25502b5a, "bpf: Add instructions for atomic_[cmp]xchg"); before that the
 * kernel rejects any object holding one, even in dead code, before verification ("BPF_STX uses
 * reserved fields"). The programs that need it are built a second time with THPTRACE_NO_ATOMICS
 * (fork_compat.bpf.c), where this is a plain read-compare-write: correct for one writer at a time,
 * racy only when two CPUs update the same word at the same instant. Only the adds whose result is
 * unused (BPF_XADD, since 3.x) are allowed anywhere else; the build checks it (check_bpf_atomics.sh). */
#ifdef THPTRACE_NO_ATOMICS
#define thptrace_cas(ptr, old, new)                        \
	({                                                  \
		__typeof__(*(ptr)) __cur = *(volatile __typeof__(*(ptr)) *)(ptr); \
		if (__cur == (old))                         \
			*(volatile __typeof__(*(ptr)) *)(ptr) = (new); \
		__cur;                                      \
	})
#else
#define thptrace_cas(ptr, old, new) __sync_val_compare_and_swap(ptr, old, new)
#endif

static __always_inline __u32 current_tgid(void)
{
	return bpf_get_current_pid_tgid() >> 32;
}

static __always_inline __u32 current_tid(void)
{
	return (__u32)bpf_get_current_pid_tgid();
}

static __always_inline struct thptrace_hot *hot_of(__u32 tgid)
{
	__u32 idx = thptrace_hot_index(tgid);

	return bpf_map_lookup_elem(&hot, &idx);
}

/* May `tgid` be watched (a target or a tracked fork child)? Costs one array read; false positives
 * (another tgid's line, a collision) are sorted out by the caller's hash lookups. */
static __always_inline bool maybe_watched(__u32 tgid)
{
	struct thptrace_hot *h = hot_of(tgid);

	return h && (h->tgid == tgid || h->slow);
}

static __always_inline __u32 log2_slot(__u64 v)
{
	__u32 slot = 0;

	/* Unrolled binary search keeps the verifier happy and costs five compares. */
	if (v >> 16) { v >>= 16; slot += 16; }
	if (v >> 8) { v >>= 8; slot += 8; }
	if (v >> 4) { v >>= 4; slot += 4; }
	if (v >> 2) { v >>= 2; slot += 2; }
	if (v >> 1) { slot += 1; }
	return slot < THPTRACE_LAT_SLOTS ? slot : THPTRACE_LAT_SLOTS - 1;
}

/* Calls fn(episode) for each live episode of a watched process. */
#define for_each_active_episode(tgt, ep, body)                                   \
	do {                                                                     \
		_Pragma("unroll") for (int __i = 0; __i < THPTRACE_MAX_ACTIVE; __i++) { \
			__u32 __child = (tgt)->active[__i];                      \
			if (!__child)                                            \
				continue;                                        \
			struct thptrace_episode *ep = bpf_map_lookup_elem(&episodes, &__child); \
			if (ep) { body; }                                        \
		}                                                                \
	} while (0)

#endif /* THPTRACE_COMMON_BPF_H */
