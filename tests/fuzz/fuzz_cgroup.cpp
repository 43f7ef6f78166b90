// SPDX-License-Identifier: Apache-2.0
// /proc/PID/cgroup, /proc/self/mountinfo, cgroup limit and event files and /proc/meminfo: the first
// two name paths a container's runtime chose. The input is read as each of them in turn.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_check.h"
#include "proc/cgroup.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace thptrace::proc;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (const auto ref = parse_memory_cgroup(text)) {
    FUZZ_CHECK(ref->version == 1 || ref->version == 2);
    FUZZ_CHECK(!ref->path.empty() && ref->path[0] == '/');
    FUZZ_CHECK(ref->path.find('\n') == std::string::npos);
    // The same text as a mountinfo: a directory found for the cgroup ends with the part of its path
    // below the mount's root, so it is never empty.
    if (const auto dir = memory_cgroup_dir(text, *ref)) FUZZ_CHECK(dir->find('\n') == std::string::npos);
  }
  if (const auto dir = memory_cgroup_dir(text, CgroupRef{2, "/a/b"})) FUZZ_CHECK(dir->size() <= size + 4);
  if (const auto limit = parse_memory_limit(text)) FUZZ_CHECK(*limit < (uint64_t{1} << 62));
  (void)parse_oom_kills(text);
  if (const auto avail = parse_mem_available(text)) FUZZ_CHECK(*avail % 1024 == 0);
  return 0;
}
