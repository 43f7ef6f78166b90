// SPDX-License-Identifier: Apache-2.0
// How long a fork stopped its parent, by cause: the freeze (the fork's own duration), the copies
// (timed by the kernel under fentry, else the copies times a copy's cost measured at start-up),
// compaction and reclaim; per fork and added up, in the JSON and the text report.
#include <gtest/gtest.h>

#include "events.h"
#include "report/report.h"

using namespace thptrace;

namespace {

constexpr uint64_t kS = 1'000'000'000;

// One fork at 1 s, 2 ms in libc's fork(), whose child lives 2 s while the parent takes 1,000 copies
// and stalls 3 ms in direct compaction; `fault_ns` is what fentry timed of those faults (0: none).
report::CaptureInputs inputs(tracer::Mode cow_mode, uint64_t fault_ns, std::optional<double> copy_cost_ns) {
  report::CaptureInputs in;
  in.pid = 100;
  in.comm = "redis-server";
  in.start_ns = 0;
  in.end_ns = 5 * kS;
  in.probes.cow_fault.mode = cow_mode;
  in.copy_cost_ns = copy_cost_ns;
  in.events.push_back(test::fork_ev(200, 1 * kS));
  thptrace_event exit = test::exit_ev(test::episode(200, 1 * kS, 3 * kS, 1'000));
  exit.episode.libc_fork_ns = 2'000'000;
  exit.episode.compaction_stalls = 1;
  exit.episode.compaction_ns = 3'000'000;
  if (fault_ns) {
    exit.episode.faults.ns_total = fault_ns;
    exit.episode.faults.ns_count = 1'000;
  }
  in.events.push_back(exit);
  return in;
}

}  // namespace

TEST(Stalls, TracepointModesEstimateCopiesFromTheMeasuredCost) {
  const auto r = report::assemble(inputs(tracer::Mode::raw_tp, 0, 1500.0));
  ASSERT_EQ(r.forks.size(), 1u);
  const auto j = report::to_json(r);
  const auto& s = j["forks"][0]["stall_ms"];
  EXPECT_DOUBLE_EQ(s["freeze"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(s["copies"].get<double>(), 1.5);  // 1,000 copies at 1.5 µs
  EXPECT_EQ(s["copies_source"], "estimate");
  EXPECT_DOUBLE_EQ(s["compaction"].get<double>(), 3.0);
  EXPECT_DOUBLE_EQ(s["reclaim"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(j["totals"]["stall_ms"]["copies"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(j["capture"]["copy_cost_ns"].get<double>(), 1500.0);
  const auto text = report::to_text(r);
  EXPECT_NE(text.find("stalled: fork 2.0 ms, copies ~1.5 ms (estimated: 1000 at 1500 ns"), std::string::npos) << text;
  // What report writes, bench reads back equal.
  EXPECT_EQ(report::to_json(report::from_json(j)), j);
}

TEST(Stalls, FentryTimesTheCopiesAndNeedsNoEstimate) {
  const auto r = report::assemble(inputs(tracer::Mode::fentry, 4'200'000, std::nullopt));
  const auto j = report::to_json(r);
  const auto& s = j["forks"][0]["stall_ms"];
  EXPECT_DOUBLE_EQ(s["copies"].get<double>(), 4.2);
  EXPECT_EQ(s["copies_source"], "kernel");
  EXPECT_FALSE(j["capture"].contains("copy_cost_ns"));
  EXPECT_NE(report::to_text(r).find("stalled: fork 2.0 ms, copies 4.2 ms,"), std::string::npos);
}

TEST(Stalls, UnknownCopiesAreNullNotZero) {
  const auto j = report::to_json(report::assemble(inputs(tracer::Mode::raw_tp, 0, std::nullopt)));
  EXPECT_TRUE(j["forks"][0]["stall_ms"]["copies"].is_null());
  EXPECT_EQ(j["forks"][0]["stall_ms"]["copies_source"], "");
  EXPECT_TRUE(j["totals"]["stall_ms"]["copies"].is_null());
  EXPECT_DOUBLE_EQ(j["totals"]["stall_ms"]["freeze"].get<double>(), 2.0);
}
