// SPDX-License-Identifier: Apache-2.0
// The backoff every Redis failure takes (redis/backoff.h), on a clock the test drives.
#include <gtest/gtest.h>

#include "redis/backoff.h"

namespace thptrace::redis {
namespace {

using namespace std::chrono_literals;
using Clock = Backoff::Clock;

TEST(Backoff, DoublesUpToItsCapAndResetsOnSuccess) {
  Backoff b(1000ms, 30'000ms);
  const auto t0 = Clock::time_point{} + 1h;
  EXPECT_TRUE(b.due(t0));
  std::vector<long> waits;
  waits.reserve(8);
  for (int i = 0; i < 8; ++i) waits.push_back(static_cast<long>(b.failed(t0).count()));
  EXPECT_EQ(waits, (std::vector<long>{1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000}));
  EXPECT_EQ(b.failures(), 8u);
  EXPECT_FALSE(b.due(t0 + 29s));
  EXPECT_TRUE(b.due(t0 + 30s));
  b.succeeded();
  EXPECT_TRUE(b.due(t0));
  EXPECT_EQ(b.failures(), 0u);
  EXPECT_EQ(b.failed(t0), 1000ms);
}

TEST(Backoff, ACapBelowTheFirstWaitIsTheFirstWait) {
  Backoff b(500ms, 100ms);
  const auto t0 = Clock::time_point{} + 1h;
  EXPECT_EQ(b.failed(t0), 500ms);
  EXPECT_EQ(b.failed(t0), 500ms);
}

TEST(OptionalCommand, ARefusalIsToldOncePerReasonAndAskedAgainLater) {
  OptionalCommand c;
  const auto t0 = Clock::time_point{} + 1h;
  EXPECT_TRUE(c.due(t0));
  EXPECT_TRUE(c.fail(t0, "LATENCY HISTOGRAM refused: ERR unknown subcommand"));
  EXPECT_FALSE(c.due(t0 + 500ms));
  EXPECT_TRUE(c.due(t0 + 1s));
  EXPECT_FALSE(c.fail(t0 + 1s, "LATENCY HISTOGRAM refused: ERR unknown subcommand"));  // same reason: not again
  EXPECT_FALSE(c.due(t0 + 2500ms));                                                    // 2 s this time
  EXPECT_TRUE(c.fail(t0 + 3s, "LATENCY HISTOGRAM refused: NOPERM"));                   // a new reason is told
  EXPECT_TRUE(c.answered());
  EXPECT_EQ(c.refused, "");
  EXPECT_FALSE(c.answered());
  EXPECT_TRUE(c.due(t0 + 3s));
}

}  // namespace
}  // namespace thptrace::redis
