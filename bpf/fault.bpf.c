// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* COW fault family: counts write faults on present pages taken by a watched process (and by its
 * fork children) and attributes them, in the kernel, to every episode whose child is alive.
 *
 * First choice: fentry/fexit on do_wp_page and do_huge_pmd_wp_page, which gives per-fault latency
 * and tells huge-PMD faults from 4 KiB ones. Fallback: the x86 page_fault_user tracepoint filtered on
 * error_code PROT|WRITE (present page, write access), as tp_btf or raw_tp, plus its twin
 * page_fault_kernel for the copies the kernel makes on the process's behalf: read()/recv() into a
 * buffer shared with a fork child faults in kernel mode (copy_to_user), which x86 reports there and
 * not on page_fault_user (arch/x86/mm/fault.c, trace_page_fault_entries). do_wp_page sees both, so
 * with both tracepoints the fallback counts what fentry counts.
 *
 * Since Linux 5.8 (commit 3917c80280c9, "thp: change CoW semantics for anon-THP") a write to a
 * shared huge page splits the PMD and COWs 4 KiB: do_huge_pmd_wp_page returns VM_FAULT_FALLBACK and
 * the fault is retried at pte level through do_wp_page. We count that as one fault and one split. */
#include "common.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define X86_PF_PROT 0x1
#define X86_PF_WRITE 0x2
#define VM_FAULT_FALLBACK_BIT 0x800 /* VM_FAULT_FALLBACK, stable since 3.8 */

/* One write fault on a present page by `tgid`, counted in the hash maps (the slow path: fork
 * children, targets whose fast-path line another target owns). ns = handler time (0 when unknown).
 * Returns whether the fault is a copy by a watched process while one of its fork children lives: one
 * for the caller's sampler (sample_copy), which knows where the fault's address is. A huge fault that
 * falls back (split) is not: it is retried at pte level, where it is counted and may be sampled. */
static __always_inline bool count_fault(__u32 tgid, __u64 ns, bool huge, bool split)
{
	struct thptrace_target *tgt = bpf_map_lookup_elem(&targets, &tgid);
	struct thptrace_episode *child;

	if (tgt) {
		bool live = false;

		faults_add(&tgt->faults, huge, split, ns);
		for_each_active_episode(tgt, ep, {
			faults_add(&ep->faults, huge, split, ns);
			live = true;
		});
		return live && !split;
	}
	/* A fork child of a watched process: its own faults (writes to pages it shares with the parent). */
	child = bpf_map_lookup_elem(&episodes, &tgid);
	if (child && !child->exit_ts_ns && !split) {
		__sync_fetch_and_add(&child->child_cow_faults, 1);
		tgt = bpf_map_lookup_elem(&targets, &child->parent_tgid);
		if (tgt)
			__sync_fetch_and_add(&tgt->child_cow_faults, 1);
	}
	return false;
}

/* ---- first choice: fentry/fexit ---- */

/* The start of the wp fault in flight on a thread, one slot per handler (do_huge_pmd_wp_page returns
 * before the pte-level retry enters do_wp_page, but a slot each costs nothing). Per-task storage:
 * the entry hangs off the task_struct, so taking it is a pointer walk, where the starts hash cost an
 * update, a lookup and a delete per fault. Tracing programs may use task storage since Linux 5.13
 * (commit a10787e6d58c, "bpf: Enable task local storage for tracing programs"; the map type itself
 * is 5.11, for LSM programs only); before that the *_compat programs below keep the start in the
 * starts hash, and userspace does not create this map (bpf_map__set_autocreate): a kernel before
 * 5.11 would refuse it. */
struct wp_start {
	__u64 wp_ns;   /* do_wp_page */
	__u64 huge_ns; /* do_huge_pmd_wp_page */
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct wp_start);
} wp_starts SEC(".maps");

/* Whether `tgid` passes the fault programs' first filter: it owns its hot line (*owner set), or a
 * watched process shares the line (its slow count), when the hash maps decide. Every other process
 * of the machine leaves here, after one array read. */
static __always_inline struct thptrace_hot *watched_line(__u32 tgid, bool *owner)
{
	struct thptrace_hot *h = hot_of(tgid);

	if (!h)
		return NULL;
	*owner = h->tgid == tgid;
	return *owner || h->slow ? h : NULL;
}

/* The faulting user address of a wp fault, read only when a sample is due. vmf->real_address is the
 * address as faulted, since Linux 5.17 (commit 824ddc601adc, "userfaultfd: provide unmasked address on
 * page-fault"); before it, vmf->address is the only one, rounded down to its page, which is as good
 * for naming the mapping. CO-RE: newer kernels keep both in a const anonymous struct inside struct
 * vm_fault (5.10 has them directly in it); libbpf's field matching looks through anonymous members. */
static __always_inline __u64 wp_address(struct vm_fault *vmf)
{
	if (bpf_core_field_exists(vmf->real_address))
		return BPF_CORE_READ(vmf, real_address);
	return BPF_CORE_READ(vmf, address);
}

