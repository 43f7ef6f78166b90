// SPDX-License-Identifier: Apache-2.0
#pragma once
// The kernel side of thptrace, in three parts: the loaded object and its final modes (loader.h), the
// kernel's counters (counters.h) and the links (links.h). The Tracer owns them with the ring buffers,
// follows processes (follow: watch, time fork, Redis uprobes) and hands discrete events to a
// callback. Every resource is released by the destructor: links, then rings, then the object.

#include <sys/types.h>

#include <array>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/user_context.h"

#include "kernel/abi.h"
#include "tracer/counters.h"
#include "tracer/links.h"
#include "tracer/loader.h"
#include "tracer/probe.h"

struct ring_buffer;

namespace thptrace::tracer {

// One sampled copy from the samples ring: the kernel's record and, for a DWARF sample, the thread's
// registers and top of stack.
struct CopySampleRecord {
  thptrace_copy_sample sample{};
  std::optional<UserContext> user;
};

// One BPF program's own cost, from bpf_prog_get_info_by_fd. run_cnt and run_time_ns only move while
// the kernel.bpf_stats_enabled sysctl is 1 (Linux 5.1); they are 0 otherwise.
struct ProgramStats {
  std::string name;
  uint32_t id = 0;  // the kernel's program id (bpftool prog show id N)
  uint64_t run_cnt = 0;
  uint64_t run_time_ns = 0;
};

// What Tracer::follow did for one process.
struct Followed {
  bool watched = false;
  std::string why;  // when not watched: why
  // The redis family for this process: uprobe with the entry points its binary gave, else INFO
  // polling (when the caller can poll INFO) or unavailable, with why.
  FamilyChoice redis;
  // Whether libc's fork() is timed by a uprobe pair; else fork_timing says why (the clone syscall's
  // duration is used then).
  bool libc_fork = false;
  std::string fork_timing;
};

class Tracer {
 public:
  // Loads the BPF object for the `requested` modes (load_object: a family whose real programs the
  // kernel refuses moves down its chain, and modes() says what is loaded). Throws FatalError (exit 1)
  // below the minimum kernel, without privilege, or when the fork or COW family cannot load at all.
  Tracer(const AttachModes& requested, const TracerOptions& options = {});
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  // Attaches every loaded kernel program but the huge-page allocation counter and the clone-syscall
  // timing pair (both attached only where needed). Throws FatalError on failure.
  void attach();
  // Counts order-9 allocations by watched processes (huge_allocs). Its hook, mm_page_alloc, runs on
  // every page allocation of the machine (a COW fault makes one), so callers attach it only when a
  // watched process can be given a huge page. Returns false with *why set when it cannot attach.
  bool attach_huge_alloc_counting(std::string* why) { return links_.attach_huge_alloc_counting(why); }
  // The attach mode of that counter, or Mode::unavailable while it is not attached.
  Mode huge_alloc_mode() const { return links_.huge_alloc_mode(); }
  // Follows one process, the same way for the capture and the daemon: watches it (the targets map),
  // times its libc fork() (else the clone syscall), and, when the redis family is in uprobe mode,
  // puts the Redis uprobes on its binary. info_polling says whether the caller polls INFO for what
  // uprobes cannot name. Not watched (the map full, the kernel refusing): nothing else is done.
  Followed follow(pid_t pid, bool info_polling);
  // Adds tgid to the targets map. Returns false with *why set when the map is full (more processes
  // than max_targets) or the kernel refuses; the tracer is unchanged then.
  bool watch(pid_t tgid, std::string* why = nullptr) { return counters_.watch(tgid, why); }
  bool watching(pid_t tgid) const { return counters_.watching(tgid); }
  void unwatch(pid_t tgid);
  // Puts the Redis/Valkey uprobes on the binary of `pid` (through /proc/PID/exe, so it works across
  // mount namespaces), each entry point the binary gives (entry_points.h). *why says which it gave
  // and which labels are left to INFO; false when none attached. The uprobes of one binary are
  // attached once, for every process running it (the programs act for watched processes only), and
  // shared by the watched processes running it, since releasing a uprobe waits for the kernel's
  // grace periods.
  bool attach_redis(pid_t pid, std::string* why) { return links_.attach_redis(pid, why); }
  // Detaches every uprobe (Redis and libc) of `pid`.
  void detach_uprobes(pid_t pid) { links_.detach_uprobes(pid); }
  // Times libc's fork() in `pid` with a uprobe pair on the libc it maps: the span Redis reports as
  // latest_fork_usec. Where it cannot attach (a static binary, a uprobe refused across containers)
  // fork duration is the clone syscall's, and `pid` is timed by the syscall pair below.
  bool attach_libc_fork(pid_t pid, std::string* why) { return links_.attach_libc_fork(pid, why); }
  // The clone-syscall timing pair hooks sys_enter and sys_exit, which every system call of the
  // machine runs through: it is attached only while a watched process has no libc fork timing
  // (attach_libc_fork failed for it), and detached when the last such process is unwatched.
  // time_clone_syscalls asks for it for `pid`; false with *why set when it cannot attach.
  bool time_clone_syscalls(pid_t pid, std::string* why = nullptr) { return links_.time_clone_syscalls(pid, why); }
  bool clone_syscalls_attached() const { return links_.clone_syscalls_attached(); }

