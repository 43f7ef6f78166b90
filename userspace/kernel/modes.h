// SPDX-License-Identifier: Apache-2.0
#pragma once
// The attach mode each probe family got, and why: what the tracer's prober decides (tracer/probe.h)
// and what reports, recorded inputs and metrics read back. Plain data, so the readers need no libbpf.

#include <string>

#include "kernel/family.h"

namespace thptrace::tracer {

struct FamilyChoice {
  Mode mode = Mode::unavailable;
  std::string why;
};

// The attach mode of every family and why, with the kernel facts that decided them.
struct AttachModes {
  bool btf = false;
  // BPF compare-and-exchange (Linux 5.12): without it the fork family loads its *_compat programs.
  bool bpf_atomics = false;
  // BPF_MAP_TYPE_TASK_STORAGE (Linux 5.11; for tracing programs 5.13): the fentry COW programs keep a
  // fault's start time in it, or else (their *_compat build) in a hash map.
  bool task_storage = false;
  std::string kernel_release;
  FamilyChoice fork, cow_fault, thp, stall, redis;
  // Write faults the kernel takes on the process's behalf (read()/recv() into a page shared with a
  // fork child): fentry when do_wp_page counts them with the rest, else the page_fault_kernel
  // tracepoint in the cow_fault family's style, else unavailable (those copies are then missed).
  FamilyChoice kernel_copies;
  // fsync, fdatasync and sync_file_range of the watched processes' threads, and their main threads'
  // file writes.
  FamilyChoice disk;
  // Whether the disk family may take the syscall tracepoints (--disk on): where it may not, a family
  // whose fentry programs the kernel refuses goes off rather than down its chain.
  bool disk_tracepoints = false;
  // Context switches and wake-ups: what held the CPU while a watched main thread waited for one.
  FamilyChoice sched;
  bool forced_fallback = false;
  // Non-empty when the kernel lacks something every capture needs (below the minimum kernel): one
  // sentence naming it. The Tracer refuses to start with it.
  std::string unsupported;

  FamilyChoice& at(Family f) { return choice_of(*this, f); }
  const FamilyChoice& at(Family f) const { return choice_of(*this, f); }

 private:
  template <class Modes>
  static auto choice_of(Modes& m, Family f) -> decltype((m.fork)) {
    switch (f) {
      case Family::fork: return m.fork;
      case Family::cow_fault: return m.cow_fault;
      case Family::thp: return m.thp;
      case Family::stall: return m.stall;
      case Family::redis: return m.redis;
      case Family::kernel_copies: return m.kernel_copies;
      case Family::disk: return m.disk;
      case Family::sched: return m.sched;
    }
    return m.redis;
  }
};

}  // namespace thptrace::tracer
