// SPDX-License-Identifier: Apache-2.0
// The pollers' cadence (common/cadence.h): slow while no fork is in progress, a poll at once on
// each kernel report, fast while a fork lasts and for a short tail after it.
#include <gtest/gtest.h>

#include "common/cadence.h"

using thptrace::Cadence;
using namespace std::chrono_literals;

namespace {

const Cadence::Clock::time_point t0 = Cadence::Clock::time_point{} + 1000s;

}  // namespace

TEST(Cadence, FirstPollAtOnceThenIdle) {
  Cadence c(100ms, 1000ms);
  EXPECT_EQ(c.next_due(t0), t0);
  c.on_sent(t0);
  EXPECT_EQ(c.next_due(t0 + 1ms), t0 + 1000ms);
  EXPECT_EQ(c.interval(t0), 1000ms);
}

TEST(Cadence, ForkWakesAtOnceAndPollsFastUntilTheExitAndTail) {
  Cadence c(100ms, 1000ms);
  c.on_sent(t0);
  // The fork event: a poll right away (the last one was long enough ago), then every 100 ms.
  c.wake(t0 + 400ms, true);
  EXPECT_TRUE(c.busy());
  EXPECT_LE(c.next_due(t0 + 400ms), t0 + 400ms);
  c.on_sent(t0 + 400ms);
  EXPECT_FALSE(c.woken());
  EXPECT_EQ(c.next_due(t0 + 401ms), t0 + 500ms);
  c.on_sent(t0 + 500ms);
  // The child's exit: one poll at once, then fast for the tail, then idle again.
  c.wake(t0 + 530ms, false);
  EXPECT_FALSE(c.busy());
  EXPECT_LE(c.next_due(t0 + 530ms), t0 + 530ms);
  c.on_sent(t0 + 530ms);
  EXPECT_EQ(c.next_due(t0 + 531ms), t0 + 630ms);
  const auto after_tail = t0 + 530ms + Cadence::kTail + 1ms;
  c.on_sent(after_tail - 50ms);
  EXPECT_EQ(c.next_due(after_tail), after_tail - 50ms + 1000ms);
}

TEST(Cadence, AWakeDuringAPollGetsAPollOfItsOwnNoSoonerThanTheMinimumGap) {
  Cadence c(100ms, 1000ms);
  c.on_sent(t0);
  // The exit is reported while the poll sent at t0 is in flight: that poll was sent before the
  // exit, so another one follows, kMinGap after it.
  c.wake(t0 + 1ms, false);
  EXPECT_EQ(c.next_due(t0 + 1ms), t0 + Cadence::kMinGap);
  // A storm of wakes gives one poll per kMinGap, not a busy loop.
  for (int i = 0; i < 100; ++i) c.wake(t0 + 2ms, true);
  EXPECT_EQ(c.next_due(t0 + 2ms), t0 + Cadence::kMinGap);
}

TEST(Cadence, BusySetByTheDaemonSpeedsUpAnIdleWait) {
  Cadence c(100ms, 1000ms);
  c.on_sent(t0);
  // A fork the daemon learnt of without an event of its own (housekeeping): no extra poll, but the
  // wait already begun is cut to the fast interval.
  c.set_busy(t0 + 10ms, true);
  EXPECT_FALSE(c.woken());
  EXPECT_EQ(c.next_due(t0 + 10ms), t0 + 100ms);
  // An exit record lost and the fork forgotten: fast for the tail, then idle.
  c.set_busy(t0 + 200ms, false);
  EXPECT_EQ(c.interval(t0 + 300ms), 100ms);
  EXPECT_EQ(c.interval(t0 + 200ms + Cadence::kTail), 1000ms);
}

TEST(Cadence, IdleEqualToFastIsAConstantCadence) {
  Cadence c(100ms, 100ms);
  c.on_sent(t0);
  EXPECT_EQ(c.next_due(t0), t0 + 100ms);
  c.set_busy(t0, true);
  EXPECT_EQ(c.next_due(t0), t0 + 100ms);
  // An idle interval below the fast one is taken as the fast one.
  Cadence d(100ms, 10ms);
  d.on_sent(t0);
  EXPECT_EQ(d.next_due(t0), t0 + 100ms);
}

