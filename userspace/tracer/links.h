// SPDX-License-Identifier: Apache-2.0
#pragma once
// The links of a loaded object: the kernel programs attached once, the huge-page allocation counter
// and the clone-syscall pair attached only while needed, and the uprobes of followed processes
// (libc fork() per process; the Redis entry points per binary, shared by every process running it).
// Every link is released by the destructor, the uprobes together.

#include <sys/types.h>

#include <array>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tracer/probe.h"

struct thptrace_bpf;
struct bpf_link;
struct bpf_program;

namespace thptrace::tracer {

class Links {
 public:
  // skel is the loaded object (not owned); redis_mode the redis family's mode; huge_alloc_prog the
  // loaded page allocation program, if any.
  Links(::thptrace_bpf* skel, Mode redis_mode, bpf_program* huge_alloc_prog)
      : skel_(skel), redis_mode_(redis_mode), huge_alloc_prog_(huge_alloc_prog) {}
  ~Links();
  Links(const Links&) = delete;
  Links& operator=(const Links&) = delete;

  // Every loaded kernel program but the huge-page allocation counter and the clone-syscall pair.
  // Throws FatalError on failure.
  void attach_kernel_programs();
  bool attach_huge_alloc_counting(std::string* why);
  Mode huge_alloc_mode() const;
  // The Redis uprobes of pid's binary (through /proc/PID/exe), attached once per binary for every
  // process running it and shared by the followed processes running it.
  bool attach_redis(pid_t pid, std::string* why);
  // libc's fork() of pid timed by a uprobe pair; where it cannot be, by the clone-syscall pair.
  bool attach_libc_fork(pid_t pid, std::string* why);
  bool time_clone_syscalls(pid_t pid, std::string* why);
  bool clone_syscalls_attached() const { return !clone_links_.empty(); }
  // pid is no longer timed by the clone-syscall pair, which is detached with its last user.
  void stop_clone_timing(pid_t pid);
  void detach_uprobes(pid_t pid);
  // The sched family's programs (loaded ones), attached or not; attach_sched is a no-op while they
  // are. False with *why when one cannot attach (none is then).
  bool attach_sched(std::string* why);
  void detach_sched() { sched_links_.clear(); }
  bool sched_attached() const { return !sched_links_.empty(); }
  size_t count() const;

 private:
  struct LinkDeleter {
    void operator()(bpf_link* l) const;
  };
  using LinkPtr = std::unique_ptr<bpf_link, LinkDeleter>;
  // The Redis uprobes of one binary (device and inode), and the followed processes running it.
  using BinaryKey = std::pair<dev_t, ino_t>;
  struct SharedUprobes {
    std::vector<LinkPtr> links;
    uint32_t anchors = 0;  // REDIS_ANCHOR_* bits of the entry points attached
    std::string why;       // entry_points.h describe()
    std::set<pid_t> users;
  };

  bool attach_libc_fork_pair(pid_t pid, std::string* why);
  // Attaches each loaded one of `programs` into `into`, all or none: false with *why when one cannot.
  static bool attach_loaded(std::span<bpf_program* const> programs, std::vector<LinkPtr>& into, std::string* why);
  SharedUprobes attach_redis_binary(const std::string& binary);
  void detach_redis(pid_t pid);  // pid stops using its binary's Redis uprobes

  ::thptrace_bpf* skel_;
  Mode redis_mode_;
  bpf_program* huge_alloc_prog_;
  std::vector<LinkPtr> kernel_;
  LinkPtr huge_alloc_;
  std::vector<LinkPtr> clone_links_;                 // sys_enter and sys_exit, while clone_timed_ is not empty
  std::vector<LinkPtr> sched_links_;                 // sched_switch and sched_wakeup, while forks live
  std::set<pid_t> clone_timed_;                      // followed processes timed by the clone syscall pair
  std::map<pid_t, std::vector<LinkPtr>> libc_fork_;  // libc uprobes, by process
  std::map<BinaryKey, SharedUprobes> redis_uprobes_;
  std::map<pid_t, BinaryKey> redis_binary_of_;
};

}  // namespace thptrace::tracer
