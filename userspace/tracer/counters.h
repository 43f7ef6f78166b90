// SPDX-License-Identifier: Apache-2.0
#pragma once
// The kernel's counters as userspace reads them: the targets map (processes watched) with their hot
// lines and per-CPU fault counters, the episodes map (one entry per fork child) and its reaping,
// and the drop counters. Reads and writes maps only; attaches nothing.

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kernel/abi.h"
#include "tracer/loader.h"

struct thptrace_bpf;

namespace thptrace::tracer {

// What KernelCounters::reap_episodes found in the episodes map.
struct Reaped {
  // Closed episodes whose exit record was lost (ring buffer full): complete, now removed from the map.
  std::vector<thptrace_episode> lost_exits;
  // Episodes of children that died without being closed (their exit was not seen), removed.
  size_t dead = 0;
  size_t live = 0;  // episodes of children alive now, left in the map
};

class KernelCounters {
 public:
  // Maps the hot lines and the per-CPU counters of the loaded object `skel` (not owned). Throws
  // FatalError when the kernel refuses to map them.
  KernelCounters(::thptrace_bpf* skel, CounterShape shape);
  ~KernelCounters();
  KernelCounters(const KernelCounters&) = delete;
  KernelCounters& operator=(const KernelCounters&) = delete;

  // Adds tgid to the targets map and gives it its hot line when the line is free. False with *why
  // set when the map is full or the kernel refuses; nothing changes then.
  bool watch(pid_t tgid, std::string* why);
  bool watching(pid_t tgid) const { return watched_.contains(tgid); }
  void unwatch(pid_t tgid);

  std::optional<thptrace_target> target(pid_t tgid) const;
  bool owns_hot_line(pid_t tgid) const;
  uint32_t hot_slow(pid_t tgid) const;
  std::vector<thptrace_episode> episodes_of(pid_t parent) const;
  void forget_episode(pid_t child);
  Reaped reap_episodes(uint64_t grace_ns);
  size_t episode_count() const;
  size_t target_count() const;
  uint64_t dropped() const;
  uint64_t copy_samples_dropped() const;
  // Tracked fork children of watched processes alive now (the live_forks count); 0 when unreadable.
  uint64_t live_forks() const;
  bool maps_readable() const;

 private:
  thptrace_hot* hot_line(pid_t tgid) const;
  // The sum over every CPU of a line owner's fault counters.
  thptrace_faults pcpu_sum(int slot) const;

  ::thptrace_bpf* skel_;
  CounterShape shape_;
  thptrace_hot* hot_ = nullptr;    // the hot map, mmapped: THPTRACE_HOT_LINES lines
  thptrace_pcpu* pcpu_ = nullptr;  // the pcpu map, mmapped: regions x slots
  size_t pcpu_bytes_ = 0;
  std::vector<bool> pcpu_used_;   // counter slots held by line owners
  std::map<pid_t, int> watched_;  // watched tgids: its counter slot when it owns its hot line, else -1
};

}  // namespace thptrace::tracer
