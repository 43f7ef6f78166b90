// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Fork family: opens an episode when a watched process creates a child process, times the clone
 * syscall in the parent, and closes the episode when the child exits. Each program has a tp_btf
 * twin and a raw_tp twin; userspace loads one of them (bpf_program__set_autoload).
 * fork_compat.bpf.c builds the fork and exit programs again, named *_compat, for kernels without BPF
 * compare-and-exchange (before 5.12; see thptrace_cas). */
#include "common.bpf.h"

#ifdef THPTRACE_NO_ATOMICS
#define FORK_BPF_PROG(name, args...) BPF_PROG(name##_compat, ##args)
#else
#define FORK_BPF_PROG(name, args...) BPF_PROG(name, ##args)
#endif

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* A new episode is built here, too large for the BPF stack beside the fork program's other locals. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct thptrace_episode);
} episode_scratch SEC(".maps") __weak;

/* The reason of a fork from the Redis entry points on the forking thread's stack (ctx) and those
 * attached in the process (anchors: an entry point missing from the binary says nothing by its
 * absence, so a label that needs it is left unknown, for INFO polling to name). Kept in step with
 * label_coverage() in userspace/tracer/entry_points.cpp. */
static __always_inline enum thptrace_reason reason_from_ctx(__u32 ctx, __u32 anchors)
{
	if (ctx & (CTX_AOF_REWRITE | CTX_FORK_AOF))
		return REASON_AOF_REWRITE;
	if (ctx & CTX_MODULE_FORK)
		return REASON_MODULE;
	if (ctx & CTX_FORK_LDB)
		return REASON_UNKNOWN;
	/* An rdb-channel sync always writes to the replica's socket (Redis 8 startBgsaveForReplication
	 * asserts it, Valkey 8 too). */
	if (ctx & CTX_RDB_CHANNEL)
		return REASON_FULL_SYNC_RDB_CHANNEL;
	if (ctx & CTX_RDB_SOCKETS)
		return REASON_FULL_SYNC_DISKLESS;
	if (ctx & CTX_REPLICATION) {
		/* startBgsaveForReplication forks through rdbSaveToSlavesSockets or rdbSaveBackground. */
		if ((ctx & CTX_RDB_BGSAVE) || (anchors & REDIS_ANCHOR_RDB_SOCKETS))
			return REASON_FULL_SYNC_DISK;
		return REASON_UNKNOWN;
	}
	if (ctx & (CTX_RDB_BGSAVE | CTX_FORK_RDB))
		return (anchors & REDIS_ANCHOR_REPLICATION) ? REASON_BGSAVE : REASON_UNKNOWN;
	return REASON_UNKNOWN;
}

