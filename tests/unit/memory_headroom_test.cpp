// SPDX-License-Identifier: Apache-2.0
// The memory section of a report, from recorded-style inputs: the cgroup's limit and the highest
// usage sampled, the copies the forks made, and the finding when usage came within 20% of the limit.
#include <gtest/gtest.h>

#include "events.h"
#include "report/report.h"

using namespace thptrace;

namespace {

constexpr uint64_t kS = 1'000'000'000;
constexpr uint64_t kMiB = 1 << 20;

// One fork at 1 s whose child lives 2 s while the parent takes 25,600 copy-on-write faults (100 MiB),
// and samples every 0.5 s whose cgroup usage climbs from 300 MiB to peak_mib.
report::CaptureInputs inputs(std::optional<uint64_t> limit_mib, uint64_t peak_mib, uint64_t oom_before = 0,
                             uint64_t oom_after = 0) {
  report::CaptureInputs in;
  in.pid = 100;
  in.comm = "redis-server";
  in.start_ns = 0;
  in.end_ns = 5 * kS;
  in.events.push_back(test::fork_ev(200, 1 * kS));
  thptrace_event exit = test::exit_ev(test::episode(200, 1 * kS, 3 * kS, 25'600));
  in.events.push_back(exit);
  for (uint64_t i = 0; i <= 10; i++) {
    proc::Sample s;
    s.ts_ns = i * kS / 2;
    s.target_alive = true;
    s.rss_kb = 300 * 1024;
    s.cgroup_usage_bytes = (300 + (peak_mib - 300) * std::min<uint64_t>(i, 6) / 6) * kMiB;
    s.mem_available_bytes = (8000 - i) * kMiB;
    in.samples.add(s);
  }
  proc::CgroupMemory c;
  c.version = 1;
  c.dir = "/sys/fs/cgroup/memory/redis";
  if (limit_mib) c.limit_bytes = *limit_mib * kMiB;
  c.usage_bytes = 300 * kMiB;
  c.oom_kills = oom_before;
  in.cgroup_start = c;
  c.peak_bytes = (peak_mib + 1) * kMiB;
  c.oom_kills = oom_after;
  in.cgroup_end = c;
  return in;
}

bool has_finding(const report::Report& r, const std::string& part) {
  for (const auto& f : report::finding_texts(r))
    if (f.find(part) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST(MemoryHeadroom, FiguresFromTheCgroupAndTheSamples) {
  const auto r = report::assemble(inputs(1000, 450));
  ASSERT_TRUE(r.memory.cgroup);
  EXPECT_EQ(r.memory.cgroup->version, 1);
  EXPECT_EQ(r.memory.cgroup->limit_bytes, 1000 * kMiB);
  EXPECT_EQ(r.memory.cgroup->usage_max_bytes, 450 * kMiB);
  EXPECT_EQ(r.memory.cgroup->peak_bytes, 451 * kMiB);
  EXPECT_EQ(r.memory.cgroup->headroom_bytes(), 550 * kMiB);
  EXPECT_EQ(r.memory.copied_bytes, 100 * kMiB);
  EXPECT_DOUBLE_EQ(r.memory.fork_window_s, 2.0);
  EXPECT_EQ(r.memory.mem_available_min_bytes, 7990 * kMiB);
  EXPECT_FALSE(has_finding(r, "memory cgroup"));  // 45% of the limit
  const auto j = report::to_json(r);
  EXPECT_EQ(j["memory"]["cgroup"]["headroom_bytes"], 550 * kMiB);
  EXPECT_EQ(report::to_json(report::from_json(j)), j);
}

TEST(MemoryHeadroom, WithinTwentyPercentOfTheLimitIsAFindingWithTheTimeLeft) {
  const auto r = report::assemble(inputs(1000, 850));
  // 150 MiB left at 50 MiB/s (100 MiB copied over a 2 s child): about 3 s of a fork.
  EXPECT_TRUE(has_finding(r, "peaked at 850.0 MiB, 85% of its 1000.0 MiB limit")) << report::finding_texts(r)[0];
  EXPECT_TRUE(has_finding(r, "(50.0 MiB/s while a child lived), the 150.0 MiB left would last about 3 s"));
  EXPECT_NE(report::to_text(r).find("memory cgroup v1 /sys/fs/cgroup/memory/redis: limit 1000.0 MiB, usage peak 850.0 "
                                    "MiB (85% of it), oom kills 0"),
            std::string::npos);
}

TEST(MemoryHeadroom, NoLimitNoFindingAndOomKillsDuringTheCaptureAreCounted) {
  auto r = report::assemble(inputs(std::nullopt, 990));
  EXPECT_FALSE(r.memory.cgroup->headroom_bytes());
  EXPECT_FALSE(has_finding(r, "memory cgroup's usage"));
  r = report::assemble(inputs(1000, 500, 2, 5));
  EXPECT_EQ(r.memory.cgroup->oom_kills, 3u);
  EXPECT_TRUE(has_finding(r, "OOM-killed 3 process(es)"));
}

TEST(MemoryHeadroom, NoCgroupReadIsNull) {
  auto in = inputs(1000, 500);
  in.cgroup_start.reset();
  in.cgroup_end.reset();
  const auto r = report::assemble(in);
  EXPECT_FALSE(r.memory.cgroup);
  EXPECT_TRUE(report::to_json(r)["memory"]["cgroup"].is_null());
}
