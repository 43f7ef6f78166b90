// SPDX-License-Identifier: Apache-2.0
#pragma once
// The BPF/userspace ABI (bpf/thptrace.h) seen from C++, with its layout pinned: a change on one side
// that the other did not follow fails the build here rather than corrupting counters at run time.

#include <cstddef>

#include "../../bpf/thptrace.h"

static_assert(sizeof(thptrace_episode) == 24 + 8 * 16 + 8 * THPTRACE_LAT_SLOTS, "episode layout");
static_assert(offsetof(thptrace_episode, fork_ts_ns) == 24, "episode layout");
static_assert(offsetof(thptrace_episode, fault_lat) == 24 + 8 * 16, "episode layout");
static_assert(sizeof(thptrace_target) == 4 * THPTRACE_MAX_ACTIVE + 8 * 14 + 8 * THPTRACE_LAT_SLOTS,
              "target layout");
static_assert(offsetof(thptrace_event, episode) == 48, "event layout");
static_assert(sizeof(thptrace_event) == 48 + sizeof(thptrace_episode), "event layout");
static_assert(sizeof(thptrace_hot) == 64, "hot line layout: one cache line");
static_assert(sizeof(thptrace_pcpu) == 64 + 8 * THPTRACE_LAT_SLOTS, "per-CPU counters: whole cache lines");
static_assert(offsetof(thptrace_pcpu, fault_lat) == 64, "per-CPU counters layout");
static_assert((THPTRACE_HOT_LINES & (THPTRACE_HOT_LINES - 1)) == 0, "hot lines: a power of two");
static_assert(sizeof(thptrace_copy_sample) == 32 + 8 * THPTRACE_STACK_DEPTH, "copy sample layout");
static_assert(offsetof(thptrace_hot, live) == 12, "hot line layout");
static_assert(sizeof(thptrace_sample_state) == 24, "sampler state layout");
