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
#include "arch.bpf.h"

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

/* Per-CPU fault counters of the hot lines' owners (struct thptrace_pcpu): pcpu_regions regions of
 * pcpu_slots entries, region r holding CPU r's. A plain array rather than a per-CPU map so that the
 * fork programs can read every CPU's copy (bpf_map_lookup_percpu_elem needs Linux 5.19), and
 * mmapped by userspace, which sums them. Sized by userspace before load. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct thptrace_pcpu);
} pcpu SEC(".maps") __weak;

/* Set by userspace before load: the regions (CPUs, at most THPTRACE_MAX_CPUS) and the entries per
 * region (hot-line owners at once: the targets map's size) of the pcpu map. Read-only data, so the
 * verifier knows their values and walks the loop over regions exactly that many times. */
const volatile __u32 pcpu_regions __weak = 1;
const volatile __u32 pcpu_slots __weak = 1;

/* Discrete events to userspace; its size is set by userspace before load. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} events SEC(".maps") __weak;

/* Sampled copy-on-write faults (struct thptrace_copy_sample): a ring of their own, so that a burst
 * of samples never crowds out the fork and exit records. Sized by userspace before load. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1024 * 1024);
} samples SEC(".maps") __weak;

/* The slow path's per-CPU tick and the samples dropped: no cache line shared between CPUs (a line
 * owner's own per-CPU fault count is its tick). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct thptrace_sample_state);
} sample_state SEC(".maps") __weak;

/* On average 1 in sample_every copy-on-write faults of a watched process with a live fork child is
 * sent with its user call stack, at random gaps (sample_gap); 0 = off, which the verifier then
 * prunes from every program. Set by userspace before load. */
const volatile __u32 sample_every __weak = 0;

/* A sample wakes the reader only once this many bytes wait in the samples ring (half of it, set by
 * userspace); the reader drains the ring at every poll anyway, at least every 100 ms. A wake-up per
 * sample (an irq_work on the faulting CPU, an IPI to the reader's) was most of what a sample cost. */
const volatile __u64 sample_wakeup_bytes __weak = 0;
/* Samples carry the registers and top of stack for a DWARF unwind (struct
 * thptrace_copy_sample_dwarf). */
const volatile bool dwarf_stacks __weak = false;

/* Tracked fork children alive now, of every watched process: the sched family's programs do nothing
 * while it is 0, and userspace attaches them only while it is not (Tracer::poll). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} live_forks SEC(".maps") __weak;

static __always_inline __u64 *live_forks_count(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&live_forks, &zero);
}

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
	/* An fsync, fdatasync or sync_file_range in flight (disk.bpf.c). */
	START_DISK = 8,
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