/* One wp fault by `tgid`, whose line passed the filter, that took ns in the handler (0 when its
 * start was not seen: counted, not timed). A line owner counts on this CPU's counters, whatever the
 * number of threads faulting at once; anyone else in the hash maps. Sampled as the tracepoint path
 * samples (on_user_fault, count_fault): the copies counted (not a huge fault that falls back to pte
 * level, where it is retried and counted) while a child lives, with the owner's count on this CPU as
 * the tick on the fast path. ctx: the fexit program's, for the user stack (bpf_get_stack is allowed
 * in fentry/fexit programs since they exist, Linux 5.5). */
static __always_inline void wp_count(void *ctx, struct vm_fault *vmf, __u32 tgid, struct thptrace_hot *h,
				     bool owner, bool huge, bool split, __u64 ns)
{
	struct thptrace_pcpu *p;

	if (!owner) {
		if (count_fault(tgid, ns, huge, split))
			sample_copy(ctx, tgid, wp_address(vmf), true, NULL);
		return;
	}
	p = pcpu_of(h);
	if (!p)
		return;
	faults_add(&p->faults, huge, split, ns);
	if (!split && sample_due(p->faults.cow, &p->sample_at) && h->live)
		sample_send(ctx, tgid, wp_address(vmf), true, NULL);
}

static __always_inline int wp_enter(bool huge)
{
	struct wp_start *s;
	bool owner;

	if (!watched_line(current_tgid(), &owner))
		return 0;
	s = bpf_task_storage_get(&wp_starts, bpf_get_current_task_btf(), 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!s)
		return 0;
	if (huge)
		s->huge_ns = bpf_ktime_get_ns();
	else
		s->wp_ns = bpf_ktime_get_ns();
	return 0;
}

/* The fault is counted whether or not its start was seen: the count never depends on the start
 * (a thread whose storage could not be created, a target watched while the fault was in flight),
 * only the latency does. */
static __always_inline int wp_exit(void *ctx, struct vm_fault *vmf, bool huge, long ret)
{
	__u32 tgid = current_tgid();
	bool split = huge && (ret & VM_FAULT_FALLBACK_BIT);
	struct thptrace_hot *h;
	struct wp_start *s;
	__u64 begin = 0;
	bool owner;

	h = watched_line(tgid, &owner);
	if (!h)
		return 0;
	/* No F_CREATE: the entry wp_enter made. Since 5.13 (commit bc235cdb423a, "bpf: Prevent
	 * deadlock from recursive bpf_task_storage_[get|delete]") the helper returns NULL while
	 * another task-storage call is in progress on this CPU; the fault is then counted untimed. */
	s = bpf_task_storage_get(&wp_starts, bpf_get_current_task_btf(), 0, 0);
	if (s) {
		begin = huge ? s->huge_ns : s->wp_ns;
		if (huge)
			s->huge_ns = 0;
		else
			s->wp_ns = 0;
	}
	wp_count(ctx, vmf, tgid, h, owner, huge, split, begin ? (bpf_ktime_get_ns() - begin) | 1 : 0);
	return 0;
}

SEC("fentry/do_wp_page")
int BPF_PROG(wp_fentry, struct vm_fault *vmf)
{
	return wp_enter(false);
}

SEC("fexit/do_wp_page")
int BPF_PROG(wp_fexit, struct vm_fault *vmf, long ret)
{
	return wp_exit(ctx, vmf, false, ret);
}

SEC("fentry/do_huge_pmd_wp_page")
int BPF_PROG(huge_wp_fentry, struct vm_fault *vmf)
{
	return wp_enter(true);
}

SEC("fexit/do_huge_pmd_wp_page")
int BPF_PROG(huge_wp_fexit, struct vm_fault *vmf, long ret)
{
	return wp_exit(ctx, vmf, true, ret);
}

/* The same without task storage (Linux 5.5-5.11): the start in the starts hash, keyed by kind and
 * thread. */
static __always_inline int wp_enter_compat(enum start_kind kind)
{
	bool owner;

	if (watched_line(current_tgid(), &owner))
		start_record(kind);
	return 0;
}

static __always_inline int wp_exit_compat(void *ctx, struct vm_fault *vmf, enum start_kind kind, long ret)
{
	bool huge = kind == START_HUGE_WP_FAULT;
	bool split = huge && (ret & VM_FAULT_FALLBACK_BIT);
	__u32 tgid = current_tgid();
	struct thptrace_hot *h;
	__u64 begin;
	bool owner;

	h = watched_line(tgid, &owner);
	if (!h)
		return 0;
	begin = start_take(kind);
	wp_count(ctx, vmf, tgid, h, owner, huge, split, begin ? (bpf_ktime_get_ns() - begin) | 1 : 0);
	return 0;
}

SEC("fentry/do_wp_page")
int BPF_PROG(wp_fentry_compat, struct vm_fault *vmf)
{
	return wp_enter_compat(START_WP_FAULT);
}

