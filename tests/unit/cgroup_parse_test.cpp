// SPDX-License-Identifier: Apache-2.0
// The memory cgroup of a process on cgroup v1 (hybrid hosts) and v2, from recorded /proc text.
#include <gtest/gtest.h>

#include "proc/cgroup.h"

using namespace thptrace::proc;

namespace {

// Recorded on this project's CI machine type (hybrid: memory on v1, an empty v2 at .../unified).
constexpr const char* kHybridCgroup =
    "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/328f\n3:cpuset:/\n1:cpu,cpuacct:/\n0::/\n";
constexpr const char* kHybridMountinfo =
    "30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
// A systemd host on the unified hierarchy, and a container whose cgroup namespace root is a slice.
constexpr const char* kV2Cgroup = "0::/system.slice/redis-server.service\n";
constexpr const char* kV2Mountinfo =
    "25 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
    "35 25 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate\n";
constexpr const char* kNestedMountinfo =
    "35 25 0:30 /kubepods.slice /sys/fs/cgroup rw,relatime - cgroup2 cgroup2 rw\n";

}  // namespace

TEST(Cgroup, HybridHostTakesTheV1MemoryHierarchy) {
  const auto ref = parse_memory_cgroup(kHybridCgroup);
  ASSERT_TRUE(ref);
  EXPECT_EQ(ref->version, 1);
  EXPECT_EQ(ref->path, "/process_api/328f");
  EXPECT_EQ(memory_cgroup_dir(kHybridMountinfo, *ref), "/sys/fs/cgroup/memory/process_api/328f");
}

TEST(Cgroup, UnifiedHostTakesCgroup2) {
  const auto ref = parse_memory_cgroup(kV2Cgroup);
  ASSERT_TRUE(ref);
  EXPECT_EQ(ref->version, 2);
  EXPECT_EQ(memory_cgroup_dir(kV2Mountinfo, *ref), "/sys/fs/cgroup/system.slice/redis-server.service");
  EXPECT_EQ(memory_cgroup_dir(kV2Mountinfo, CgroupRef{2, "/"}), "/sys/fs/cgroup");
}

TEST(Cgroup, MountRootBelowTheHierarchyRoot) {
  EXPECT_EQ(memory_cgroup_dir(kNestedMountinfo, CgroupRef{2, "/kubepods.slice/pod1/redis"}), "/sys/fs/cgroup/pod1/redis");
  EXPECT_EQ(memory_cgroup_dir(kNestedMountinfo, CgroupRef{2, "/kubepods.slice"}), "/sys/fs/cgroup");
  // A cgroup outside what the mount shows cannot be read through it.
  EXPECT_FALSE(memory_cgroup_dir(kNestedMountinfo, CgroupRef{2, "/kubepods.sliceX/a"}));
  EXPECT_FALSE(memory_cgroup_dir(kNestedMountinfo, CgroupRef{1, "/kubepods.slice"}));
}

TEST(Cgroup, NoMemoryCgroup) {
  EXPECT_FALSE(parse_memory_cgroup("1:cpu:/\n"));
  EXPECT_FALSE(parse_memory_cgroup(""));
  EXPECT_FALSE(parse_memory_cgroup("garbage\n4:memory:relative\n"));
}

TEST(Cgroup, Limits) {
  EXPECT_EQ(parse_memory_limit("104857600\n"), 104857600u);
  EXPECT_FALSE(parse_memory_limit("max\n"));
  EXPECT_FALSE(parse_memory_limit("9223372036854771712\n"));  // v1's "unlimited"
  EXPECT_FALSE(parse_memory_limit("12abc"));
  EXPECT_FALSE(parse_memory_limit(""));
}

TEST(Cgroup, OomKills) {
  EXPECT_EQ(parse_oom_kills("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"), 3u);
  EXPECT_EQ(parse_oom_kills("low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\noom_group_kill 0\n"), 2u);
  EXPECT_EQ(parse_oom_kills("oom_kill_disable 1\n"), 0u);
}

TEST(Cgroup, MemAvailable) {
  EXPECT_EQ(parse_mem_available("MemTotal:       24570000 kB\nMemFree:  100 kB\nMemAvailable:   20000000 kB\n"),
            20000000ull * 1024);
  EXPECT_FALSE(parse_mem_available("MemTotal: 1 kB\n"));
}

TEST(Cgroup, ThisProcessOnThisHost) {
  // Live: whatever this machine has, a memory cgroup that is found must be readable and sane.
  if (const auto m = read_memory_cgroup(getpid())) {
    EXPECT_GT(m->usage_bytes, 0u);
    if (m->limit_bytes) {
      EXPECT_GT(*m->limit_bytes, 0u);
    }
  }
  EXPECT_TRUE(read_mem_available());
}
