// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Redis family: uprobes on the redis-server functions that lead to a fork mark the calling thread
 * while they run, so the fork program can name the fork's reason exactly (see reason_from_ctx in
 * fork.bpf.c). Attached once per binary by userspace, for every process running it, each only where
 * the binary gives it (Redis 7.2+ and Valkey build with LTO and may inline them):
 * userspace/tracer/entry_points.cpp. */
#include "common.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* src/server.h, the same in Redis 6.0+ and Valkey */
#define CHILD_TYPE_RDB 1
#define CHILD_TYPE_AOF 2
#define CHILD_TYPE_LDB 3
#define CHILD_TYPE_MODULE 4
/* SLAVE_REQ_RDB_CHANNEL (Redis 8) and REPLICA_REQ_RDB_CHANNEL (Valkey 8): (1 << 2) in both */
#define REQ_RDB_CHANNEL 4

static __always_inline int ctx_set(__u32 bit)
{
	__u32 tid = current_tid(), tgid = current_tgid();
	__u32 *cur;
	__u32 v = bit;

	/* Attached for every process running the binary: only watched ones are marked. */
	if (!bpf_map_lookup_elem(&targets, &tgid))
		return 0;
	cur = bpf_map_lookup_elem(&redis_ctx, &tid);
	if (cur)
		v |= *cur;
	bpf_map_update_elem(&redis_ctx, &tid, &v, BPF_ANY);
	return 0;
}

static __always_inline int ctx_clear(__u32 bit)
{
	__u32 tid = current_tid();
	__u32 *cur = bpf_map_lookup_elem(&redis_ctx, &tid);
	__u32 v;

	if (!cur)
		return 0;
	v = *cur & ~bit;
	if (v)
		bpf_map_update_elem(&redis_ctx, &tid, &v, BPF_ANY);
	else
		bpf_map_delete_elem(&redis_ctx, &tid);
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(rdb_bgsave_enter) { return ctx_set(CTX_RDB_BGSAVE); }
SEC("uretprobe")
int BPF_KRETPROBE(rdb_bgsave_exit) { return ctx_clear(CTX_RDB_BGSAVE); }

/* rdbSaveToSlavesSockets(int req, rdbSaveInfo *rsi) */
SEC("uprobe")
int BPF_KPROBE(rdb_sockets_enter, int req)
{
	return ctx_set(CTX_RDB_SOCKETS | ((req & REQ_RDB_CHANNEL) ? CTX_RDB_CHANNEL : 0));
}
SEC("uretprobe")
int BPF_KRETPROBE(rdb_sockets_exit) { return ctx_clear(CTX_RDB_SOCKETS | CTX_RDB_CHANNEL); }

SEC("uprobe")
int BPF_KPROBE(aof_rewrite_enter) { return ctx_set(CTX_AOF_REWRITE); }
SEC("uretprobe")
int BPF_KRETPROBE(aof_rewrite_exit) { return ctx_clear(CTX_AOF_REWRITE); }

/* startBgsaveForReplication(int mincapa, int req) */
SEC("uprobe")
int BPF_KPROBE(repl_bgsave_enter, int mincapa, int req)
{
	return ctx_set(CTX_REPLICATION | ((req & REQ_RDB_CHANNEL) ? CTX_RDB_CHANNEL : 0));
}
SEC("uretprobe")
int BPF_KRETPROBE(repl_bgsave_exit) { return ctx_clear(CTX_REPLICATION | CTX_RDB_CHANNEL); }

/* redisFork(int purpose) / serverFork(int purpose): every fork path goes through it. */
SEC("uprobe")
int BPF_KPROBE(redis_fork_enter, int purpose)
{
	switch (purpose) {
	case CHILD_TYPE_RDB: return ctx_set(CTX_FORK_RDB);
	case CHILD_TYPE_AOF: return ctx_set(CTX_FORK_AOF);
	case CHILD_TYPE_LDB: return ctx_set(CTX_FORK_LDB);
	case CHILD_TYPE_MODULE: return ctx_set(CTX_MODULE_FORK);
	default: return 0;
	}
}
SEC("uretprobe")
int BPF_KRETPROBE(redis_fork_exit)
{
	return ctx_clear(CTX_MODULE_FORK | CTX_FORK_RDB | CTX_FORK_AOF | CTX_FORK_LDB);
}

/* libc's fork() in any watched process: the same span Redis times for latest_fork_usec (prefork
 * handlers such as jemalloc's, the clone syscall, and the parent's postfork handlers). */
SEC("uprobe")
int BPF_KPROBE(libc_fork_enter)
{
	__u32 tgid = current_tgid();

	if (bpf_map_lookup_elem(&targets, &tgid))
		start_record(START_LIBC_FORK);
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(libc_fork_exit, long ret)
{
	__u64 begin = start_take(START_LIBC_FORK);
	struct thptrace_episode *ep;
	__u32 child = 0;

	if (!begin)
		return 0;
	ep = episode_of_fork_return(ret, &child);
	if (ep)
		ep->libc_fork_ns = bpf_ktime_get_ns() - begin;
	start_take(START_FORK_CHILD);
	return 0;
}
