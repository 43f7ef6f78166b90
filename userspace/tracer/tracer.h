// SPDX-License-Identifier: Apache-2.0
#pragma once
// The kernel side of thptrace: owns the BPF skeleton, its links and its ring buffer. Loads only the
// programs of the modes chosen by choose_modes(), watches target processes through the targets map,
// and hands discrete events to a callback. Every resource is released by the destructor.

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

#include "tracer/abi.h"
#include "tracer/probe.h"

struct thptrace_bpf;
struct bpf_link;
struct bpf_program;
struct ring_buffer;

namespace thptrace::tracer {

struct TracerOptions {
  size_t ringbuf_bytes = 256 * 1024;  // a power of two, ≥ one page
  uint32_t max_targets = 64;          // entries of the targets map: processes watched at once
  uint32_t max_episodes = 256;        // entries of the episodes map: fork children tracked at once
  // 1 in sample_every copy-on-write faults of a watched process with a live fork child is sent with
  // its user call stack (take_copy_samples); 0 = off, and the fault programs then carry no sampler.
  uint32_t sample_every = 0;
  size_t sample_ringbuf_bytes = 1 << 20;  // a power of two, ≥ one page
};

// One BPF program's own cost, from bpf_prog_get_info_by_fd. run_cnt and run_time_ns only move while
// the kernel.bpf_stats_enabled sysctl is 1 (Linux 5.1); they are 0 otherwise.
struct ProgramStats {
  std::string name;
  uint32_t id = 0;  // the kernel's program id (bpftool prog show id N)
  uint64_t run_cnt = 0;
  uint64_t run_time_ns = 0;
};

// What Tracer::reap_episodes found in the episodes map.
struct Reaped {
  // Closed episodes whose exit record was lost (ring buffer full): complete, now removed from the map.
  std::vector<thptrace_episode> lost_exits;
  // Episodes of children that died without being closed (their exit was not seen), removed.
  size_t dead = 0;
  size_t live = 0;  // episodes of children alive now, left in the map
};

class Tracer {
 public:
  // Opens and loads the BPF object for `modes`, moving a family whose real programs the kernel refuses
  // down its chain (modes() then says what is loaded). Throws FatalError (exit 1) below the minimum
  // kernel, without privilege, or when the fork or COW family cannot load at all.
  Tracer(const ProbeReport& modes, const TracerOptions& options = {});
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  // Attaches every loaded kernel program but the huge-page allocation counter and the clone-syscall
  // timing pair (both attached only where needed). Throws FatalError on failure.
  void attach();
  // Counts order-9 allocations by watched processes (huge_allocs). Its hook, mm_page_alloc, runs on
  // every page allocation of the machine (a COW fault makes one), so callers attach it only when a
  // watched process can be given a huge page. Returns false with *why set when it cannot attach.
  bool attach_huge_alloc_counting(std::string* why);
  // The attach mode of that counter, or Mode::unavailable while it is not attached.
  Mode huge_alloc_mode() const;
  // Adds tgid to the targets map. Returns false with *why set when the map is full (more processes
  // than max_targets) or the kernel refuses; the tracer is unchanged then.
  bool watch(pid_t tgid, std::string* why = nullptr);
  bool watching(pid_t tgid) const { return watched_.contains(tgid); }
  void unwatch(pid_t tgid);
  // Puts the Redis/Valkey uprobes on the binary of `pid` (through /proc/PID/exe, so it works across
  // mount namespaces), each entry point the binary gives (entry_points.h). *why says which it gave
  // and which labels are left to INFO; false when none attached. The uprobes of one binary are
  // attached once, for every process running it (the programs act for watched processes only), and
  // shared by the watched processes running it: releasing a uprobe waits for the kernel's grace
  // periods, mostly one after another (about 55 ms each here): 50 Redis with ten each took 45 s to stop.
  bool attach_redis(pid_t pid, std::string* why);
  // Detaches every uprobe (Redis and libc) of `pid`.
  void detach_uprobes(pid_t pid);
  // Times libc's fork() in `pid` with a uprobe pair on the libc it maps: the span Redis reports as
  // latest_fork_usec. Where it cannot attach (a static binary, a uprobe refused across containers)
  // fork duration is the clone syscall's, and `pid` is timed by the syscall pair below.
  bool attach_libc_fork(pid_t pid, std::string* why);
  // The clone-syscall timing pair hooks sys_enter and sys_exit, which every system call of the
  // machine runs through: it is attached only while a watched process has no libc fork timing
  // (attach_libc_fork failed for it), and detached when the last such process is unwatched.
  // time_clone_syscalls asks for it for `pid`; false with *why set when it cannot attach.
  bool time_clone_syscalls(pid_t pid, std::string* why = nullptr);
  bool clone_syscalls_attached() const { return !clone_links_.empty(); }

  // The copies sampled since the last call, in arrival order (filled by poll).
  std::vector<thptrace_copy_sample> take_copy_samples() { return std::exchange(copy_samples_, {}); }
  // Samples the kernel could not deliver (the samples ring buffer full) since load.
  uint64_t copy_samples_dropped() const;
  uint32_t sample_every() const { return sample_every_; }

