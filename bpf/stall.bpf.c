// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Stall family: time a watched process (or its fork child) spends in direct compaction or direct
 * reclaim. Both tracepoint pairs fire in the allocating task's context; kcompactd and kswapd work
 * does not match a watched tgid and is ignored. */
#include "common.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

static __always_inline bool watched(__u32 tgid)
{
	return maybe_watched(tgid) &&
	       (bpf_map_lookup_elem(&targets, &tgid) || bpf_map_lookup_elem(&episodes, &tgid));
}

static __always_inline int stall_begin(enum start_kind kind)
{
	if (watched(current_tgid()))
		start_record(kind);
	return 0;
}

static __always_inline int stall_end(enum start_kind kind)
{
	__u64 begin = start_take(kind);
	__u32 tgid = current_tgid();
	struct thptrace_target *tgt;
	struct thptrace_event *e;
	bool compaction = kind == START_COMPACTION;
	__u64 ns;

	if (!begin)
		return 0;
	ns = bpf_ktime_get_ns() - begin;

	tgt = bpf_map_lookup_elem(&targets, &tgid);
	if (tgt) {
		__sync_fetch_and_add(compaction ? &tgt->compaction_stalls : &tgt->reclaim_stalls, 1);
		__sync_fetch_and_add(compaction ? &tgt->compaction_ns : &tgt->reclaim_ns, ns);
		for_each_active_episode(tgt, ep, {
			__sync_fetch_and_add(compaction ? &ep->compaction_stalls : &ep->reclaim_stalls, 1);
			__sync_fetch_and_add(compaction ? &ep->compaction_ns : &ep->reclaim_ns, ns);
		});
	}
	e = event_reserve(EV_STALL, tgid, current_tid());
	if (e) {
		e->start_ns = begin;
		e->value = compaction ? STALL_COMPACTION : STALL_RECLAIM;
		bpf_ringbuf_submit(e, 0);
	}
	return 0;
}

/* Only the arguments common to every kernel since 5.x are named; none is read. */
SEC("tp_btf/mm_compaction_begin")
int BPF_PROG(compaction_begin_btf)
{
	return stall_begin(START_COMPACTION);
}

SEC("raw_tp/mm_compaction_begin")
int BPF_PROG(compaction_begin_raw)
{
	return stall_begin(START_COMPACTION);
}

SEC("tp_btf/mm_compaction_end")
int BPF_PROG(compaction_end_btf)
{
	return stall_end(START_COMPACTION);
}

SEC("raw_tp/mm_compaction_end")
int BPF_PROG(compaction_end_raw)
{
	return stall_end(START_COMPACTION);
}

SEC("tp_btf/mm_vmscan_direct_reclaim_begin")
int BPF_PROG(reclaim_begin_btf)
{
	return stall_begin(START_RECLAIM);
}

SEC("raw_tp/mm_vmscan_direct_reclaim_begin")
int BPF_PROG(reclaim_begin_raw)
{
	return stall_begin(START_RECLAIM);
}

SEC("tp_btf/mm_vmscan_direct_reclaim_end")
int BPF_PROG(reclaim_end_btf)
{
	return stall_end(START_RECLAIM);
}

SEC("raw_tp/mm_vmscan_direct_reclaim_end")
int BPF_PROG(reclaim_end_raw)
{
	return stall_end(START_RECLAIM);
}
