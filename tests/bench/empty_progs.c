// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The floor a BPF program on a hook costs, for tests/bench/fentry_cost.sh and host_overhead.sh: loads
 * an empty program (r0 = 0; exit) on each hook named and attaches it, so that its run_time_ns per run
 * (kernel.bpf_stats_enabled) and the workload's time with it attached can be set against thptrace's
 * programs on the same hook, in the same run.
 *
 *   empty_progs HOOK...      HOOK: fentry:FUNC fexit:FUNC tp_btf:TRACEPOINT raw_tp:TRACEPOINT
 *
 * Prints "attached" once every program is attached. Then each line "stats" on stdin prints one line
 * per program, "HOOK run_cnt run_time_ns"; end of input detaches and exits. Exit 2 on bad usage, 1
 * when a program does not load or attach. */
#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_HOOKS 16

static const struct bpf_insn empty[] = {
	{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 0 },
	{ .code = BPF_JMP | BPF_EXIT },
};

/* Loads and attaches the empty program for `hook`; returns its fd (the link is left open). */
static int attach_empty(const char *hook, const struct btf *vmlinux)
{
	const char *name = strchr(hook, ':');
	enum bpf_attach_type type;
	const char *btf_prefix = "";
	__u32 btf_kind = BTF_KIND_FUNC;
	char btf_name[256];
	int fd, id;

	if (!name || !name[1])
		return -EINVAL;
	name++;
	if (strncmp(hook, "raw_tp:", 7) == 0) {
		fd = bpf_prog_load(BPF_PROG_TYPE_RAW_TRACEPOINT, "empty_raw_tp", "GPL", empty, 2, NULL);
		if (fd < 0 || bpf_raw_tracepoint_open(name, fd) < 0)
			return -errno;
		return fd;
	}
	if (strncmp(hook, "fentry:", 7) == 0) {
		type = BPF_TRACE_FENTRY;
	} else if (strncmp(hook, "fexit:", 6) == 0) {
		type = BPF_TRACE_FEXIT;
	} else if (strncmp(hook, "tp_btf:", 7) == 0) {
		type = BPF_TRACE_RAW_TP;
		btf_prefix = "btf_trace_";
		btf_kind = BTF_KIND_TYPEDEF;
	} else {
		return -EINVAL;
	}
	snprintf(btf_name, sizeof(btf_name), "%s%s", btf_prefix, name);
	id = btf__find_by_name_kind(vmlinux, btf_name, btf_kind);
	if (id <= 0)
		return -ENOENT;
	LIBBPF_OPTS(bpf_prog_load_opts, opts, .expected_attach_type = type, .attach_btf_id = (__u32)id);
	fd = bpf_prog_load(BPF_PROG_TYPE_TRACING,
			   type == BPF_TRACE_FENTRY ? "empty_fentry" : type == BPF_TRACE_FEXIT ? "empty_fexit" : "empty_tp_btf",
			   "GPL", empty, 2, &opts);
	if (fd < 0 || bpf_raw_tracepoint_open(NULL, fd) < 0)
		return -errno;
	return fd;
}

int main(int argc, char **argv)
{
	struct btf *vmlinux;
	int fds[MAX_HOOKS];
	char line[64];

	if (argc < 2 || argc - 1 > MAX_HOOKS) {
		fprintf(stderr, "usage: %s HOOK... (fentry:FUNC fexit:FUNC tp_btf:TP raw_tp:TP, at most %d)\n", argv[0],
			MAX_HOOKS);
		return 2;
	}
	vmlinux = btf__load_vmlinux_btf();
	if (libbpf_get_error(vmlinux)) {
		fprintf(stderr, "%s: cannot read the kernel's BTF\n", argv[0]);
		return 1;
	}
	for (int i = 1; i < argc; i++) {
		fds[i - 1] = attach_empty(argv[i], vmlinux);
		if (fds[i - 1] == -EINVAL) {
			fprintf(stderr, "%s: bad hook %s\n", argv[0], argv[i]);
			return 2;
		}
		if (fds[i - 1] < 0) {
			fprintf(stderr, "%s: cannot load or attach an empty program on %s: %s\n", argv[0], argv[i],
				strerror(-fds[i - 1]));
			return 1;
		}
	}
	printf("attached\n");
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin)) {
		if (strncmp(line, "stats", 5) != 0)
			continue;
		for (int i = 1; i < argc; i++) {
			struct bpf_prog_info info = {};
			__u32 len = sizeof(info);

			if (bpf_obj_get_info_by_fd(fds[i - 1], &info, &len))
				memset(&info, 0, sizeof(info));
			printf("%s %llu %llu\n", argv[i], (unsigned long long)info.run_cnt,
			       (unsigned long long)info.run_time_ns);
		}
		fflush(stdout);
	}
	btf__free(vmlinux);
	return 0;
}
