// SPDX-License-Identifier: Apache-2.0
// The folio walk (proc/folios.h) over a known workload (dirty_after_fork: 64 MiB of memory made of
// 2 MiB pages where THP gives them, MADV_HUGEPAGE), whole and sampled: a walk on a budget of lookups
// reads one PMD-sized window of address space in N and counts each for N, so it lands within a
// window's worth (N × 2 MiB) per mapping of the whole walk's answer.
#include <gtest/gtest.h>

#include <fstream>
#include <iostream>
#include <string>

#include "harness.h"
#include "proc/folios.h"
#include "proc/proc.h"

using namespace thptrace;
using namespace thptrace::test;
using namespace std::chrono_literals;

namespace {

constexpr uint64_t kPages = 16384;  // 64 MiB

std::string thp_enabled() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string s;
  std::getline(in, s);
  return s;
}

}  // namespace

TEST(FolioWalk, SampledWalkLandsWithinAWindowPerMappingOfTheWholeWalk) {
  if (thp_enabled().find("[never]") != std::string::npos) GTEST_SKIP() << "THP is never on this host";
  Process work({workload_bin(), std::to_string(kPages), "100", "thp"});
  ASSERT_TRUE(work.wait_stdout_line("ready", 20s)) << work.err();
  std::string why;
  auto walker = proc::FolioWalker::open(work.pid(), &why);
  ASSERT_TRUE(walker) << why;
  const auto whole = walker->walk(&why);
  ASSERT_TRUE(whole) << why;
  const auto rollup = proc::read_smaps_rollup(work.pid());
  ASSERT_TRUE(rollup);
  // A budget of 2,048 lookups against some 17,000 resident pages: one window in 9 or so.
  const auto sampled = walker->walk(&why, 2048);
  ASSERT_TRUE(sampled) << why;
  work.write_stdin("go\n");
  EXPECT_TRUE(work.wait_stdout_line("done", 30s));
  EXPECT_EQ(work.wait(10s), 0);

  std::cout << "whole: every " << whole->every << " total " << whole->total_kb() << " kB, 2 MiB "
            << whole->kb.count(2048) << "; sampled: every " << sampled->every << " total " << sampled->total_kb()
            << " kB in " << sampled->walk_ns / 1000 << " µs against " << whole->walk_ns / 1000 << " µs" << std::endl;
  EXPECT_EQ(whole->every, 1u);
  ASSERT_GT(sampled->every, 1u);
  EXPECT_GE(whole->total_kb(), kPages * 4);
  // The region's 2 MiB pages (all of them PMD-mapped: nothing split them): the whole walk finds each.
  const uint64_t huge_kb = whole->kb.count(2048) ? whole->kb.at(2048) : 0;
  EXPECT_GE(huge_kb, rollup->anon_huge_pages_kb);
  // The sampled walk: within `every` windows of 2 MiB of the whole walk for the region (one mapping,
  // whose ends may cut a window), and for the rest of the process, a few mappings of a few pages each.
  const double window_kb = 2048.0 * static_cast<double>(sampled->every);
  const uint64_t sampled_huge_kb = sampled->kb.count(2048) ? sampled->kb.at(2048) : 0;
  EXPECT_NEAR(static_cast<double>(sampled_huge_kb), static_cast<double>(huge_kb), 2 * window_kb);
  EXPECT_NEAR(static_cast<double>(sampled->total_kb()), static_cast<double>(whole->total_kb()),
              0.15 * static_cast<double>(whole->total_kb()) + 2 * window_kb);
}
