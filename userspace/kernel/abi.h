// SPDX-License-Identifier: Apache-2.0
#pragma once
// The BPF/userspace ABI (bpf/thptrace.h) seen from C++, with its layout pinned: a change on one side
// that the other did not follow fails the build here rather than corrupting counters at run time.

#include <cstddef>
#include "common/user_context.h"

#include "../../bpf/thptrace.h"

static_assert(sizeof(thptrace_episode) == 24 + 8 * 18 + 8 * THPTRACE_LAT_SLOTS, "episode layout");
static_assert(offsetof(thptrace_episode, fork_ts_ns) == 24, "episode layout");
static_assert(offsetof(thptrace_episode, fault_lat) == 24 + 8 * 18, "episode layout");
static_assert(sizeof(thptrace_target) == 4 * THPTRACE_MAX_ACTIVE + 8 * 14 + 8 * THPTRACE_LAT_SLOTS, "target layout");
static_assert(offsetof(thptrace_event, episode) == 48, "event layout");
static_assert(offsetof(thptrace_event, episode) == THPTRACE_EVENT_HEAD_BYTES, "event head");
static_assert(sizeof(thptrace_event) == 48 + sizeof(thptrace_episode), "event layout");
static_assert(sizeof(thptrace_hot) == 64, "hot line layout: one cache line");
static_assert(sizeof(thptrace_pcpu) == 64 + 8 * THPTRACE_LAT_SLOTS, "per-CPU counters: whole cache lines");
static_assert(offsetof(thptrace_pcpu, fault_lat) == 64, "per-CPU counters layout");
static_assert((THPTRACE_HOT_LINES & (THPTRACE_HOT_LINES - 1)) == 0, "hot lines: a power of two");
static_assert(sizeof(thptrace_copy_sample) == 32 + 8 * THPTRACE_STACK_DEPTH, "copy sample layout");
static_assert(offsetof(thptrace_copy_sample_dwarf, regs) == sizeof(thptrace_copy_sample), "DWARF sample layout");
static_assert(THPTRACE_USER_REGS == thptrace::UserContext::kRegs && THPTRACE_USER_REG_SP == thptrace::UserContext::kSp,
              "DWARF sample layout: pt_regs");
static_assert(offsetof(thptrace_hot, live) == 12, "hot line layout");
static_assert(sizeof(thptrace_sample_state) == 24, "sampler state layout");

// The fields of each record, one list per struct, for code that walks them by name (the recorded
// inputs, report/inputs.cpp). Every field is listed or named below as left out, and the sizes
// check it: a field added to bpf/thptrace.h and not here fails the build. One field a line;
// clang-format reflows macro bodies differently on each pass, so it leaves these alone.
// clang-format off
#define THPTRACE_EPISODE_FIELDS(X) \
  X(parent_tgid) \
  X(child_pid) \
  X(reason) \
  X(redis_ctx) \
  X(fork_ts_ns) \
  X(exit_ts_ns) \
  X(clone_start_ns) \
  X(clone_end_ns) \
  X(libc_fork_ns) \
  X(cow_faults) \
  X(child_cow_faults) \
  X(huge_cow_faults) \
  X(thp_splits) \
  X(huge_allocs) \
  X(fault_ns_total) \
  X(fault_ns_count) \
  X(compaction_stalls) \
  X(compaction_ns) \
  X(reclaim_stalls) \
  X(reclaim_ns) \
  X(child_wchar) \
  X(child_write_bytes)
#define THPTRACE_TARGET_FIELDS(X) \
  X(cow_faults) \
  X(child_cow_faults) \
  X(huge_cow_faults) \
  X(thp_splits) \
  X(huge_allocs) \
  X(khugepaged_scans) \
  X(thp_collapses) \
  X(compaction_stalls) \
  X(compaction_ns) \
  X(reclaim_stalls) \
  X(reclaim_ns) \
  X(fault_ns_total) \
  X(fault_ns_count) \
  X(untracked_forks)
#define THPTRACE_EVENT_FIELDS(X) X(type) X(tgid) X(pid) X(child_pid) X(ts_ns) X(start_ns) X(value) X(value2)
// clang-format on

// A term of a sum, unary plus and all: no parentheses around it.
#define THPTRACE_SIZE_IN_EPISODE(f) +sizeof(thptrace_episode::f)  // NOLINT(bugprone-macro-parentheses)
#define THPTRACE_SIZE_IN_TARGET(f) +sizeof(thptrace_target::f)    // NOLINT(bugprone-macro-parentheses)
#define THPTRACE_SIZE_IN_EVENT(f) +sizeof(thptrace_event::f)      // NOLINT(bugprone-macro-parentheses)
// Left out: tracked and based (the kernel's own bookkeeping), the arrays (written apart), and an
// event's episode (written apart, for EV_CHILD_EXIT only).
static_assert(0 THPTRACE_EPISODE_FIELDS(THPTRACE_SIZE_IN_EPISODE) + sizeof(thptrace_episode::tracked) +
                      sizeof(thptrace_episode::based) + sizeof(thptrace_episode::fault_lat) ==
                  sizeof(thptrace_episode),
              "THPTRACE_EPISODE_FIELDS lists every field of thptrace_episode");
static_assert(0 THPTRACE_TARGET_FIELDS(THPTRACE_SIZE_IN_TARGET) + sizeof(thptrace_target::active) +
                      sizeof(thptrace_target::fault_lat) ==
                  sizeof(thptrace_target),
              "THPTRACE_TARGET_FIELDS lists every field of thptrace_target");
static_assert(0 THPTRACE_EVENT_FIELDS(THPTRACE_SIZE_IN_EVENT) + sizeof(thptrace_event::episode) ==
                  sizeof(thptrace_event),
              "THPTRACE_EVENT_FIELDS lists every field of thptrace_event");