static __always_inline int on_fork(struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = BPF_CORE_READ(parent, tgid);
	__u32 cpid = BPF_CORE_READ(child, pid);
	__u32 ctgid = BPF_CORE_READ(child, tgid);
	struct thptrace_target *tgt;
	struct thptrace_episode *ep;
	struct thptrace_event *e;
	__u32 tid = current_tid();
	__u32 zero = 0;
	__u32 reason = 0;
	__u32 *ctx;
	int slot = -1;

	/* A new thread of the watched process is not a fork. */
	if (ctgid == ptgid)
		return 0;
	tgt = bpf_map_lookup_elem(&targets, &ptgid);
	if (!tgt)
		return 0;

	ep = bpf_map_lookup_elem(&episode_scratch, &zero);
	if (!ep)
		return 0;
	__builtin_memset(ep, 0, sizeof(*ep));
	ep->parent_tgid = ptgid;
	ep->child_pid = cpid;
	ep->fork_ts_ns = bpf_ktime_get_ns();
	ctx = bpf_map_lookup_elem(&redis_ctx, &tid);
	if (ctx) {
		__u32 *anchors = bpf_map_lookup_elem(&redis_anchors, &ptgid);

		ep->redis_ctx = *ctx;
		ep->reason = reason_from_ctx(*ctx, anchors ? *anchors : 0);
	}
	reason = ep->reason;
	if (bpf_map_update_elem(&episodes, &cpid, ep, BPF_ANY) == 0) {
		/* Claim a free slot so the fault programs start counting for this child. */
		_Pragma("unroll") for (int i = 0; i < THPTRACE_MAX_ACTIVE; i++) {
			if (slot < 0 && thptrace_cas(&tgt->active[i], 0, cpid) == 0)
				slot = i;
		}
	}
	if (slot < 0) {
		__sync_fetch_and_add(&tgt->untracked_forks, 1);
	} else {
		struct thptrace_hot *h = hot_of(ptgid);
		struct thptrace_hot *ch = hot_of(cpid);
		struct thptrace_episode *mine = bpf_map_lookup_elem(&episodes, &cpid);

		/* The child's faults are looked up in the hash maps; the parent's, when it owns its
		 * line, are counted in its per-CPU counters, and this episode's are those after
		 * now. The child cannot run, let alone exit, before this returns: the tracepoint
		 * fires before wake_up_new_task(). */
		if (ch)
			__sync_fetch_and_add(&ch->slow, 1);
		__u64 *live = live_forks_count();

		/* The parent's main thread runs (it is in its fork call): no wait of it is open. */
		tgt->main_wait_charged_ns = 0;
		if (mine) {
			mine->tracked = 1;
			/* Given back by close_episode, which sees tracked. */
			if (live)
				__sync_fetch_and_add(live, 1);
			if (h && h->tgid == ptgid) {
				episode_add_pcpu(mine, h->pcpu_slot, (__u64)-1);
				mine->based = 1;
				/* Copies are sampled while it is non-zero (sample_copy). */
				__sync_fetch_and_add(&h->live, 1);
			}
		}
	}

	{
		__u64 key = start_key(START_FORK_CHILD, tid);
		__u64 made = cpid;

		bpf_map_update_elem(&starts, &key, &made, BPF_ANY);
	}
	e = event_reserve(EV_FORK, ptgid, tid);
	if (e) {
		e->child_pid = cpid;
		/* Runs in the parent, still inside its fork call: when that call is timed, its
		 * start. */
		e->start_ns = start_peek(START_LIBC_FORK);
		if (!e->start_ns)
			e->start_ns = start_peek(START_CLONE);
		e->value = reason;
		e->value2 = slot < 0 ? 0 : 1;
		bpf_ringbuf_submit(e, 0);
	}
	return 0;
}

SEC("tp_btf/sched_process_fork")
int FORK_BPF_PROG(fork_btf, struct task_struct *parent, struct task_struct *child)
{
	return on_fork(parent, child);
}

SEC("raw_tp/sched_process_fork")
int FORK_BPF_PROG(fork_raw, struct task_struct *parent, struct task_struct *child)
{
	return on_fork(parent, child);
}

/* What the exiting child wrote: its own counts and those its dead threads left in its signal struct
 * (a Redis child has one thread). Both need CONFIG_TASK_XACCT and CONFIG_TASK_IO_ACCOUNTING. */
static __always_inline void episode_child_io(struct thptrace_episode *ep, struct task_struct *p)
{
	if (!bpf_core_field_exists(p->ioac.write_bytes))
		return;
	ep->child_wchar = BPF_CORE_READ(p, ioac.wchar) + BPF_CORE_READ(p, signal, ioac.wchar);
	ep->child_write_bytes = BPF_CORE_READ(p, ioac.write_bytes) + BPF_CORE_READ(p, signal, ioac.write_bytes);
}

/* The exiting child's scheduler clocks, as /proc/PID/schedstat gives them: its time on a CPU (up to
 * the last tick or switch: a tick's worth short at most) and its time runnable, waiting for one,
 * which CONFIG_SCHED_INFO keeps (Debian's kernels have it; else 0). */
