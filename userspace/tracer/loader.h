// SPDX-License-Identifier: Apache-2.0
#pragma once
// Loading thptrace's BPF object: the one place the final attach modes are decided. choose_modes()
// says what the kernel's stand-in programs accept; the loader loads the real programs of those modes
// and moves a family the kernel refuses down its chain (family.h) until the whole object loads.

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "tracer/probe.h"

struct thptrace_bpf;
struct bpf_program;

namespace thptrace::tracer {

struct TracerOptions {
  size_t ringbuf_bytes = 256 * 1024;  // a power of two, ≥ one page
  uint32_t max_targets = 64;          // entries of the targets map: processes watched at once
  uint32_t max_episodes = 256;        // entries of the episodes map: fork children tracked at once
  // 1 in sample_every copy-on-write faults of a watched process with a live fork child is sent with
  // its user call stack (Tracer::take_copy_samples); 0 = off, and the fault programs then carry no sampler.
  uint32_t sample_every = 0;
  size_t sample_ringbuf_bytes = 1 << 20;  // a power of two, ≥ one page
  // Samples also carry the thread's registers and 8 KiB of its stack, for an unwind from .eh_frame
  // in userspace (binaries without frame pointers); the samples ring is then 8 MiB.
  bool dwarf_stacks = false;
};

struct SkelDeleter {
  void operator()(::thptrace_bpf* s) const;
};
using SkelPtr = std::unique_ptr<::thptrace_bpf, SkelDeleter>;

// The per-CPU fault counters' shape: a region per CPU, a slot per line owner.
struct CounterShape {
  uint32_t regions = 1;
  uint32_t slots = 1;
};

struct LoadedObject {
  SkelPtr skel;
  AttachModes modes;                       // what is loaded: the final answer
  bpf_program* huge_alloc_prog = nullptr;  // page_alloc_btf or page_alloc_raw, whichever is loaded
};

// Loads the object for `requested` (ring sizes rounded up to powers of two). Throws FatalError (exit
// 1) below the minimum kernel, without privilege, or when the fork or COW family cannot load at all.
LoadedObject load_object(const AttachModes& requested, const TracerOptions& options, CounterShape shape);

// sys_enter and sys_exit in both modes: the clone-syscall timing pair, attached apart from the rest.
std::array<bpf_program*, 4> clone_syscall_programs(const ::thptrace_bpf* s);
// The sched family's programs in both modes, attached only while a fork child of a watched process
// lives (Tracer::poll).
std::array<bpf_program*, 4> sched_programs(const ::thptrace_bpf* s);

}  // namespace thptrace::tracer
