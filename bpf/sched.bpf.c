// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Sched family: while a watched process's main thread is runnable and waiting for a CPU, what holds
 * the CPU whose run queue it waits in: its own fork child, another thread of its own, another
 * process, or nothing (an idle CPU waking up to run it). A wait starts when the thread is woken or
 * preempted; each context switch on its CPU charges the time since the last one to the task that
 * was switched out; the switch that runs it ends the wait. Counted in the kernel (struct
 * thptrace_cpu_wait, in the target and each live episode); nothing travels the ring buffer.
 *
 * sched_switch fires at every context switch of the machine, sched_wakeup at every wake-up: at 180 to
 * 260 ns a run here with everything they do, they are attached only while a watched process has a
 * fork child (Tracer::poll, on the fork's record), and return at once while none has (live_forks).
 * Then a switch costs, on a CPU where no watched main thread waits, the reads of the two tasks' pids
 * (plain loads under tp_btf; bpf_probe_read_kernel under raw_tp) and of their hot lines. */
#include "common.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* The tgid whose main thread waits in each CPU's run queue, 0 for none (one per CPU: a second
 * watched main thread queued on the same CPU at once is charged when it runs, to what ran just
 * before it). Written from any CPU: a wake-up runs on the waker's. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, THPTRACE_MAX_CPUS);
	__type(key, __u32);
	__type(value, __u32);
} cpu_waiter SEC(".maps");

/* Kernels before 5.14 name the task's state `state`, and before 5.16 keep its CPU in the task, not in
 * its thread_info (x86). */
struct task_struct___pre514 {
	long state;
} __attribute__((preserve_access_index));
struct task_struct___pre516 {
	unsigned int cpu;
} __attribute__((preserve_access_index));

static __always_inline __u32 task_cpu_of(struct task_struct *t)
{
	struct task_struct___pre516 *old = (void *)t;

	if (bpf_core_field_exists(old->cpu))
		return BPF_CORE_READ(old, cpu);
	return BPF_CORE_READ(t, thread_info.cpu);
}

static __always_inline bool task_runnable(struct task_struct *t)
{
	struct task_struct___pre514 *old = (void *)t;

	if (bpf_core_field_exists(old->state))
		return BPF_CORE_READ(old, state) == 0;
	return BPF_CORE_READ(t, __state) == 0;
}

/* A task's pid and tgid, read once a program run: plain loads where the program's arguments are
 * typed (tp_btf), else bpf_probe_read_kernel. */
struct task_ids {
	__u32 pid;
	__u32 tgid;
};
#define TASK_ID(btf, t, field) ((btf) ? (t)->field : BPF_CORE_READ(t, field))
#define TASK_IDS(btf, t) ((struct task_ids){ TASK_ID(btf, t, pid), TASK_ID(btf, t, tgid) })

/* Whether any tracked fork child lives: the programs have nothing to do otherwise. */
static __always_inline bool forks_live(void)
{
	__u64 *live = live_forks_count();

	return live && *live;
}

/* The target whose main thread the task t is, or NULL. */
static __always_inline struct thptrace_target *main_of(struct task_ids t)
{
	if (t.pid != t.tgid || !t.pid || !maybe_watched(t.tgid))
		return NULL;
	return bpf_map_lookup_elem(&targets, &t.tgid);
}

/* What the task t is to the target tgt (of process tgid): its fork child, one of its threads, or
 * another. */
static __always_inline enum cpu_wait_holder holder_of(struct task_ids t, struct thptrace_target *tgt, __u32 tgid)
{
	if (!t.pid)
		return HELD_BY_IDLE;
	if (t.tgid == tgid)
		return HELD_BY_THREAD;
	_Pragma("unroll") for (int i = 0; i < THPTRACE_MAX_ACTIVE; i++) {
		if (tgt->active[i] && tgt->active[i] == t.tgid)
			return HELD_BY_CHILD;
	}
	return HELD_BY_OTHER;
}

