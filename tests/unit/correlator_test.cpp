// SPDX-License-Identifier: Apache-2.0
// The correlator fed with recorded event sequences: one fork, two overlapping forks, a child that
// outlives the capture, a target that exits.
#include <gtest/gtest.h>

#include "correlate/correlator.h"
#include "events.h"

using namespace thptrace::correlate;
using thptrace::proc::SampleSeries;
using thptrace::redis::Snapshot;
using thptrace::test::episode;
using thptrace::test::exit_ev;
using thptrace::test::fork_ev;
using thptrace::test::fork_ret;
using thptrace::test::kParent;

TEST(Correlator, OneForkFromStartToExit) {
  Correlator c(kParent, {.kernel_splits = true});
  c.on_event(fork_ev(200, 1'000'000'000, REASON_BGSAVE));
  c.on_event(fork_ret(200, 999'000'000, 1'002'000'000));
  auto ep = episode(200, 1'000'000'000, 1'500'000'000, 4096, REASON_BGSAVE);
  c.on_event(exit_ev(ep));
  EXPECT_EQ(c.live_children(), 0u);
  const auto out = c.take_remaining(true);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].reason, Reason::bgsave);
  EXPECT_EQ(out[0].reason_source, "uprobe");
  EXPECT_EQ(out[0].cow_faults, 4096u);
  ASSERT_TRUE(out[0].fork_duration_us);
  EXPECT_DOUBLE_EQ(*out[0].fork_duration_us, 3000.0);  // from EV_FORK_RETURN: the exit record lacked it
  ASSERT_TRUE(out[0].child_lifetime_ms);
  EXPECT_DOUBLE_EQ(*out[0].child_lifetime_ms, 500.0);
}

TEST(Correlator, TwoOverlappingForksKeepTheirOwnCounts) {
  Correlator c(kParent, {.kernel_splits = true});
  c.on_event(fork_ev(201, 1000));
  c.on_event(fork_ev(202, 2000));
  c.on_event(exit_ev(episode(202, 2000, 5000, 7)));  // the second ends first
  c.on_event(exit_ev(episode(201, 1000, 9000, 11)));
  const auto out = c.take_remaining(true);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].child_pid, 201u);  // ordered by fork time
  EXPECT_EQ(out[0].cow_faults, 11u);
  EXPECT_EQ(out[1].child_pid, 202u);
  EXPECT_EQ(out[1].cow_faults, 7u);
}

TEST(Correlator, ChildAliveAtTheEndHasNoLifetime) {
  Correlator c(kParent, {.kernel_splits = true});
  c.on_event(fork_ev(300, 1000));
  EXPECT_EQ(c.live_children(), 1u);
  c.on_final_episode(episode(300, 1000, 0, 42));  // read from the map at the end
  const auto out = c.take_remaining(true);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_FALSE(out[0].complete());
  EXPECT_FALSE(out[0].child_lifetime_ms);
  EXPECT_EQ(out[0].cow_faults, 42u);
}

TEST(Correlator, TargetExitIsNotedAndOtherTargetsIgnored) {
  Correlator c(kParent, {.kernel_splits = true});
  thptrace_event other = fork_ev(400, 10);
  other.tgid = 999;
  c.on_event(other);
  thptrace_event gone{};
  gone.type = EV_TARGET_EXIT;
  gone.tgid = kParent;
  c.on_event(gone);
  EXPECT_TRUE(c.target_exited());
  EXPECT_TRUE(c.take_remaining(true).empty());
}

TEST(Correlator, ReasonsFromInfoWhenUprobesAreMissing) {
  auto snap = [](uint64_t ts, bool rdb, bool aof, int64_t sync_full, bool waiting) {
    Snapshot s;
    s.ts_ns = ts;
    s.up = true;
    s.rdb_bgsave_in_progress = rdb;
    s.aof_rewrite_in_progress = aof;
    s.sync_full = sync_full;
    s.replica_waiting_bgsave = waiting;
    return s;
  };
  // bgsave: rdb in progress, no replica.
  std::vector<Snapshot> t1 = {snap(100, false, false, 0, false), snap(200, true, false, 0, false), snap(300, false, false, 0, false)};
  EXPECT_EQ(reason_from_redis(t1, 150, 250, "no"), Reason::bgsave);
  // full sync: sync_full went up; disk or diskless from the config.
  std::vector<Snapshot> t2 = {snap(100, false, false, 0, false), snap(200, true, false, 1, true), snap(300, false, false, 1, false)};
  EXPECT_EQ(reason_from_redis(t2, 150, 250, "no"), Reason::full_sync_disk);
  EXPECT_EQ(reason_from_redis(t2, 150, 250, "yes"), Reason::full_sync_diskless);
  // aof rewrite.
  std::vector<Snapshot> t3 = {snap(100, false, false, 0, false), snap(200, false, true, 0, false)};
  EXPECT_EQ(reason_from_redis(t3, 150, 0, "no"), Reason::aof_rewrite);
  EXPECT_EQ(reason_from_redis({}, 150, 250, "no"), Reason::unknown);
}

