// SPDX-License-Identifier: Apache-2.0
#pragma once
// The BPF/userspace ABI (bpf/thptrace.h) seen from C++, with its layout pinned: a change on one side
// that the other did not follow fails the build here rather than corrupting counters at run time.

#include <cstddef>
#include "common/user_context.h"

#include "../../bpf/thptrace.h"

static_assert(sizeof(thptrace_faults) == 8 * 5 + 8 * THPTRACE_LAT_SLOTS, "fault counters layout");
static_assert(sizeof(thptrace_cpu_wait) == 8 * 4, "CPU wait layout");
static_assert(sizeof(thptrace_episode) == 24 + 8 * 15 + sizeof(thptrace_cpu_wait) + sizeof(thptrace_faults),
              "episode layout");
static_assert(offsetof(thptrace_episode, fork_ts_ns) == 24, "episode layout");
static_assert(offsetof(thptrace_episode, faults) == 24 + 8 * 15 + sizeof(thptrace_cpu_wait), "episode layout");
static_assert(sizeof(thptrace_target) ==
                  4 * THPTRACE_MAX_ACTIVE + 8 * 9 + sizeof(thptrace_cpu_wait) + 16 + sizeof(thptrace_faults),
              "target layout");
static_assert(offsetof(thptrace_event, episode) == 48, "event layout");
static_assert(offsetof(thptrace_event, episode) == THPTRACE_EVENT_HEAD_BYTES, "event head");
static_assert(sizeof(thptrace_event) == 48 + sizeof(thptrace_episode), "event layout");
static_assert(sizeof(thptrace_hot) == 64, "hot line layout: one cache line");
static_assert(sizeof(thptrace_pcpu) % 64 == 0, "per-CPU counters: whole cache lines");
static_assert(offsetof(thptrace_pcpu, faults) == 8, "per-CPU counters layout: the tick and its count in one line");
static_assert((THPTRACE_HOT_LINES & (THPTRACE_HOT_LINES - 1)) == 0, "hot lines: a power of two");
static_assert(sizeof(thptrace_copy_sample) == 32 + 8 * THPTRACE_STACK_DEPTH, "copy sample layout");
static_assert(offsetof(thptrace_copy_sample_dwarf, regs) == sizeof(thptrace_copy_sample), "DWARF sample layout");
static_assert(THPTRACE_USER_REGS == thptrace::UserContext::kRegs && THPTRACE_USER_REG_SP == thptrace::UserContext::kSp,
              "DWARF sample layout: pt_regs");
static_assert(offsetof(thptrace_hot, live) == 12, "hot line layout");
static_assert(sizeof(thptrace_sample_state) == 24, "sampler state layout");

namespace thptrace {

// The userspace side's one add of the fault counters (bpf/common.bpf.h has the kernel's).
inline void add_faults(thptrace_faults& into, const thptrace_faults& from) {
  into.cow += from.cow;
  into.huge_cow += from.huge_cow;
  into.thp_splits += from.thp_splits;
  into.ns_total += from.ns_total;
  into.ns_count += from.ns_count;
  for (int i = 0; i < THPTRACE_LAT_SLOTS; i++) into.lat[i] += from.lat[i];
}

}  // namespace thptrace

// The fields of each record, one list per struct, for code that walks them by name (the recorded
// inputs, report/inputs.cpp): X(name, member), the name the recordings use and where the value
// lives; the fault counters (struct thptrace_faults) in one list both records share. Every field is
// listed or named below as left out, and the sizes check it: a field added to bpf/thptrace.h and not
// here fails the build. One field a line; clang-format reflows macro bodies differently on each pass,
// so it leaves these alone.
// clang-format off
#define THPTRACE_FAULT_FIELDS(X) \
  X(cow_faults, faults.cow) \
  X(huge_cow_faults, faults.huge_cow) \
  X(thp_splits, faults.thp_splits) \
  X(fault_ns_total, faults.ns_total) \
  X(fault_ns_count, faults.ns_count)
#define THPTRACE_CPU_WAIT_FIELDS(X) \
  X(main_wait_child_ns, main_wait.child_ns) \
  X(main_wait_threads_ns, main_wait.threads_ns) \
  X(main_wait_others_ns, main_wait.others_ns) \
  X(main_wait_idle_ns, main_wait.idle_ns)
