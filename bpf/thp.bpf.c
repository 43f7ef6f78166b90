// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* THP family: khugepaged scans and collapses of a watched process's memory. These run in
 * khugepaged's context, so the process is found through the mm it works on (mm->owner, which
 * CONFIG_MEMCG kernels keep; without it the family reports nothing rather than guessing). */
#include "common.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define SCAN_SUCCEED 1 /* enum scan_result in mm/khugepaged.c */

static __always_inline struct thptrace_target *target_of_mm(struct mm_struct *mm, __u32 *tgid)
{
	struct task_struct *owner;

	if (!bpf_core_field_exists(mm->owner))
		return NULL;
	owner = BPF_CORE_READ(mm, owner);
	if (!owner)
		return NULL;
	*tgid = BPF_CORE_READ(owner, tgid);
	return bpf_map_lookup_elem(&targets, tgid);
}

static __always_inline int on_khugepaged(struct mm_struct *mm, int status, bool collapse)
{
	struct thptrace_target *tgt;
	struct thptrace_event *e;
	__u32 tgid = 0;

	tgt = target_of_mm(mm, &tgid);
	if (!tgt)
		return 0;
	if (!collapse) {
		__sync_fetch_and_add(&tgt->khugepaged_scans, 1);
		return 0;
	}
	if (status == SCAN_SUCCEED)
		__sync_fetch_and_add(&tgt->thp_collapses, 1);
	e = event_reserve(EV_COLLAPSE, tgid, current_tid());
	if (e) {
		e->value = status == SCAN_SUCCEED;
		e->value2 = 1;
		bpf_ringbuf_submit(e, 0);
	}
	return 0;
}

/* mm_khugepaged_scan_pmd's second argument became a folio in 6.5; only mm is read. */
SEC("tp_btf/mm_khugepaged_scan_pmd")
int BPF_PROG(khugepaged_scan_btf, struct mm_struct *mm)
{
	return on_khugepaged(mm, 0, false);
}

SEC("raw_tp/mm_khugepaged_scan_pmd")
int BPF_PROG(khugepaged_scan_raw, struct mm_struct *mm)
{
	return on_khugepaged(mm, 0, false);
}

SEC("tp_btf/mm_collapse_huge_page")
int BPF_PROG(collapse_btf, struct mm_struct *mm, int isolated, int status)
{
	return on_khugepaged(mm, status, true);
}

SEC("raw_tp/mm_collapse_huge_page")
int BPF_PROG(collapse_raw, struct mm_struct *mm, int isolated, int status)
{
	return on_khugepaged(mm, status, true);
}
