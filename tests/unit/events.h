// SPDX-License-Identifier: Apache-2.0
#pragma once
// Kernel records as the unit tests build them: a fork of the parent, an episode, the child's exit
// carrying it. Plain values, in the units the kernel writes (ns).

#include <cstdint>

#include "kernel/abi.h"

namespace thptrace::test {

inline constexpr uint32_t kParent = 100;

inline thptrace_event fork_ev(uint32_t child, uint64_t ts, uint32_t reason = 0, uint32_t parent = kParent) {
  thptrace_event e{};
  e.type = EV_FORK;
  e.tgid = parent;
  e.child_pid = child;
  e.ts_ns = ts;
  e.value = reason;
  return e;
}

// The clone's return in the parent, its entry at `start`.
inline thptrace_event fork_ret(uint32_t child, uint64_t start, uint64_t end, uint32_t parent = kParent) {
  thptrace_event e{};
  e.type = EV_FORK_RETURN;
  e.tgid = parent;
  e.child_pid = child;
  e.start_ns = start;
  e.ts_ns = end;
  return e;
}

inline thptrace_episode episode(uint32_t child, uint64_t fork_ts, uint64_t exit_ts, uint64_t cow, uint32_t reason = 0,
                                uint32_t parent = kParent) {
  thptrace_episode ep{};
  ep.parent_tgid = parent;
  ep.child_pid = child;
  ep.fork_ts_ns = fork_ts;
  ep.exit_ts_ns = exit_ts;
  ep.faults.cow = cow;
  ep.reason = reason;
  return ep;
}

// An fsync of the parent from `start`, `us` µs long, by a thread of `kind` (enum thptrace_thread_kind).
inline thptrace_event sync_ev(uint64_t start, uint64_t us, uint32_t kind, uint32_t tid = kParent) {
  thptrace_event e{};
  e.type = EV_DISK;
  e.tgid = kParent;
  e.pid = tid;
  e.start_ns = start;
  e.ts_ns = start + us * 1000;
  e.value = DISK_FSYNC;
  e.value2 = kind;
  return e;
}

// The child's exit, closing `ep` (its parent is the event's tgid).
inline thptrace_event exit_ev(const thptrace_episode& ep) {
  thptrace_event e{};
  e.type = EV_CHILD_EXIT;
  e.tgid = ep.parent_tgid;
  e.child_pid = ep.child_pid;
  e.ts_ns = ep.exit_ts_ns;
  e.episode = ep;
  return e;
}

}  // namespace thptrace::test