TEST(Correlator, VmstatSplitsInFallbackMode) {
  SampleSeries s;
  for (uint64_t t : {0u, 1000u, 3000u}) {
    thptrace::proc::Sample x;
    x.ts_ns = t;
    x.thp_vmstat["thp_split_pmd"] = t == 0 ? 5 : 37;
    s.add(x);
  }
  Correlator c(kParent);
  for (const auto& x : s.samples()) c.on_sample(x);
  c.on_event(fork_ev(500, 500));
  c.on_event(exit_ev(episode(500, 500, 2000, 1)));
  const auto out = c.take_remaining(true);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].thp_splits, 32u);
  EXPECT_EQ(out[0].thp_splits_source, "vmstat");
}

// The daemon's use: an episode is taken once every fact of it is known, and only once.
TEST(Correlator, StreamingWaitsForAPollAfterTheExitToNameTheReason) {
  Correlator c(kParent,
               {.kernel_splits = true, .redis_polled = true, .repl_diskless_sync = "no", .bounded_history = true});
  auto poll = [](uint64_t sent, uint64_t ts, bool rdb, int64_t forks) {
    Snapshot s;
    s.sent_ns = sent;
    s.ts_ns = ts;
    s.up = true;
    s.rdb_bgsave_in_progress = rdb;
    s.total_forks = forks;
    return s;
  };
  c.on_snapshot(poll(90, 100, false, 0));
  c.on_event(fork_ev(600, 1'000));
  c.on_snapshot(poll(1'500, 1'600, true, 1));
  c.on_event(exit_ev(episode(600, 1'000, 2'000, 7)));
  EXPECT_TRUE(c.take_settled(2'100).empty());  // no poll sent after the exit yet
  c.on_snapshot(poll(2'500, 2'600, false, 1));
  const auto out = c.take_settled(2'700);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].reason, Reason::bgsave);
  EXPECT_EQ(out[0].reason_source, "info");
  EXPECT_EQ(out[0].cow_faults, 7u);
  EXPECT_TRUE(c.take_settled(3'000).empty());
  EXPECT_TRUE(c.take_remaining(true).empty());
}

TEST(Correlator, StreamingWaitsForAVmstatSampleAfterTheExitOrGivesUp) {
  Correlator c(kParent);
  auto sample = [](uint64_t ts, uint64_t splits) {
    thptrace::proc::Sample x;
    x.ts_ns = ts;
    x.thp_vmstat["thp_split_pmd"] = splits;
    return x;
  };
  c.on_sample(sample(100, 10));
  c.on_event(fork_ev(700, 1'000));
  c.on_event(exit_ev(episode(700, 1'000, 2'000, 1)));
  EXPECT_TRUE(c.take_settled(2'500).empty());
  c.on_sample(sample(3'000, 14));
  auto out = c.take_settled(3'000);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].thp_splits, 4u);
  // Without a later sample, the episode goes after Correlator::kSettleWaitNs with what is known.
  c.on_event(fork_ev(701, 4'000));
  c.on_event(exit_ev(episode(701, 4'000, 5'000, 1)));
  EXPECT_TRUE(c.take_settled(5'000 + Correlator::kSettleWaitNs - 1).empty());
  EXPECT_EQ(c.take_settled(5'000 + Correlator::kSettleWaitNs).size(), 1u);
}

TEST(Correlator, BoundedHistoryKeepsOnlyWhatAPendingForkNeeds) {
  Correlator c(kParent,
               {.kernel_splits = true, .redis_polled = true, .repl_diskless_sync = "", .bounded_history = true});
  const uint64_t s = 1'000'000'000;
  for (uint64_t t = 1; t <= 20; ++t) {
    Snapshot x;
    x.ts_ns = x.sent_ns = t * s;
    x.up = true;
    c.on_snapshot(x);
  }
  EXPECT_LE(c.timeline().size(), 7u);  // the last 5 s and a little
  EXPECT_GE(c.timeline().front().ts_ns, 14 * s);
  c.on_event(fork_ev(800, 21 * s));
  for (uint64_t t = 21; t <= 40; ++t) {
    Snapshot x;
    x.ts_ns = x.sent_ns = t * s;
    x.up = true;
    c.on_snapshot(x);
  }
  // The fork at 21 s is not taken yet: the history reaches back to 5 s before it.
  EXPECT_LE(c.timeline().front().ts_ns, 21 * s);
}

TEST(Correlator, AForgottenForkNoLongerPinsTheHistory) {
  Correlator c(kParent,
               {.kernel_splits = true, .redis_polled = true, .repl_diskless_sync = "", .bounded_history = true});
  const uint64_t s = 1'000'000'000;
  c.on_event(fork_ev(900, 1 * s));  // its child dies unseen
  c.on_event(fork_ev(901, 2 * s));  // its child exits normally
  c.on_event(exit_ev(episode(901, 2 * s, 3 * s, 10)));
  for (uint64_t t = 1; t <= 30; ++t) {
    Snapshot x;
    x.ts_ns = x.sent_ns = t * s;
    x.up = true;
    c.on_snapshot(x);
  }
  EXPECT_EQ(c.open_children(), std::vector<uint32_t>{900});
  EXPECT_LE(c.timeline().front().ts_ns, 1 * s);  // pinned by the open fork
  EXPECT_FALSE(c.forget(901));                   // exited: not open, stays to be taken
  const auto out = c.take_remaining(false);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].child_pid, 901u);
  EXPECT_LE(c.timeline().front().ts_ns, 1 * s);  // still pinned by the open fork
  EXPECT_TRUE(c.forget(900));
  EXPECT_TRUE(c.open_children().empty());
  EXPECT_GE(c.timeline().front().ts_ns, 24 * s);  // back to the last 5 s
  EXPECT_TRUE(c.take_remaining(true).empty());
}

// A child that lived between two polls: the first poll sent after its exit still shows it in
// progress (Redis reaps it at its next cron tick), and names it when it is the only fork between.
TEST(Correlator, ShortChildNamedByThePollAfterItsExit) {
  auto poll = [](uint64_t sent, uint64_t ts, int64_t forks, bool rdb, bool aof) {
    Snapshot s;
    s.sent_ns = sent;
    s.ts_ns = ts;
    s.up = true;
    s.total_forks = forks;
    s.rdb_bgsave_in_progress = rdb;
    s.aof_rewrite_in_progress = aof;
    return s;
  };
  const std::vector<Snapshot> aof = {poll(90, 100, 3, false, false), poll(260, 270, 4, false, true)};
  EXPECT_EQ(reason_from_redis(aof, 150, 250, "no"), Reason::aof_rewrite);
  const std::vector<Snapshot> rdb = {poll(90, 100, 3, false, false), poll(260, 270, 4, true, false)};
  EXPECT_EQ(reason_from_redis(rdb, 150, 250, "no"), Reason::bgsave);
  // Reaped already: only the fork count moved, which is all the poll after can say.
  const std::vector<Snapshot> reaped = {poll(90, 100, 3, false, false), poll(260, 270, 4, false, false)};
  EXPECT_EQ(reason_from_redis(reaped, 150, 250, "no"), Reason::bgsave);
  // Two forks between the polls: the state shown may be the next child's, so it names nothing.
  const std::vector<Snapshot> two = {poll(90, 100, 3, false, false), poll(260, 270, 5, false, true)};
  EXPECT_EQ(reason_from_redis(two, 150, 250, "no"), Reason::bgsave);
  // Reaped already, Redis ≥ 7.0: the counter of AOF rewrites started moved.
  auto rewrites = [&](const Snapshot& s, int64_t n) {
    Snapshot x = s;
    x.aof_rewrites = n;
    return x;
  };
  const std::vector<Snapshot> counted = {rewrites(poll(90, 100, 3, false, false), 2),
                                         rewrites(poll(260, 270, 4, false, false), 3)};
  EXPECT_EQ(reason_from_redis(counted, 150, 250, "no"), Reason::aof_rewrite);
  // A poll while the child lived decides; the one after is not read for its state.
  const std::vector<Snapshot> seen = {poll(90, 100, 3, false, false), poll(160, 170, 4, true, false),
                                      poll(260, 270, 4, false, true)};
  EXPECT_EQ(reason_from_redis(seen, 150, 250, "no"), Reason::bgsave);
}