#define THPTRACE_EPISODE_FIELDS(X) \
  X(parent_tgid, parent_tgid) \
  X(child_pid, child_pid) \
  X(reason, reason) \
  X(redis_ctx, redis_ctx) \
  X(fork_ts_ns, fork_ts_ns) \
  X(exit_ts_ns, exit_ts_ns) \
  X(clone_start_ns, clone_start_ns) \
  X(clone_end_ns, clone_end_ns) \
  X(libc_fork_ns, libc_fork_ns) \
  THPTRACE_FAULT_FIELDS(X) \
  X(child_cow_faults, child_cow_faults) \
  X(huge_allocs, huge_allocs) \
  X(compaction_stalls, compaction_stalls) \
  X(compaction_ns, compaction_ns) \
  X(reclaim_stalls, reclaim_stalls) \
  X(reclaim_ns, reclaim_ns) \
  X(child_wchar, child_wchar) \
  X(child_write_bytes, child_write_bytes) \
  X(child_cpu_ns, child_cpu_ns) \
  X(child_runqueue_ns, child_runqueue_ns) \
  THPTRACE_CPU_WAIT_FIELDS(X)
#define THPTRACE_TARGET_FIELDS(X) \
  THPTRACE_FAULT_FIELDS(X) \
  X(child_cow_faults, child_cow_faults) \
  X(huge_allocs, huge_allocs) \
  X(khugepaged_scans, khugepaged_scans) \
  X(thp_collapses, thp_collapses) \
  X(compaction_stalls, compaction_stalls) \
  X(compaction_ns, compaction_ns) \
  X(reclaim_stalls, reclaim_stalls) \
  X(reclaim_ns, reclaim_ns) \
  X(untracked_forks, untracked_forks) \
  THPTRACE_CPU_WAIT_FIELDS(X)
#define THPTRACE_EVENT_FIELDS(X) \
  X(type, type) \
  X(tgid, tgid) \
  X(pid, pid) \
  X(child_pid, child_pid) \
  X(ts_ns, ts_ns) \
  X(start_ns, start_ns) \
  X(value, value) \
  X(value2, value2)
// clang-format on

// A term of a sum, unary plus and all: no parentheses around it.
#define THPTRACE_SIZE_IN_EPISODE(name, m) +sizeof(thptrace_episode{}.m)  // NOLINT(bugprone-macro-parentheses)
#define THPTRACE_SIZE_IN_TARGET(name, m) +sizeof(thptrace_target{}.m)    // NOLINT(bugprone-macro-parentheses)
#define THPTRACE_SIZE_IN_EVENT(name, m) +sizeof(thptrace_event{}.m)      // NOLINT(bugprone-macro-parentheses)
// Left out: tracked and based, a target's main_wait_charged_ns and main_wait_cpu (the kernel's own
// bookkeeping), the arrays (written apart), and an
// event's episode (written apart, for EV_CHILD_EXIT only).
static_assert(0 THPTRACE_EPISODE_FIELDS(THPTRACE_SIZE_IN_EPISODE) + sizeof(thptrace_episode::tracked) +
                      sizeof(thptrace_episode::based) + sizeof(thptrace_faults::lat) ==
                  sizeof(thptrace_episode),
              "THPTRACE_EPISODE_FIELDS lists every field of thptrace_episode");
static_assert(0 THPTRACE_TARGET_FIELDS(THPTRACE_SIZE_IN_TARGET) + sizeof(thptrace_target::active) +
                      sizeof(thptrace_faults::lat) + sizeof(thptrace_target::main_wait_charged_ns) +
                      sizeof(thptrace_target::main_wait_cpu) + sizeof(thptrace_target::main_wait_pad) ==
                  sizeof(thptrace_target),
              "THPTRACE_TARGET_FIELDS lists every field of thptrace_target");
static_assert(0 THPTRACE_EVENT_FIELDS(THPTRACE_SIZE_IN_EVENT) + sizeof(thptrace_event::episode) ==
                  sizeof(thptrace_event),
              "THPTRACE_EVENT_FIELDS lists every field of thptrace_event");
