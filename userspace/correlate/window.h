// SPDX-License-Identifier: Apache-2.0
#pragma once
// The fork window, defined once for the capture and the daemon.

#include <cstdint>
#include <optional>

namespace thptrace::correlate {

// A fork's window: the one span every per-fork figure of the capture and the daemon covers (fsyncs,
// client and server latency, sampled copies, /proc/vmstat deltas). From the child's creation (the
// kernel's sched_process_fork, inside the fork() call; the EV_FORK record's time) to its exit. The
// part of the call before the creation holds no reply and no system call of the thread that forks,
// which is inside fork(): a client's request the freeze held is answered after the call returns,
// inside the window. The creation is where the daemon, which sorts records as they arrive, first
// knows of the fork: the same window for both. Figures "before" cover the window of the same length
// just before it.
struct Window {
  static constexpr uint64_t kOpen = UINT64_MAX;  // to_ns while the child lives
  uint64_t from_ns = 0, to_ns = kOpen;
  // Half-open, so that a window and the one before it share no instant.
  bool holds(uint64_t ts_ns) const { return ts_ns >= from_ns && ts_ns < to_ns; }
  bool operator==(const Window&) const = default;
  // The window of the same length that ends where this one starts; nullopt when it would begin before
  // earliest_ns (or before time 0), or this one is open.
  std::optional<Window> before(uint64_t earliest_ns = 0) const {
    if (to_ns == kOpen || to_ns < from_ns) return std::nullopt;
    const uint64_t length = to_ns - from_ns;
    if (from_ns <= length || from_ns - length < earliest_ns) return std::nullopt;
    return Window{from_ns - length, from_ns};
  }
};

}  // namespace thptrace::correlate
