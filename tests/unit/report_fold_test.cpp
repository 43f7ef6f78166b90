// SPDX-License-Identifier: Apache-2.0
// A capture of a full-sync loop makes hundreds of forks: the text report and its findings must stay a
// summary (the worst and the most recent forks, one latency sentence), while the JSON keeps every fork.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include "report/report.h"

using namespace thptrace;

namespace {

report::Report report_with_forks(int n) {
  report::Report r;
  r.version = "0.1.0";
  r.system = {"6.18.0", "madvise", "madvise", {}};
  r.pid = 100;
  r.comm = "redis-server";
  r.duration_s = 15;
  r.rss_kb_max = 400000;
  for (int i = 0; i < n; ++i) {
    correlate::ForkEpisode e;
    e.child_pid = 1000 + i;
    e.reason = correlate::Reason::full_sync_disk;
    e.fork_duration_us = 5000;
    e.child_lifetime_ms = 20;
    e.cow_faults = static_cast<uint64_t>((i * 37) % n);  // fork 1000 + k has its own count
    correlate::LatencyWindow during, before;
    during.p50_us = 1;
    during.p999_us = i == 123 ? 4096 : 64;
    before.p50_us = 1;
    before.p999_us = 32;
    e.latency_during = during;
    e.latency_before = before;
    r.forks.push_back(e);
  }
  return r;
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}


}  // namespace

TEST(ReportFold, FewForksAreAllListedWithOneLatencySentenceEach) {
  const auto r = report_with_forks(3);
  const auto shown = report::shown_forks(r.forks);
  EXPECT_EQ(std::count(shown.begin(), shown.end(), true), 3);
  const auto f = report::finding_texts(r);
  EXPECT_EQ(std::count_if(f.begin(), f.end(), [](const std::string& s) { return s.rfind("During the", 0) == 0; }), 3);
}

TEST(ReportFold, FiveHundredForksFoldToTheWorstAndTheMostRecent) {
  const auto r = report_with_forks(500);
  const auto shown = report::shown_forks(r.forks);
  EXPECT_EQ(std::count(shown.begin(), shown.end(), true),
            static_cast<long>(report::kWorstForksShown + report::kRecentForksShown));
  // The most recent forks are shown, and so is every one of the ten with the most COW faults.
  for (size_t i = 495; i < 500; ++i) EXPECT_TRUE(shown[i]) << i;
  std::vector<uint64_t> cows;
  for (const auto& e : r.forks) cows.push_back(e.cow_faults);
  std::sort(cows.rbegin(), cows.rend());
  for (size_t i = 0; i < r.forks.size(); ++i) {
    if (r.forks[i].cow_faults > cows[report::kWorstForksShown]) {
      EXPECT_TRUE(shown[i]) << i;
    }
  }

  const auto text = report::to_text(r);
  const auto lines = lines_of(text);
  EXPECT_LT(lines.size(), 60u) << text;
  EXPECT_NE(text.find("485 more forks not shown"), std::string::npos) << text;

  const auto f = report::finding_texts(r);
  EXPECT_LE(f.size(), 10u);
  EXPECT_EQ(std::count_if(f.begin(), f.end(), [](const std::string& s) { return s.rfind("During the", 0) == 0; }), 0);
  const auto folded = std::find_if(f.begin(), f.end(), [](const std::string& s) { return s.rfind("In 500 of 500 fork windows", 0) == 0; });
  ASSERT_NE(folded, f.end());
  EXPECT_NE(folded->find("child 1123"), std::string::npos) << *folded;
  EXPECT_NE(folded->find("≤ 4096 µs"), std::string::npos) << *folded;

  // The JSON keeps every fork.
  EXPECT_EQ(report::to_json(r)["forks"].size(), 500u);
}
