// SPDX-License-Identifier: Apache-2.0
#pragma once
// Where a fork's copies came from: the sampled copy-on-write faults of the parent while the child
// lived (1 in N, with their mapping and symbolized call stack) grouped by code path, by function and
// by mapping, with the totals they estimate. Pure logic: tests feed it samples made by hand.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace thptrace::correlate {

// One sampled copy, resolved while the process lived (symbolize::Resolver).
struct CopySample {
  uint64_t ts_ns = 0;  // CLOCK_MONOTONIC
  uint64_t address = 0;
  std::string mapping;              // "[heap]", "[stack]", "anonymous", a file's name, "unmapped"
  std::vector<std::string> frames;  // function names, the faulting one first ("module+0xoff" unknown)
  std::string leaf_module;          // file name of the module of frames[0]; "" when in none
  // The frame-pointer walk reached the start of the thread (main, start_thread) or gave at least
  // kWholeStackFrames resolved frames: false for a binary built without frame pointers.
  bool whole = false;
  bool dwarf = false;  // the frames come from an unwind of .eh_frame, not the frame-pointer walk
};
inline constexpr size_t kWholeStackFrames = 3;
// Frames a code path shows: the faulting function and its callers.
inline constexpr size_t kPathFrames = 3;
inline constexpr size_t kTopPaths = 5;
inline constexpr size_t kTopFunctions = 25;

// A group of samples: its share of them and the copies it estimates (N·k ± 1.96·N·√k).
struct CopyGroup {
  std::string name;  // a path "leaf ← caller ← caller's caller", a function, or a mapping
  std::string leaf;  // paths only: the faulting function
  uint64_t samples = 0;
  double share = 0;  // samples / all samples of the fork
  uint64_t estimated = 0;
  uint64_t estimated_error = 0;
};

struct CopyAttribution {
  uint32_t sample_every = 0;     // N
  uint64_t samples = 0;          // k
  uint64_t estimated = 0;        // N·k: the parent's copies the samples stand for
  uint64_t estimated_error = 0;  // 1.96·N·√k, a 95% interval (Poisson approximation of 1-in-N)
  // (parent + child copies) × 4 KiB ÷ the parent's RSS at fork; nullopt without an RSS sample.
  std::optional<double> copy_ratio;
  std::string stacks_partial;        // "BINARY has no frame pointers" when most stacks stop short; "" else
  std::vector<CopyGroup> paths;      // top kTopPaths by samples
  std::vector<CopyGroup> functions;  // top kTopFunctions: samples whose stack holds the function
  std::vector<CopyGroup> mappings;   // every mapping, by samples
  // A Redis's samples by the command that wrote (command_of); empty for another program.
  std::vector<CopyGroup> commands;
  uint64_t dwarf_samples = 0;  // samples whose stack came from a .eh_frame unwind
  // The path holding more than half the samples, if one does.
  const CopyGroup* dominant_path() const {
    return !paths.empty() && paths.front().share > 0.5 ? &paths.front() : nullptr;
  }
};

// What a Redis was doing when it wrote, from a sample's frames (the faulting function first): the
// command whose implementation lies under call() ("setCommand" -> "SET"; "call() bookkeeping" for
// call()'s own work around it, such as its latency histogram), else the event loop's own
// work: "query-buffer reads" (parsing a request before its command runs), "expire cycle", "cron",
// "replies", "before sleep", "other"; "unattributed" for a stack that stopped short of all of them.
std::string command_of(const CopySample& s);
// Whether samples come from a Redis (its event loop or call() is on some stack).
bool looks_like_redis(const std::vector<const CopySample*>& samples);

// Whether a function name is where a thread's stack starts (main, start_thread, clone3, ...).
bool is_stack_root(const std::string& function);
// 1.96·N·√k rounded.
uint64_t estimate_error(uint32_t sample_every, uint64_t k);
// Groups the samples of one fork (those taken while its child lived). copies: the parent's and the
// child's copy-on-write faults counted in the kernel; rss_kb: the parent's RSS at fork (0: unknown).
CopyAttribution attribute_copies(const std::vector<const CopySample*>& samples, uint32_t sample_every, uint64_t copies,
                                 uint64_t rss_kb);

}  // namespace thptrace::correlate