TEST(Cadence, IdlePollsCarryTheExtrasOnlyOnTheirOwnCadence) {
  Cadence c(100ms, 1000ms, 10s);
  // The first poll of a connection asks everything; idle polls after it INFO alone, until 10 s on.
  EXPECT_TRUE(c.on_sent(t0));
  EXPECT_FALSE(c.on_sent(t0 + 1s));
  EXPECT_FALSE(c.on_sent(t0 + 9s));
  EXPECT_TRUE(c.on_sent(t0 + 10s));
  EXPECT_FALSE(c.on_sent(t0 + 11s));
  // A woken poll (a fork, an exit) and every poll while the fork lasts and its tail ask everything:
  // a fork's reason and latency window are read at fork speed.
  c.wake(t0 + 11500ms, true);
  EXPECT_TRUE(c.on_sent(t0 + 11500ms));
  EXPECT_TRUE(c.on_sent(t0 + 11600ms));
  c.set_busy(t0 + 11650ms, false);
  EXPECT_TRUE(c.on_sent(t0 + 11700ms));
  EXPECT_FALSE(c.on_sent(t0 + 11650ms + Cadence::kTail + 100ms));
  // A new connection (a restarted server, maybe): its first poll asks everything again.
  c.on_connected();
  EXPECT_TRUE(c.on_sent(t0 + 14s));
  EXPECT_FALSE(c.on_sent(t0 + 15s));
  // No extras interval (a capture): every poll asks everything.
  Cadence d(100ms, 100ms);
  EXPECT_TRUE(d.on_sent(t0));
  EXPECT_TRUE(d.on_sent(t0 + 100ms));
}

TEST(Cadence, BusyUnchangedIsNotAChange) {
  Cadence c(100ms, 1000ms);
  // The daemon tells every watcher once a second: only a change wakes the poller.
  EXPECT_FALSE(c.set_busy(t0, false));
  EXPECT_TRUE(c.set_busy(t0, true));
  EXPECT_FALSE(c.set_busy(t0 + 1s, true));
  EXPECT_TRUE(c.set_busy(t0 + 2s, false));
}

TEST(Cadence, TheServerHoldsItFastBeforeTheForkAndAfterTheExit) {
  Cadence c(100ms, 1000ms);
  c.on_sent(t0);
  // An idle poll sees a replica waiting for its RDB (repl-diskless-sync-delay): fast from there on,
  // though the kernel has reported no fork.
  EXPECT_TRUE(c.hold(t0, true));
  EXPECT_FALSE(c.hold(t0 + 100ms, true));
  EXPECT_EQ(c.next_due(t0 + 1ms), t0 + 100ms);
  // The fork and the child's exit come and go while the server still holds (the replica receives
  // its RDB): still fast, with no tail begun.
  c.wake(t0 + 200ms, true);
  c.on_sent(t0 + 200ms);
  c.wake(t0 + 5s, false);
  c.on_sent(t0 + 5s);
  EXPECT_EQ(c.next_due(t0 + 5s + 1ms), t0 + 5s + 100ms);
  c.on_sent(t0 + 20s);
  EXPECT_EQ(c.next_due(t0 + 20s + 1ms), t0 + 20s + 100ms);
  // The replica is online: the tail, then idle.
  EXPECT_TRUE(c.hold(t0 + 20s, false));
  EXPECT_TRUE(c.fast(t0 + 20s + Cadence::kTail - 1ms));
  EXPECT_FALSE(c.fast(t0 + 20s + Cadence::kTail));
  c.on_sent(t0 + 22s);
  EXPECT_EQ(c.next_due(t0 + 22s + 1ms), t0 + 23s);
}

TEST(Cadence, TheTailStartsWhenTheLastOfBusyAndHeldEnds) {
  Cadence c(100ms, 1000ms);
  c.set_busy(t0, true);
  c.hold(t0 + 1s, true);
  c.set_busy(t0 + 2s, false);  // still held: no tail yet
  c.hold(t0 + 10s, false);
  EXPECT_TRUE(c.fast(t0 + 10s + Cadence::kTail - 1ms));
  EXPECT_FALSE(c.fast(t0 + 10s + Cadence::kTail));
}