SEC("fexit/do_wp_page")
int BPF_PROG(wp_fexit_compat, struct vm_fault *vmf, long ret)
{
	return wp_exit_compat(ctx, vmf, START_WP_FAULT, ret);
}

SEC("fentry/do_huge_pmd_wp_page")
int BPF_PROG(huge_wp_fentry_compat, struct vm_fault *vmf)
{
	return wp_enter_compat(START_HUGE_WP_FAULT);
}

SEC("fexit/do_huge_pmd_wp_page")
int BPF_PROG(huge_wp_fexit_compat, struct vm_fault *vmf, long ret)
{
	return wp_exit_compat(ctx, vmf, START_HUGE_WP_FAULT, ret);
}

/* ---- fallback: the page_fault_user and page_fault_kernel tracepoints ---- */

/* Runs on every user page fault of the machine, so the common cases touch little memory: a process
 * that is not watched reads its hot line and leaves; a target that owns its line adds one to its
 * counter on this CPU (its live episodes are counted by difference, in the fork programs), with no
 * hash lookup and no cache line shared with the target's threads on other CPUs. The add is atomic
 * although the line is this CPU's: a tracepoint program can be preempted (it runs with migration,
 * not preemption, disabled on preemptible kernels), and another thread of the target on this CPU
 * could then add in between; a locked add on a line no other core holds costs a few cycles. */
static __always_inline int on_user_fault(void *ctx, unsigned long address, unsigned long error_code,
					 bool btf, struct pt_regs *uregs)
{
	struct thptrace_pcpu *p;
	struct thptrace_hot *h;
	__u32 tgid;

	if ((error_code & (X86_PF_PROT | X86_PF_WRITE)) != (X86_PF_PROT | X86_PF_WRITE))
		return 0;
	tgid = current_tgid();
	h = hot_of(tgid);
	if (!h)
		return 0;
	if (h->tgid != tgid) {
		if (h->slow && count_fault(tgid, 0, false, false))
			sample_copy(ctx, tgid, address, btf, uregs);
		return 0;
	}
	p = pcpu_of(h);
	if (!p)
		return 0;
	faults_add(&p->faults, false, false, 0);
	/* The line this fault has read already says whether a child lives; this CPU's count of the
	 * owner's faults, on a line only this CPU writes, is the sampler's tick. */
	if (sample_due(p->faults.cow, &p->sample_at) && h->live)
		sample_send(ctx, tgid, address, btf, uregs);
	return 0;
}

/* A kernel-mode fault counts when it hits a user address (the high half is the kernel's own: vmalloc,
 * the direct map) with the same error code. Kernel-mode faults are rare next to user ones, and a
 * fault that is not a write to a present user page leaves after two compares. */
static __always_inline int on_kernel_fault(void *ctx, unsigned long address,
					   unsigned long error_code, bool btf)
{
	if ((long)address < 0)
		return 0;
	return on_user_fault(ctx, address, error_code, btf, NULL);
}

SEC("tp_btf/page_fault_user")
int BPF_PROG(fault_btf, unsigned long address, struct pt_regs *regs, unsigned long error_code)
{
	return on_user_fault(ctx, address, error_code, true, regs);
}

SEC("raw_tp/page_fault_user")
int BPF_PROG(fault_raw, unsigned long address, struct pt_regs *regs, unsigned long error_code)
{
	return on_user_fault(ctx, address, error_code, false, regs);
}

SEC("tp_btf/page_fault_kernel")
int BPF_PROG(kfault_btf, unsigned long address, struct pt_regs *regs, unsigned long error_code)
{
	return on_kernel_fault(ctx, address, error_code, true);
}

SEC("raw_tp/page_fault_kernel")
int BPF_PROG(kfault_raw, unsigned long address, struct pt_regs *regs, unsigned long error_code)
{
	return on_kernel_fault(ctx, address, error_code, false);
}

/* ---- huge page allocations (both modes): order-9 allocations by a watched process ---- */

/* Runs on every page allocation of the machine while attached (a COW fault's copy, a first touch):
 * the order is compared before the pid helper is called (a helper call is not moved past the
 * compare by the compiler, which cannot know it has no side effect). */
static __always_inline int on_page_alloc(unsigned int order)
{
	struct thptrace_target *tgt;
	__u32 tgid;

	if (order != 9)
		return 0;
	tgid = current_tgid();
	tgt = bpf_map_lookup_elem(&targets, &tgid);
	if (!tgt)
		return 0;
	__sync_fetch_and_add(&tgt->huge_allocs, 1);
	for_each_active_episode(tgt, ep, { __sync_fetch_and_add(&ep->huge_allocs, 1); });
	return 0;
}

SEC("tp_btf/mm_page_alloc")
int BPF_PROG(page_alloc_btf, struct page *page, unsigned int order)
{
	return on_page_alloc(order);
}

SEC("raw_tp/mm_page_alloc")
int BPF_PROG(page_alloc_raw, struct page *page, unsigned int order)
{
	return on_page_alloc(order);
}
