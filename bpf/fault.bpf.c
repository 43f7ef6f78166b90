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

static __always_inline void add_latency(__u64 *hist, __u64 *total, __u64 *count, __u64 ns)
{
	__u32 slot = log2_slot(ns);

	__sync_fetch_and_add(&hist[slot & (THPTRACE_LAT_SLOTS - 1)], 1);
	__sync_fetch_and_add(total, ns);
	__sync_fetch_and_add(count, 1);
}

/* One write fault on a present page by `tgid`, counted in the hash maps (the slow path: fentry mode,
 * fork children, targets whose fast-path line another target owns). ns = handler time (0 when
 * unknown). */
static __always_inline void count_fault(__u32 tgid, __u64 ns, bool huge, bool split)
{
	struct thptrace_target *tgt = bpf_map_lookup_elem(&targets, &tgid);
	struct thptrace_episode *child;

	if (tgt) {
		if (!huge || !split)
			__sync_fetch_and_add(&tgt->cow_faults, 1);
		if (huge)
			__sync_fetch_and_add(&tgt->huge_cow_faults, 1);
		if (split)
			__sync_fetch_and_add(&tgt->thp_splits, 1);
		if (ns)
			add_latency(tgt->fault_lat, &tgt->fault_ns_total, &tgt->fault_ns_count, ns);
		for_each_active_episode(tgt, ep, {
			if (!huge || !split)
				__sync_fetch_and_add(&ep->cow_faults, 1);
			if (huge)
				__sync_fetch_and_add(&ep->huge_cow_faults, 1);
			if (split)
				__sync_fetch_and_add(&ep->thp_splits, 1);
			if (ns)
				add_latency(ep->fault_lat, &ep->fault_ns_total, &ep->fault_ns_count, ns);
		});
		return;
	}
	/* A fork child of a watched process: its own faults (writes to pages it shares with the parent). */
	child = bpf_map_lookup_elem(&episodes, &tgid);
	if (child && !child->exit_ts_ns && (!huge || !split)) {
		__sync_fetch_and_add(&child->child_cow_faults, 1);
		tgt = bpf_map_lookup_elem(&targets, &child->parent_tgid);
		if (tgt)
			__sync_fetch_and_add(&tgt->child_cow_faults, 1);
	}
}

/* ---- first choice: fentry/fexit ---- */

static __always_inline int wp_enter(enum start_kind kind)
{
	if (maybe_watched(current_tgid()))
		start_record(kind);
	return 0;
}

static __always_inline int wp_exit(enum start_kind kind, long ret)
{
	__u64 begin = start_take(kind);
	bool huge = kind == START_HUGE_WP_FAULT;
	bool split = huge && (ret & VM_FAULT_FALLBACK_BIT);
	__u32 tgid = current_tgid();
	struct thptrace_hot *h;
	struct thptrace_pcpu *p;
	__u64 ns;

	if (!begin)
		return 0;
	ns = bpf_ktime_get_ns() - begin;
	ns = ns ? ns : 1;
	h = hot_of(tgid);
	if (!h || h->tgid != tgid) {
		count_fault(tgid, ns, huge, split);
		return 0;
	}
	/* A line owner: this CPU's counters, whatever the number of threads faulting at once. */
	p = pcpu_of(h);
	if (!p)
		return 0;
	if (!split)
		__sync_fetch_and_add(&p->cow_faults, 1);
	if (huge)
		__sync_fetch_and_add(&p->huge_cow_faults, 1);
	if (split)
		__sync_fetch_and_add(&p->thp_splits, 1);
	add_latency(p->fault_lat, &p->fault_ns_total, &p->fault_ns_count, ns);
	return 0;
}

SEC("fentry/do_wp_page")
int BPF_PROG(wp_fentry, struct vm_fault *vmf)
{
	return wp_enter(START_WP_FAULT);
}

SEC("fexit/do_wp_page")
int BPF_PROG(wp_fexit, struct vm_fault *vmf, long ret)
{
	return wp_exit(START_WP_FAULT, ret);
}

SEC("fentry/do_huge_pmd_wp_page")
int BPF_PROG(huge_wp_fentry, struct vm_fault *vmf)
{
	return wp_enter(START_HUGE_WP_FAULT);
}

SEC("fexit/do_huge_pmd_wp_page")
int BPF_PROG(huge_wp_fexit, struct vm_fault *vmf, long ret)
{
	return wp_exit(START_HUGE_WP_FAULT, ret);
}

/* ---- fallback: the page_fault_user and page_fault_kernel tracepoints ---- */

/* Runs on every user page fault of the machine, so the common cases touch little memory: a process
 * that is not watched reads its hot line and leaves; a target that owns its line adds one to its
 * counter on this CPU (its live episodes are counted by difference, in the fork programs), with no
 * hash lookup and no cache line shared with the target's threads on other CPUs. The add is atomic
 * although the line is this CPU's: a tracepoint program can be preempted (it runs with migration,
 * not preemption, disabled on preemptible kernels), and another thread of the target on this CPU
 * could then add in between; a locked add on a line no other core holds costs a few cycles. */
static __always_inline int on_user_fault(unsigned long error_code)
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
		if (h->slow)
			count_fault(tgid, 0, false, false);
		return 0;
	}
	p = pcpu_of(h);
	if (p)
		__sync_fetch_and_add(&p->cow_faults, 1);
	return 0;
}

/* A kernel-mode fault counts when it hits a user address (the high half is the kernel's own: vmalloc,
 * the direct map) with the same error code. Kernel-mode faults are rare next to user ones, and a
 * fault that is not a write to a present user page leaves after two compares. */
static __always_inline int on_kernel_fault(unsigned long address, unsigned long error_code)
{
	if ((long)address < 0)
		return 0;
	return on_user_fault(error_code);
}

SEC("tp_btf/page_fault_user")
int BPF_PROG(fault_btf, unsigned long address, struct pt_regs *regs, unsigned long error_code)
{
	return on_user_fault(error_code);
}

SEC("raw_tp/page_fault_user")
int BPF_PROG(fault_raw, unsigned long address, struct pt_regs *regs, unsigned long error_code)
{
	return on_user_fault(error_code);
}

SEC("tp_btf/page_fault_kernel")
int BPF_PROG(kfault_btf, unsigned long address, struct pt_regs *regs, unsigned long error_code)
{
	return on_kernel_fault(address, error_code);
}

SEC("raw_tp/page_fault_kernel")
int BPF_PROG(kfault_raw, unsigned long address, struct pt_regs *regs, unsigned long error_code)
{
	return on_kernel_fault(address, error_code);
}

/* ---- huge page allocations (both modes): order-9 allocations by a watched process ---- */

static __always_inline int on_page_alloc(unsigned int order)
{
	__u32 tgid = current_tgid();
	struct thptrace_target *tgt;

	if (order != 9)
		return 0;
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