/* The start of `kind` on the current thread, left in place; 0 when none was recorded. */
static __always_inline __u64 start_peek(enum start_kind kind)
{
	__u64 key = start_key(kind, (__u32)bpf_get_current_pid_tgid());
	__u64 *start = bpf_map_lookup_elem(&starts, &key);

	return start ? *start : 0;
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

/* This CPU's counters of a line's owner; NULL only if userspace sized the map wrong. */
static __always_inline struct thptrace_pcpu *pcpu_of(const struct thptrace_hot *h)
{
	__u32 cpu = bpf_get_smp_processor_id();
	__u32 region = cpu < pcpu_regions ? cpu : cpu % pcpu_regions;
	__u32 key = region * pcpu_slots + h->pcpu_slot;

	return bpf_map_lookup_elem(&pcpu, &key);
}

/* The registers and top of stack of the current thread's user context into d (a DWARF sample): the
 * registers from regs (the user fault's own, or the task's saved user pt_regs), the stack from sp
 * up: 8 KiB, or, where the stack's mapping ends sooner (a main thread near main() with a small
 * environment), up to the page it ends at (mappings end on a page), the next page or sp's own. */
static __always_inline void sample_user_context(struct thptrace_copy_sample_dwarf *d,
						struct pt_regs *regs)
{
	__u64 sp, own;

	d->stack_bytes = 0;
	if (!regs || bpf_probe_read_kernel(d->regs, sizeof(d->regs), regs))
		return;
	sp = d->regs[THPTRACE_USER_REG_SP];
	/* Bytes from sp to the end of its page: 1..4096. */
	own = 4096 - (sp & 4095);
	if (!bpf_probe_read_user(d->stack, THPTRACE_DWARF_STACK, (void *)sp))
		d->stack_bytes = THPTRACE_DWARF_STACK;
	else if (own + 4096 < THPTRACE_DWARF_STACK &&
		 !bpf_probe_read_user(d->stack, own + 4096, (void *)sp))
		d->stack_bytes = own + 4096;
	else if (!bpf_probe_read_user(d->stack, own, (void *)sp))
		d->stack_bytes = own;
}

/* Sends one sampled copy-on-write fault of a watched process: the faulting address and the user
 * call stack. ctx is the program's context (bpf_get_stack needs it). The stack is walked by the
 * kernel through frame pointers: a binary built without them gives its faulting function and little
 * more, so with dwarf_stacks the sample also carries the thread's registers and top of stack, for
 * an unwind from .eh_frame in userspace. uregs: the user registers of a user-mode fault
 * (page_fault_user's), else NULL; then a BTF program (btf: fentry, fexit, tp_btf) takes the task's
 * saved user registers (bpf_task_pt_regs, Linux 5.15), and a raw tracepoint of a kernel-mode fault
 * sends frame pointers alone. */
static __always_inline void sample_send(void *ctx, __u32 tgid, __u64 address, bool btf,
					struct pt_regs *uregs)
{
	struct thptrace_copy_sample_dwarf *d = NULL;
	struct thptrace_copy_sample *s;
	bool wake;
	long n;

	if (dwarf_stacks && !uregs && btf &&
	    bpf_core_enum_value_exists(enum bpf_func_id, BPF_FUNC_task_pt_regs))
		uregs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
	if (dwarf_stacks && uregs) {
		d = bpf_ringbuf_reserve(&samples, sizeof(*d), 0);
		s = d ? &d->base : NULL;
	} else {
		s = bpf_ringbuf_reserve(&samples, sizeof(*s), 0);
	}

	if (!s) {
		__u32 zero = 0;
		struct thptrace_sample_state *st = bpf_map_lookup_elem(&sample_state, &zero);

		if (st)
			st->dropped += 1;
		return;
	}
	s->type = d ? EV_COPY_SAMPLE_DWARF : EV_COPY_SAMPLE;
	s->tgid = tgid;
	s->pid = current_tid();
	s->ts_ns = bpf_ktime_get_ns();
	s->address = address;
	n = bpf_get_stack(ctx, s->stack, sizeof(s->stack), BPF_F_USER_STACK);
	s->frames = n > 0 ? (__u32)(n / sizeof(__u64)) : 0;
	if (d)
		sample_user_context(d, uregs);
	wake = bpf_ringbuf_query(&samples, BPF_RB_AVAIL_DATA) >= sample_wakeup_bytes;
	bpf_ringbuf_submit(s, wake ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP);
}

/* The gap to the next sampled copy, drawn uniformly from 1 .. 2N-1 (mean N = sample_every). Every
 * N-th fault exactly would see one phase of any write pattern whose period divides N (a loop that
 * writes three pages in one function and the fourth in another came out as 100% the first); random
 * gaps leave each pattern's share unbiased. Drawn once a sample, not once a fault. */
static __always_inline __u64 sample_gap(void)
{
	if (sample_every <= 1)
		return 1;
	return 1 + bpf_get_prandom_u32() % (2 * sample_every - 1);
}

/* Whether the fault that brought a tick to `count` is one to sample; *at is the count the next
 * sample is due at (0: none drawn yet, and the first gap starts here). */
static __always_inline bool sample_due(__u64 count, __u64 *at)
{
	if (!sample_every)
		return false;
	if (count < *at)
		return false;
	if (!*at) {
		*at = count + sample_gap();
		return false;
	}
	*at = count + sample_gap();
	return true;
}

/* The slow path's sampler, on this CPU's tick. */
static __always_inline void sample_copy(void *ctx, __u32 tgid, __u64 address, bool btf,
					struct pt_regs *uregs)
{
	struct thptrace_sample_state *st;
	__u32 zero = 0;

	if (!sample_every)
		return;
	st = bpf_map_lookup_elem(&sample_state, &zero);
	if (st && sample_due(++st->tick, &st->sample_at))
		sample_send(ctx, tgid, address, btf, uregs);
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

/* ---- the fault counters (struct thptrace_faults): their one add per kind ---- */

/* One write fault on a present page into f, from any CPU: huge when do_huge_pmd_wp_page took it,
 * split when that fell back to pte level (where the retry is the fault counted as a copy), ns its
 * time in the handler (0 when not timed). */
static __always_inline void faults_add(struct thptrace_faults *f, bool huge, bool split, __u64 ns)
{
	if (!split)
		__sync_fetch_and_add(&f->cow, 1);
	if (huge)
		__sync_fetch_and_add(&f->huge_cow, 1);
	if (split)
		__sync_fetch_and_add(&f->thp_splits, 1);
	if (ns) {
		__sync_fetch_and_add(&f->lat[log2_slot(ns) & (THPTRACE_LAT_SLOTS - 1)], 1);
		__sync_fetch_and_add(&f->ns_total, ns);
		__sync_fetch_and_add(&f->ns_count, 1);
	}
}

/* mul times from into into, with plain stores: for counters only one program writes at a time. */
static __always_inline void faults_add_scaled(struct thptrace_faults *into,
					      const struct thptrace_faults *from, __u64 mul)
{
	into->cow += mul * from->cow;
	into->huge_cow += mul * from->huge_cow;
	into->thp_splits += mul * from->thp_splits;
	into->ns_total += mul * from->ns_total;
	into->ns_count += mul * from->ns_count;
	_Pragma("unroll") for (int i = 0; i < THPTRACE_LAT_SLOTS; i++) into->lat[i] +=
	    mul * from->lat[i];
}

/* Adds mul times the sum over every CPU of a line owner's counters (pcpu_slot) to an episode's
 * fault counters: mul = -1 at fork, 1 at the child's exit, which leaves the faults between the two.
 * Not atomic across CPUs, and need not be: each CPU's counter is read once at each end, so a fault
 * that races the read is counted either before or after, never twice or not at all. Plain stores
 * into the episode: for a line owner's episode only the fork and the closing program write these
 * fields. */
static __always_inline void episode_add_pcpu(struct thptrace_episode *ep, __u32 pcpu_slot,
					     __u64 mul)
{
	for (__u32 r = 0; r < pcpu_regions && r < THPTRACE_MAX_CPUS; r++) {
		__u32 key = r * pcpu_slots + pcpu_slot;
		struct thptrace_pcpu *p = bpf_map_lookup_elem(&pcpu, &key);

		if (!p)
			break;
		faults_add_scaled(&ep->faults, &p->faults, mul);
	}
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

/* ---- the main thread's wait for a CPU (struct thptrace_cpu_wait): its one add ---- */

enum cpu_wait_holder {
	HELD_BY_CHILD,
	HELD_BY_THREAD,
	HELD_BY_OTHER,
	HELD_BY_IDLE,
};

static __always_inline void cpu_wait_add(struct thptrace_cpu_wait *w, enum cpu_wait_holder who, __u64 ns)
{
	switch (who) {
	case HELD_BY_CHILD: __sync_fetch_and_add(&w->child_ns, ns); break;
	case HELD_BY_THREAD: __sync_fetch_and_add(&w->threads_ns, ns); break;
	case HELD_BY_OTHER: __sync_fetch_and_add(&w->others_ns, ns); break;
	default: __sync_fetch_and_add(&w->idle_ns, ns); break;
	}
}

/* Charges the target's waiting main thread with the time since its wait was last charged, to `who`
 * (what held its CPU meanwhile), in its totals and each live episode, and moves the charge point to
 * now. Called from its CPU's switches (sched.bpf.c) and from its fork child's exit on that CPU
 * (fork.bpf.c), so that an episode gets the child's last slice. Two CPUs charging the same wait at
 * once (a switch on the main thread's CPU and the child's exit elsewhere) is the one race: the
 * overlap, a few µs, is counted twice. */
static __always_inline void cpu_wait_charge(struct thptrace_target *tgt, enum cpu_wait_holder who, __u64 now)
{
	__u64 since = tgt->main_wait_charged_ns;

	if (!since || now <= since)
		return;
	tgt->main_wait_charged_ns = now;
	cpu_wait_add(&tgt->main_wait, who, now - since);
	/* An episode gets no time from before its fork (a wait the programs began and never ended). */
	for_each_active_episode(tgt, ep, {
		cpu_wait_add(&ep->main_wait, who, since > ep->fork_ts_ns ? now - since : now - ep->fork_ts_ns);
	});
}

#endif /* THPTRACE_COMMON_BPF_H */
