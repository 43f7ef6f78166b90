// SPDX-License-Identifier: Apache-2.0
#pragma once
// Each fork window's disk calls, and the window's before it, summarised as a capture goes, so that
// its memory does not grow with its calls (an hour of `appendfsync always` kept gigabytes of
// records): the calls go to a bounded correlate::DiskLog, the summaries to CaptureInputs.

#include <cstdint>
#include <map>
#include <vector>

#include "correlate/disk.h"
#include "correlate/window.h"
#include "kernel/abi.h"
#include "report/inputs.h"

namespace thptrace::report {

// The disk calls a capture keeps to summarise its forks' windows: 24 MiB at most.
inline constexpr size_t kDiskLogCalls = size_t{1} << 20;
// How long after a child's exit its window is summarised: records of calls made on other CPUs
// before it may still be on their way through the ring.
inline constexpr uint64_t kDiskSettleNs = 1'000'000'000;

// The windows are assemble's (correlate/window.h): from the child's creation to its exit, or to the
// capture's end for a child still alive; each with the window of the same length before it.
class DiskWindows {
 public:
  // Marks `in` as summarised.
  DiskWindows(uint32_t pid, CaptureInputs& in, size_t capacity = kDiskLogCalls);

  // Takes the target's disk calls (true: nothing else is to keep the record) and notes its forks.
  bool on_event(const thptrace_event& e);
  // Summarises the windows that closed kDiskSettleNs or more before now.
  void settle(uint64_t now_ns);
  // At the capture's end, in.end_ns set: every window left, a live child's closed at the end.
  void finish(const std::vector<thptrace_episode>& final_episodes);

 private:
  void summarise(const correlate::Window& w);

  uint32_t pid_;
  CaptureInputs& in_;
  correlate::DiskLog log_;
  std::map<uint32_t, uint64_t> open_;  // the children alive, by their creation
  std::vector<correlate::Window> closed_;
};

}  // namespace thptrace::report
