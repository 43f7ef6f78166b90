// SPDX-License-Identifier: Apache-2.0
#pragma once
// The memory cgroup a process is charged to, and what it allows: the limit copy-on-write after a fork
// can run a Redis into. Both hierarchies are read: cgroup v1's memory controller (hosts with hybrid
// cgroups, such as this project's CI machines) and cgroup v2 (most production hosts).

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace thptrace::proc {

// Where a process's memory cgroup lives: the hierarchy version and the cgroup's path relative to
// the hierarchy's root, from /proc/PID/cgroup. A v1 line naming the memory controller wins over the
// v2 line ("0::/path"), because on a hybrid host the memory controller is attached to v1 only.
struct CgroupRef {
  int version = 0;  // 1 or 2
  std::string path;
};
std::optional<CgroupRef> parse_memory_cgroup(std::string_view proc_pid_cgroup);

// The directory of that cgroup, from /proc/self/mountinfo: the mount of a v1 hierarchy with the
// memory controller, or of cgroup2, joined with the cgroup's path below the mount's root.
std::optional<std::string> memory_cgroup_dir(std::string_view mountinfo, const CgroupRef& ref);

// A limit file: v2 memory.max ("max" = none), v1 memory.limit_in_bytes (a page-rounded 2^63-1 when
// none). nullopt: no limit.
std::optional<uint64_t> parse_memory_limit(std::string_view text);
// The oom_kill count of v1 memory.oom_control or v2 memory.events ("oom_kill N" lines); 0 if absent.
uint64_t parse_oom_kills(std::string_view text);

struct CgroupMemory {
  int version = 0;
  std::string dir;
  std::optional<uint64_t> limit_bytes;  // nullopt: unlimited
  uint64_t usage_bytes = 0;
  // The kernel's high-water mark: v1 memory.max_usage_in_bytes, v2 memory.peak (Linux 5.19+). It
  // covers the cgroup's life (or since someone reset it), not only the capture.
  std::optional<uint64_t> peak_bytes;
  uint64_t oom_kills = 0;
};
// The live figures of pid's memory cgroup; nullopt when it has none that can be read.
std::optional<CgroupMemory> read_memory_cgroup(pid_t pid);

// MemAvailable of /proc/meminfo, in bytes.
std::optional<uint64_t> parse_mem_available(std::string_view meminfo);
std::optional<uint64_t> read_mem_available();

}  // namespace thptrace::proc