  // The copies sampled since the last call, in arrival order (filled by poll).
  std::vector<CopySampleRecord> take_copy_samples() { return std::exchange(copy_samples_, {}); }
  // Samples the kernel could not deliver (the samples ring buffer full) since load.
  uint64_t copy_samples_dropped() const { return counters_.copy_samples_dropped(); }
  uint32_t sample_every() const { return sample_every_; }

  // Waits up to timeout_ms for events and passes each to on_event. Returns the number handled, or a
  // negative errno (EINTR when a signal arrived). The sched family's programs, which run at every
  // context switch of the machine, are attached here when a tracked fork's record arrives and
  // detached once no tracked fork child lives.
  int poll(int timeout_ms, const std::function<void(const thptrace_event&)>& on_event);
  // Why the sched family could not attach at a fork (its figures are then missing), "" while it could.
  const std::string& sched_refused() const { return sched_refused_; }
  bool sched_attached() const { return links_.sched_attached(); }

  std::optional<thptrace_target> target(pid_t tgid) const { return counters_.target(tgid); }
  // Whether a watched tgid's faults are counted on the fast path (it owns its hot line) rather than
  // in the hash maps (another watched tgid owns the line).
  bool owns_hot_line(pid_t tgid) const { return counters_.owns_hot_line(tgid); }
  // Episodes of `parent` still in the kernel map: children alive now, or whose exit record was lost.
  std::vector<thptrace_episode> episodes_of(pid_t parent) const { return counters_.episodes_of(parent); }
  void forget_episode(pid_t child) { counters_.forget_episode(child); }
  // Keeps the episodes map to live children: collects and removes closed episodes whose exit record
  // was lost at least grace_ns ago (the closing program has long finished with them), and removes
  // episodes of children that no longer exist. A long-running daemon calls it periodically.
  Reaped reap_episodes(uint64_t grace_ns = 1'000'000'000) { return counters_.reap_episodes(grace_ns); }
  // Entries of the episodes and targets maps now.
  size_t episode_count() const { return counters_.episode_count(); }
  size_t target_count() const { return counters_.target_count(); }
  // Other watched tgids sharing tgid's hot line (fork children, collisions): the line's slow count.
  uint32_t hot_slow(pid_t tgid) const { return counters_.hot_slow(tgid); }
  // Run count and run time of every loaded program (kernel.bpf_stats_enabled must be 1 for them to
  // move).
  std::vector<ProgramStats> program_stats() const;
  // Ring-buffer records the kernel could not deliver since load.
  uint64_t dropped() const { return counters_.dropped(); }
  // The final modes: what the loader loaded.
  const AttachModes& modes() const { return loaded_.modes; }
  // Whether this process may read the maps now (false when the bpf() syscall refuses it: EPERM).
  bool maps_readable() const { return counters_.maps_readable(); }
  size_t link_count() const { return links_.count(); }

 private:
  struct RingDeleter {
    void operator()(ring_buffer* r) const;
  };

  static int on_ring_record(void* ctx, void* data, size_t size);
  static int on_sample_record(void* ctx, void* data, size_t size);

  // Members are destroyed in reverse order: the links first, then the rings and counters, then the
  // object.
  CounterShape shape_;  // the per-CPU counters' shape, which the object and the counters share
  LoadedObject loaded_;
  KernelCounters counters_;
  std::unique_ptr<ring_buffer, RingDeleter> ring_;
  Links links_;
  const std::function<void(const thptrace_event&)>* on_event_ = nullptr;
  std::string sched_refused_;
  uint32_t sample_every_ = 0;
  std::vector<CopySampleRecord> copy_samples_;
};

}  // namespace thptrace::tracer