static __always_inline void episode_child_cpu(struct thptrace_episode *ep, struct task_struct *p)
{
	ep->child_cpu_ns = BPF_CORE_READ(p, se.sum_exec_runtime);
	if (bpf_core_field_exists(p->sched_info.run_delay))
		ep->child_runqueue_ns = BPF_CORE_READ(p, sched_info.run_delay);
}

static __always_inline void close_episode(__u32 pid, struct task_struct *p)
{
	struct thptrace_episode *ep = bpf_map_lookup_elem(&episodes, &pid);
	struct closed_key ck = {};
	struct thptrace_target *tgt;
	struct thptrace_event *e;
	struct thptrace_hot *h;
	__u32 one = 1;
	__u32 ptgid;
	int slot = -1;

	/* An episode already closed is one whose record did not fit (userspace collects it); this is
	 * then a new process that reused the pid. */
	if (!ep || ep->exit_ts_ns)
		return;
	/* Two threads of the child exiting at once can both get here (each read signal->live == 0
	 * after both decrements). Only the one whose insert creates the key closes: BPF_NOEXIST is
	 * decided under the map's bucket lock and is exact on every kernel, where thptrace_cas on
	 * exit_ts_ns would be a plain read-compare-write before 5.12 (THPTRACE_NO_ATOMICS). */
	ck.pid = pid;
	ck.fork_ts_ns = ep->fork_ts_ns;
	if (bpf_map_update_elem(&closed, &ck, &one, BPF_NOEXIST))
		return;
	ptgid = ep->parent_tgid;
	/* The parent, if it is still watched: looked up once for all that follows. */
	tgt = bpf_map_lookup_elem(&targets, &ptgid);
	/* The parent's main thread waiting in this CPU's queue waited behind this child up to now
	 * (the sched family; its next switch here would charge the episode no longer). */
	if (tgt && tgt->main_wait_charged_ns && tgt->main_wait_cpu == bpf_get_smp_processor_id())
		cpu_wait_charge(tgt, HELD_BY_CHILD, bpf_ktime_get_ns());
	/* A line owner's faults since the fork become the episode's, before exit_ts_ns says it is
	 * closed (userspace adds the sums itself to an episode that is based and not closed). When
	 * the parent no longer owns its line (unwatched meanwhile) its counters are gone: the
	 * parent-side counts are lost rather than wrong. */
	if (ep->based) {
		h = hot_of(ptgid);
		if (h && h->tgid == ptgid && tgt) {
			episode_add_pcpu(ep, h->pcpu_slot, 1);
			/* The owner is the one whose fork raised it: a line given up and claimed again
			 * meanwhile starts at 0 (Tracer::watch), hence the check. */
			if (h->live)
				__sync_fetch_and_sub(&h->live, 1);
		} else {
			__builtin_memset(&ep->faults, 0, sizeof(ep->faults));
		}
		ep->based = 0;
	}
	episode_child_io(ep, p);
	episode_child_cpu(ep, p);
	ep->exit_ts_ns = bpf_ktime_get_ns();
	/* Give back the child's slow-path reference whether or not the parent is still watched: a
	 * parent unwatched while its child lives would otherwise leave the child's line slow. */
	if (ep->tracked) {
		__u64 *live = live_forks_count();

		h = hot_of(pid);
		if (h)
			__sync_fetch_and_sub(&h->slow, 1);
		if (live)
			__sync_fetch_and_sub(live, 1);
	}
	if (tgt) {
		_Pragma("unroll") for (int i = 0; i < THPTRACE_MAX_ACTIVE; i++) {
			if (tgt->active[i] == pid)
				slot = i;
		}
	}
	if (tgt && slot >= 0) {
		/* A plain store: this thread alone closes the episode, and the slot holds our pid
		 * until then. */
		tgt->active[slot & (THPTRACE_MAX_ACTIVE - 1)] = 0;
	}
	e = event_reserve(EV_CHILD_EXIT, ptgid, pid);
	if (e) {
		e->child_pid = pid;
		__builtin_memcpy(&e->episode, ep, sizeof(*ep));
		bpf_ringbuf_submit(e, 0);
		bpf_map_delete_elem(&episodes, &pid);
	}
	/* When the record did not fit, the episode stays in the map, closed: userspace collects it
	 * (Tracer::reap_episodes), so that a lost record neither loses the episode nor keeps its
	 * entry for ever. */
}

