// SPDX-License-Identifier: Apache-2.0
// The open-loop schedule with injected times: intended send times, and what coordinated-omission
// correction does to the percentiles when the "server" stalls.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <stdexcept>

#include "loadgen/histogram.h"
#include "loadgen/schedule.h"

namespace thptrace::loadgen {
namespace {

using namespace std::chrono_literals;
using time_point = OpenLoopSchedule::time_point;

// An arbitrary, non-zero origin: nothing may assume t0 is the clock's epoch.
const time_point t0 = time_point(123'456'789ns);

TEST(LoadgenSchedule, IntendedSendTimesAreEvenlySpacedFromStart) {
  const OpenLoopSchedule s(1000, t0);
  EXPECT_EQ(s.intended_send_time(0), t0);
  EXPECT_EQ(s.intended_send_time(1), t0 + 1ms);
  EXPECT_EQ(s.intended_send_time(250), t0 + 250ms);
  EXPECT_EQ(s.intended_send_time(1000), t0 + 1s);
}

TEST(LoadgenSchedule, FractionalIntervalsDoNotDrift) {
  // 1/3 s is not a whole number of nanoseconds; computing each time from i keeps every third
  // request exactly on the second, even after a billion requests.
  const OpenLoopSchedule s(3, t0);
  EXPECT_EQ(s.intended_send_time(1), t0 + 333'333'333ns);
  EXPECT_EQ(s.intended_send_time(2), t0 + 666'666'667ns);
  EXPECT_EQ(s.intended_send_time(3), t0 + 1s);
  EXPECT_EQ(s.intended_send_time(3'000'000'000ULL), t0 + 1'000'000'000s);
}

TEST(LoadgenSchedule, SendTimeWaitsForScheduleOrForThePreviousReply) {
  const OpenLoopSchedule s(100, t0);  // every 10 ms
  // Ahead of schedule: wait for the intended time.
  EXPECT_EQ(s.send_time(5, t0 + 1ms), t0 + 50ms);
  // Behind (the previous reply came late): send at once.
  EXPECT_EQ(s.send_time(5, t0 + 73ms), t0 + 73ms);
}

TEST(LoadgenSchedule, CorrectedLatencyCountsFromIntendedSendTime) {
  const OpenLoopSchedule s(100, t0);
  // Request 5 was due at 50 ms but could only be sent at 73 ms and was answered at 74 ms:
  // its user waited 24 ms, not the 1 ms round trip.
  EXPECT_EQ(s.corrected_latency(5, t0 + 74ms), 24ms);
  // A completion before the intended time cannot happen; it clamps to zero, never wraps.
  EXPECT_EQ(s.corrected_latency(5, t0 + 40ms), 0ns);
}

TEST(LoadgenSchedule, RequestsDueBeforeIsTheInverseOfIntendedSendTime) {
  const OpenLoopSchedule s(3, t0);
  EXPECT_EQ(s.requests_due_before(t0 - 1s), 0u);
  EXPECT_EQ(s.requests_due_before(t0), 0u);
  EXPECT_EQ(s.requests_due_before(t0 + 1ns), 1u);
  EXPECT_EQ(s.requests_due_before(t0 + 1s), 3u);
  EXPECT_EQ(s.requests_due_before(t0 + 1s + 1ns), 4u);
  for (uint64_t i = 0; i < 1000; ++i) {
    EXPECT_EQ(s.requests_due_before(s.intended_send_time(i)), i);
    EXPECT_EQ(s.requests_due_before(s.intended_send_time(i) + 1ns), i + 1);
  }
}

TEST(LoadgenSchedule, RejectsNonPositiveRates) {
  EXPECT_THROW(OpenLoopSchedule(0, t0), std::invalid_argument);
  EXPECT_THROW(OpenLoopSchedule(-5, t0), std::invalid_argument);
}

// A simulated probe against a server answering in `service` except during [stall_begin,
// stall_end), when nothing is answered until the stall ends — as under DEBUG SLEEP or a slow fork.
struct StallSimulation {
  LogLinearHistogram corrected;    // open loop, from the intended send time
  LogLinearHistogram uncorrected;  // same requests, from the actual send time
  LogLinearHistogram closed_loop;  // a closed-loop probe over the same period
};

StallSimulation simulate_stall(double rate, std::chrono::nanoseconds run, std::chrono::nanoseconds service,
                               std::chrono::nanoseconds stall_begin, std::chrono::nanoseconds stall_end) {
  auto answer = [&](time_point sent) {
    const auto since = sent - t0;
    if (since >= stall_begin && since < stall_end) return t0 + stall_end + service;
    return sent + service;
  };
  StallSimulation sim;
  const OpenLoopSchedule s(rate, t0);
  time_point previous = t0;
  for (uint64_t i = 0; s.intended_send_time(i) < t0 + run; ++i) {
    const time_point sent = s.send_time(i, previous);
    const time_point done = answer(sent);
    sim.corrected.record(static_cast<uint64_t>(s.corrected_latency(i, done).count()));
    sim.uncorrected.record(static_cast<uint64_t>(std::chrono::nanoseconds(done - sent).count()));
    previous = done;
  }
  for (time_point sent = t0; sent < t0 + run;) {
    const time_point done = answer(sent);
    sim.closed_loop.record(static_cast<uint64_t>(std::chrono::nanoseconds(done - sent).count()));
    sent = done;
  }
  return sim;
}

TEST(LoadgenSchedule, CorrectedPercentilesSeeAStallThatUncorrectedOnesHide) {
  // 1000 req/s for 10 s with 100 µs service times; the server freezes for 500 ms at 5 s.
  const StallSimulation sim = simulate_stall(1000, 10s, 100us, 5s, 5500ms);
  ASSERT_EQ(sim.corrected.count(), 10'000u);

  // Corrected: the ~500 requests due during the stall waited 500 ms down to 0 ms, i.e. 5% of all
  // requests, so p99 (top 100) is above 400 ms and p99.9 close to the whole stall.
  EXPECT_GT(sim.corrected.percentile(99), 395'000'000u);
  EXPECT_GT(sim.corrected.percentile(99.9), 490'000'000u);
  EXPECT_NEAR(static_cast<double>(sim.corrected.max()), 500e6, 0.01 * 500e6);
  EXPECT_NEAR(static_cast<double>(sim.corrected.percentile(50)), 100e3, 1e3);  // the median is untouched

  // Uncorrected: only the one request in flight saw the stall; p99 and p99.9 are the service time.
  EXPECT_NEAR(static_cast<double>(sim.uncorrected.percentile(99)), 100e3, 1e3);
  EXPECT_NEAR(static_cast<double>(sim.uncorrected.percentile(99.9)), 100e3, 1e3);
  EXPECT_NEAR(static_cast<double>(sim.uncorrected.max()), 500e6, 0.01 * 500e6);

  // A closed-loop probe hides it the same way, among even more fast samples.
  EXPECT_NEAR(static_cast<double>(sim.closed_loop.percentile(99.9)), 100e3, 1e3);
  EXPECT_NEAR(static_cast<double>(sim.closed_loop.max()), 500e6, 0.01 * 500e6);
}

TEST(LoadgenSchedule, WithoutAStallCorrectedEqualsUncorrected) {
  const StallSimulation sim = simulate_stall(1000, 2s, 100us, 10s, 10s);
  for (double p : {50.0, 99.0, 99.9, 100.0}) EXPECT_EQ(sim.corrected.percentile(p), sim.uncorrected.percentile(p));
}

}  // namespace
}  // namespace thptrace::loadgen