  // Waits up to timeout_ms for events and passes each to on_event. Returns the number handled, or a
  // negative errno (EINTR when a signal arrived).
  int poll(int timeout_ms, const std::function<void(const thptrace_event&)>& on_event);

  std::optional<thptrace_target> target(pid_t tgid) const;
  // Whether a watched tgid's faults are counted on the fast path (it owns its hot line) rather than
  // in the hash maps (another watched tgid owns the line).
  bool owns_hot_line(pid_t tgid) const;
  // Episodes of `parent` still in the kernel map: children alive now, or whose exit record was lost.
  std::vector<thptrace_episode> episodes_of(pid_t parent) const;
  void forget_episode(pid_t child);
  // Keeps the episodes map to live children: collects and removes closed episodes whose exit record
  // was lost at least grace_ns ago (the closing program has long finished with them), and removes
  // episodes of children that no longer exist. A long-running daemon calls it periodically.
  Reaped reap_episodes(uint64_t grace_ns = 1'000'000'000);
  // Entries of the episodes and targets maps now.
  size_t episode_count() const;
  size_t target_count() const;
  // Other watched tgids sharing tgid's hot line (fork children, collisions): the line's slow count.
  uint32_t hot_slow(pid_t tgid) const;
  // Run count and run time of every loaded program (kernel.bpf_stats_enabled must be 1 for them to
  // move).
  std::vector<ProgramStats> program_stats() const;
  // Ring-buffer records the kernel could not deliver since load.
  uint64_t dropped() const;
  const ProbeReport& modes() const { return modes_; }
  // Whether this process may read the maps now (false when the bpf() syscall refuses it: EPERM).
  bool maps_readable() const;
  size_t link_count() const;

 private:
  struct SkelDeleter {
    void operator()(::thptrace_bpf* s) const;
  };
  struct LinkDeleter {
    void operator()(bpf_link* l) const;
  };
  struct RingDeleter {
    void operator()(ring_buffer* r) const;
  };
  using LinkPtr = std::unique_ptr<bpf_link, LinkDeleter>;
  // The Redis uprobes of one binary (device and inode), and the watched processes running it.
  using BinaryKey = std::pair<dev_t, ino_t>;
  struct SharedUprobes {
    std::vector<LinkPtr> links;
    uint32_t anchors = 0;  // REDIS_ANCHOR_* bits of the entry points attached
    std::string why;       // entry_points.h describe()
    std::set<pid_t> users;
  };

  static int on_ring_record(void* ctx, void* data, size_t size);
  static int on_sample_record(void* ctx, void* data, size_t size);

  thptrace_hot* hot_line(pid_t tgid) const;
  // The sum over every CPU of a line owner's fault counters.
  thptrace_pcpu pcpu_sum(int slot) const;
  int load(const char* only_family, const TracerOptions& sizes);
  // sys_enter and sys_exit in both modes: the clone-syscall timing pair, attached apart from the rest.
  std::array<bpf_program*, 4> clone_syscall_programs() const;
  bool attach_libc_fork_pair(pid_t pid, std::string* why);
  SharedUprobes attach_redis_binary(const std::string& binary);
  void detach_redis(pid_t pid);  // pid stops using its binary's Redis uprobes

  ProbeReport modes_;
  std::unique_ptr<::thptrace_bpf, SkelDeleter> skel_;
  thptrace_hot* hot_ = nullptr;            // the hot map, mmapped: THPTRACE_HOT_LINES lines
  thptrace_pcpu* pcpu_ = nullptr;          // the pcpu map, mmapped: pcpu_regions_ x pcpu_slots_
  size_t pcpu_bytes_ = 0;
  uint32_t pcpu_regions_ = 1;     // CPUs with their own counters
  uint32_t pcpu_slots_ = 1;       // line owners at once (max_targets)
  std::vector<bool> pcpu_used_;   // counter slots held by line owners
  std::map<pid_t, int> watched_;  // watched tgids: its counter slot when it owns its hot line, else -1
  std::vector<LinkPtr> links_;
  LinkPtr huge_alloc_link_;
  std::vector<LinkPtr> clone_links_;        // sys_enter and sys_exit, while clone_timed_ is not empty
  std::set<pid_t> clone_timed_;             // watched processes timed by the clone syscall pair
  bpf_program* huge_alloc_prog_ = nullptr;  // page_alloc_btf or page_alloc_raw, whichever is loaded
  std::map<pid_t, std::vector<LinkPtr>> uprobe_links_;  // libc uprobes, by process
  std::map<BinaryKey, SharedUprobes> redis_uprobes_;
  std::map<pid_t, BinaryKey> redis_binary_of_;
  std::unique_ptr<ring_buffer, RingDeleter> ring_;
  const std::function<void(const thptrace_event&)>* on_event_ = nullptr;
  uint32_t sample_every_ = 0;
  std::vector<thptrace_copy_sample> copy_samples_;
};

}  // namespace thptrace::tracer
