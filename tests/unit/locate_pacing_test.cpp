// SPDX-License-Identifier: Apache-2.0
// The daemon's pace of searches for a server's process (daemon/locator.h): one at a time, a few
// seconds apart, however often the server's process_id changes.
#include <gtest/gtest.h>

#include "daemon/locator.h"

using thptrace::daemon::LocatePacing;
using namespace std::chrono_literals;

TEST(LocatePacing, OneAtATimeAndSpacedWhateverTheCallsSay) {
  LocatePacing p(5000ms);
  const auto t0 = LocatePacing::Clock::time_point{} + 1h;
  EXPECT_TRUE(p.try_start(t0));  // the first one at once
  EXPECT_TRUE(p.in_flight());
  EXPECT_FALSE(p.try_start(t0 + 6s));  // still running: no second one beside it
  p.finished();
  EXPECT_TRUE(p.try_start(t0 + 6s));
  p.finished();
  // A poll every 100 ms with a new process_id each: 100 calls in 10 s start two searches.
  int started = 0;
  for (int i = 1; i <= 100; ++i)
    if (p.try_start(t0 + 6s + i * 100ms)) {
      ++started;
      p.finished();
    }
  EXPECT_EQ(started, 2);
}

TEST(LocatePacing, AFinishedSearchDoesNotShortenTheGap) {
  LocatePacing p(5000ms);
  const auto t0 = LocatePacing::Clock::time_point{} + 1h;
  ASSERT_TRUE(p.try_start(t0));
  p.finished();
  EXPECT_FALSE(p.try_start(t0 + 4999ms));
  EXPECT_TRUE(p.try_start(t0 + 5000ms));
}

TEST(LocatePacing, AnExitedProcessIsSearchedForAtOnce) {
  LocatePacing p(5000ms);
  const auto t0 = LocatePacing::Clock::time_point{} + 1h;
  ASSERT_TRUE(p.try_start(t0));
  p.finished();
  p.process_gone();
  EXPECT_TRUE(p.try_start(t0 + 100ms));
  EXPECT_FALSE(p.try_start(t0 + 200ms));  // still running
}