/* The main thread of tgt (tgid) starts to wait in cpu's run queue. */
static __always_inline void wait_begin(struct thptrace_target *tgt, __u32 tgid, __u32 cpu, __u64 now)
{
	__u32 *slot;

	if (cpu >= THPTRACE_MAX_CPUS)
		return;
	slot = bpf_map_lookup_elem(&cpu_waiter, &cpu);
	if (!slot)
		return;
	tgt->main_wait_cpu = cpu;
	tgt->main_wait_charged_ns = now;
	*slot = tgid;
}

static __always_inline int on_switch(bool preempt, struct task_struct *prev, struct task_struct *next, bool btf)
{
	__u32 cpu = bpf_get_smp_processor_id();
	struct thptrace_target *tgt;
	struct task_ids out, in;
	__u32 *slot, tgid;
	__u64 now = 0;

	if (!forks_live())
		return 0;
	out = TASK_IDS(btf, prev);
	in = TASK_IDS(btf, next);

	/* A main thread that waits on this CPU: charge what ran here since the last switch. */
	slot = bpf_map_lookup_elem(&cpu_waiter, &cpu);
	if (slot && *slot) {
		tgid = *slot;
		tgt = bpf_map_lookup_elem(&targets, &tgid);
		if (!tgt || !tgt->main_wait_charged_ns || tgt->main_wait_cpu != cpu) {
			*slot = 0; /* it ran elsewhere, or is no longer watched */
		} else if (out.pid == tgid) {
			tgt->main_wait_charged_ns = 0; /* it was running, not waiting */
			*slot = 0;
		} else {
			now = bpf_ktime_get_ns();
			cpu_wait_charge(tgt, holder_of(out, tgt, tgid), now);
		}
	}

	/* The main thread runs: its wait, wherever it began, ends here, charged up to now to what ran
	 * here last (a thread pulled from another CPU's queue is charged to this one's). */
	tgt = main_of(in);
	if (tgt && tgt->main_wait_charged_ns) {
		if (!now)
			now = bpf_ktime_get_ns();
		cpu_wait_charge(tgt, holder_of(out, tgt, in.tgid), now);
		tgt->main_wait_charged_ns = 0;
		if (slot && *slot == in.tgid)
			*slot = 0;
		if (tgt->main_wait_cpu != cpu) {
			__u32 was = tgt->main_wait_cpu;
			__u32 *other = was < THPTRACE_MAX_CPUS ? bpf_map_lookup_elem(&cpu_waiter, &was) : NULL;

			if (other && *other == in.tgid)
				*other = 0;
		}
	}

	/* The main thread leaves the CPU still runnable (preempted, or yielding): it waits here. */
	tgt = main_of(out);
	if (tgt && (preempt || task_runnable(prev)))
		wait_begin(tgt, out.tgid, cpu, now ? now : bpf_ktime_get_ns());
	return 0;
}

static __always_inline int on_wakeup(struct task_struct *p, bool btf)
{
	struct thptrace_target *tgt;
	struct task_ids id;

	if (!forks_live())
		return 0;
	/* A wake-up of a thread still on its CPU (woken before it slept) or already queued (preempted,
	 * then woken) starts no wait. */
	id = TASK_IDS(btf, p);
	tgt = main_of(id);
	if (tgt && !tgt->main_wait_charged_ns && !BPF_CORE_READ(p, on_cpu))
		wait_begin(tgt, id.tgid, task_cpu_of(p), bpf_ktime_get_ns());
	return 0;
}

/* sched_switch's first three arguments are the same on every kernel since 4.x (6.0 added prev_state
 * after them, which the task's own state gives). */
SEC("tp_btf/sched_switch")
int BPF_PROG(switch_btf, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	return on_switch(preempt, prev, next, true);
}

SEC("raw_tp/sched_switch")
int BPF_PROG(switch_raw, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	return on_switch(preempt, prev, next, false);
}

/* Fires once the woken task is on its CPU's run queue, with that CPU as its task_cpu. */
SEC("tp_btf/sched_wakeup")
int BPF_PROG(wakeup_btf, struct task_struct *p)
{
	return on_wakeup(p, true);
}

SEC("raw_tp/sched_wakeup")
int BPF_PROG(wakeup_raw, struct task_struct *p)
{
	return on_wakeup(p, false);
}