static __always_inline int on_exit(struct task_struct *p)
{
	__u32 pid = BPF_CORE_READ(p, pid);
	__u32 tgid = BPF_CORE_READ(p, tgid);
	struct thptrace_event *e;

	/* Only the death of the whole thread group ends an episode or a target: signal->live is
	 * decremented before this tracepoint fires, in do_exit(). The group_dead argument that
	 * 6.16 added to the tracepoint is not used so that 6.1 loads the same program. */
	if (BPF_CORE_READ(p, signal, live.counter) != 0)
		return 0;
	close_episode(tgid, p);
	if (bpf_map_lookup_elem(&targets, &tgid)) {
		e = event_reserve(EV_TARGET_EXIT, tgid, pid);
		if (e)
			bpf_ringbuf_submit(e, 0);
	}
	return 0;
}

SEC("tp_btf/sched_process_exit")
int FORK_BPF_PROG(exit_btf, struct task_struct *p)
{
	return on_exit(p);
}

SEC("raw_tp/sched_process_exit")
int FORK_BPF_PROG(exit_raw, struct task_struct *p)
{
	return on_exit(p);
}

/* The syscall programs use no compare-and-exchange: one build serves every kernel. */
#ifndef THPTRACE_NO_ATOMICS
static __always_inline int on_sys_enter(long id)
{
	__u32 tgid = current_tgid();

	if (id != NR_clone && id != NR_clone3 && id != NR_fork && id != NR_vfork)
		return 0;
	if (bpf_map_lookup_elem(&targets, &tgid)) {
		__u64 key = start_key(START_FORK_CHILD, current_tid());

		/* A thread creation leaves no child here: forget an earlier fork's. */
		bpf_map_delete_elem(&starts, &key);
		start_record(START_CLONE);
	}
	return 0;
}

static __always_inline int on_sys_exit(long ret)
{
	struct thptrace_episode *ep;
	struct thptrace_event *e;
	__u64 begin;
	__u32 child = 0;

	/* Every system call of the machine returns through here while this pair is attached (only
	 * while a target has no libc fork() timing: Tracer::time_clone_syscalls). A thread of a
	 * process that is not watched leaves after one array read (its hot line), before start_take's
	 * hash lookup. Every target passes: it owns its line or has raised the line's slow count. */
	if (!maybe_watched(current_tgid()))
		return 0;
	begin = start_take(START_CLONE);
	if (!begin)
		return 0;
	ep = episode_of_fork_return(ret, &child);
	if (!ep)
		return 0;
	ep->clone_start_ns = begin;
	ep->clone_end_ns = bpf_ktime_get_ns();
	e = event_reserve(EV_FORK_RETURN, current_tgid(), current_tid());
	if (e) {
		e->child_pid = child;
		e->start_ns = begin;
		bpf_ringbuf_submit(e, 0);
	}
	return 0;
}

SEC("tp_btf/sys_enter")
int BPF_PROG(sys_enter_btf, struct pt_regs *regs, long id)
{
	return on_sys_enter(id);
}

SEC("raw_tp/sys_enter")
int BPF_PROG(sys_enter_raw, struct pt_regs *regs, long id)
{
	return on_sys_enter(id);
}

SEC("tp_btf/sys_exit")
int BPF_PROG(sys_exit_btf, struct pt_regs *regs, long ret)
{
	return on_sys_exit(ret);
}

SEC("raw_tp/sys_exit")
int BPF_PROG(sys_exit_raw, struct pt_regs *regs, long ret)
{
	return on_sys_exit(ret);
}
#endif /* !THPTRACE_NO_ATOMICS */
