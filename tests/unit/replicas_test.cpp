// SPDX-License-Identifier: Apache-2.0
// The replicas' syncs read from INFO replication polls, and the fork each one got: three replicas
// on one disk fork, a replica that waits for the next fork, a replica dropped and synced again,
// the parsers of the replica lines, CONFIG GET client-output-buffer-limit and CLIENT LIST.
#include <gtest/gtest.h>

#include "correlate/correlator.h"
#include "correlate/replicas.h"
#include "redis/parse.h"

using namespace thptrace::correlate;
using thptrace::redis::ReplicaInfo;
using thptrace::redis::Snapshot;

namespace {

constexpr uint32_t kParent = 100;
constexpr uint64_t kMs = 1'000'000;

Snapshot poll(uint64_t ms, std::vector<ReplicaInfo> replicas) {
  Snapshot s;
  s.up = true;
  s.ts_ns = ms * kMs;
  s.sent_ns = s.ts_ns - kMs;
  s.replicas = std::move(replicas);
  return s;
}

ReplicaInfo rep(int port, const char* state, int64_t offset = 0) { return {"127.0.0.1", port, state, offset, 0}; }

thptrace_episode episode(uint32_t child, uint64_t fork_ms, uint64_t exit_ms, uint32_t reason) {
  thptrace_episode ep{};
  ep.parent_tgid = kParent;
  ep.child_pid = child;
  ep.fork_ts_ns = fork_ms * kMs;
  ep.exit_ts_ns = exit_ms * kMs;
  ep.reason = reason;
  return ep;
}

thptrace_event exit_ev(const thptrace_episode& ep) {
  thptrace_event e{};
  e.type = EV_CHILD_EXIT;
  e.tgid = kParent;
  e.child_pid = ep.child_pid;
  e.ts_ns = ep.exit_ts_ns;
  e.episode = ep;
  return e;
}

}  // namespace

TEST(Replicas, ThreeReplicasOnOneDiskFork) {
  Correlator c(kParent);
  // 6381 asks at ~150 ms and the fork starts at 160 ms; 6382 and 6383 ask a poll later and ride it.
  c.on_snapshot(poll(100, {}));
  c.on_snapshot(poll(200, {rep(6381, "wait_bgsave")}));
  c.on_snapshot(poll(300, {rep(6381, "wait_bgsave"), rep(6382, "wait_bgsave"), rep(6383, "wait_bgsave")}));
  c.on_event(exit_ev(episode(500, 160, 900, REASON_FULL_SYNC_DISK)));
  c.on_snapshot(poll(1000, {rep(6381, "send_bulk"), rep(6382, "send_bulk"), rep(6383, "wait_bgsave")}));
  c.on_snapshot(poll(1100, {rep(6381, "online", 5000), rep(6382, "send_bulk"), rep(6383, "send_bulk")}));
  c.on_snapshot(poll(1200, {rep(6381, "online", 5000), rep(6382, "online", 5100), rep(6383, "online", 5200)}));
  const auto forks = c.take_remaining(true);
  ASSERT_EQ(forks.size(), 1u);
  const auto& r = forks[0].replicas;
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].address, "127.0.0.1:6381");
  EXPECT_EQ(r[0].joined, ReplicaSync::Joined::started);
  EXPECT_EQ(r[1].joined, ReplicaSync::Joined::rode);
  EXPECT_EQ(r[2].joined, ReplicaSync::Joined::rode);
  for (const auto& s : r) {
    EXPECT_EQ(s.outcome, ReplicaSync::Outcome::online);
    EXPECT_EQ(s.child_pid, 500u);
    ASSERT_TRUE(s.sync_ms());
    EXPECT_GT(*s.sync_ms(), 0);
    EXPECT_EQ(s.states.front().state, "wait_bgsave");
    EXPECT_EQ(s.states.back().state, "online");
    for (size_t i = 1; i < s.states.size(); ++i) EXPECT_GT(s.states[i].first_seen_ns, s.states[i - 1].first_seen_ns);
  }
  EXPECT_DOUBLE_EQ(*r[0].sync_ms(), 900.0);  // 200 ms to 1100 ms
  EXPECT_EQ(r[2].states.size(), 3u);         // wait_bgsave, send_bulk, online
  EXPECT_EQ(r[2].offset, 5200);
}

TEST(Replicas, AReplicaThatAsksDuringADisklessForkWaitsForTheNext) {
  Correlator c(kParent);
  c.on_snapshot(poll(100, {}));
  c.on_event(exit_ev(episode(500, 150, 700, REASON_FULL_SYNC_DISKLESS)));
  c.on_event(exit_ev(episode(501, 900, 1400, REASON_FULL_SYNC_DISKLESS)));
  c.on_snapshot(poll(200, {rep(6381, "wait_bgsave")}));
  c.on_snapshot(poll(300, {rep(6381, "wait_bgsave"), rep(6382, "wait_bgsave")}));
  c.on_snapshot(poll(800, {rep(6381, "online"), rep(6382, "wait_bgsave")}));
  c.on_snapshot(poll(1500, {rep(6381, "online"), rep(6382, "online")}));
  const auto forks = c.take_remaining(true);
  ASSERT_EQ(forks.size(), 2u);
  ASSERT_EQ(forks[0].replicas.size(), 1u);
  EXPECT_EQ(forks[0].replicas[0].address, "127.0.0.1:6381");
  ASSERT_EQ(forks[1].replicas.size(), 1u);
  EXPECT_EQ(forks[1].replicas[0].address, "127.0.0.1:6382");
  EXPECT_EQ(forks[1].replicas[0].joined, ReplicaSync::Joined::waited);
  EXPECT_DOUBLE_EQ(*forks[1].replicas[0].wait_ms, 600.0);
}

TEST(Replicas, ADroppedReplicaThatSyncsAgainIsTwoSyncs) {
  Correlator c(kParent);
  c.on_snapshot(poll(100, {rep(6380, "online")}));  // in sync before the capture: not a sync
  c.on_event(exit_ev(episode(500, 150, 420, REASON_FULL_SYNC_DISKLESS)));
  c.on_event(exit_ev(episode(501, 1150, 1300, REASON_FULL_SYNC_DISKLESS)));
  c.on_snapshot(poll(200, {rep(6380, "online"), rep(6381, "wait_bgsave")}));
  c.on_snapshot(poll(400, {rep(6380, "online"), rep(6381, "wait_bgsave")}));
  c.on_snapshot(poll(500, {rep(6380, "online")}));  // dropped: its child was killed at 420 ms
  c.on_snapshot(poll(1200, {rep(6380, "online"), rep(6381, "wait_bgsave")}));
  c.on_snapshot(poll(1400, {rep(6380, "online"), rep(6381, "online")}));
  const auto syncs = c.replica_syncs();
  ASSERT_EQ(syncs.size(), 2u);
  EXPECT_EQ(syncs[0].outcome, ReplicaSync::Outcome::dropped);
  EXPECT_EQ(syncs[0].child_pid, 500u);
  EXPECT_FALSE(syncs[0].sync_ms());
  EXPECT_EQ(syncs[1].outcome, ReplicaSync::Outcome::online);
  EXPECT_EQ(syncs[1].child_pid, 501u);
  const auto finished = c.take_finished_replica_syncs();
  EXPECT_EQ(finished.size(), 2u);
  EXPECT_TRUE(c.take_finished_replica_syncs().empty());
}

// A replica whose whole sync fell between two polls (a slow poll, a small dataset): it still gets
// its fork, but no sync time, for none was measured (CI under ASan saw one as "online after 0 ms").
TEST(Replicas, ASyncBetweenTwoPollsHasNoSyncTime) {
  Correlator c(kParent);
  c.on_snapshot(poll(100, {}));
  c.on_event(exit_ev(episode(500, 150, 420, REASON_FULL_SYNC_DISK)));
  c.on_snapshot(poll(800, {rep(6381, "online")}));
  const auto syncs = c.replica_syncs();
  ASSERT_EQ(syncs.size(), 1u);
  EXPECT_EQ(syncs[0].outcome, ReplicaSync::Outcome::online);
  EXPECT_EQ(syncs[0].child_pid, 500u);
  EXPECT_FALSE(syncs[0].sync_ms());
  ASSERT_EQ(syncs[0].states.size(), 1u);
}

// Redis learns that a child exited only in its cron, later still on a loaded primary: a replica
// that asks in between joins that child's RDB, though its last absence came after the exit (seen on
// CI under ASan: the child exited at 121 ms, Redis still showed the save at 430 ms, and the third
// replica, absent then, was online at 550 ms with no fork of its own).
TEST(Replicas, AReplicaThatAsksBeforeRedisSawTheChildExitJoinsIt) {
  Correlator c(kParent);
  const auto busy = [](Snapshot s) {
    s.rdb_bgsave_in_progress = true;
    return s;
  };
  c.on_snapshot(poll(100, {}));
  c.on_event(exit_ev(episode(500, 110, 231, REASON_FULL_SYNC_DISK)));
  c.on_snapshot(busy(poll(200, {rep(6381, "wait_bgsave")})));
  c.on_snapshot(busy(poll(540, {rep(6381, "wait_bgsave"), rep(6382, "wait_bgsave")})));
  c.on_snapshot(poll(660, {rep(6381, "online"), rep(6382, "online"), rep(6383, "online")}));
  const auto forks = c.take_remaining(true);
  ASSERT_EQ(forks.size(), 1u);
  ASSERT_EQ(forks[0].replicas.size(), 3u);
  EXPECT_EQ(forks[0].replicas[2].address, "127.0.0.1:6383");
  EXPECT_EQ(forks[0].replicas[2].joined, ReplicaSync::Joined::rode);
}

// The same late absence without Redis showing the save still running: no fork is given.
TEST(Replicas, AReplicaThatAsksAfterRedisSawTheExitGetsNoOldFork) {
  Correlator c(kParent);
  c.on_snapshot(poll(100, {}));
  c.on_event(exit_ev(episode(500, 110, 231, REASON_FULL_SYNC_DISK)));
  c.on_snapshot(poll(540, {}));
  c.on_snapshot(poll(660, {rep(6383, "online")}));
  const auto syncs = c.replica_syncs();
  ASSERT_EQ(syncs.size(), 1u);
  EXPECT_EQ(syncs[0].child_pid, 0u);
}

namespace {

// Three replicas ask at once; the first fork (150-790 ms) serves the first, the next (795-1500 ms)
// begins the moment it ends, for the two that came late.
void three_wait_for_two_forks(Correlator& c, uint32_t reason) {
  c.on_snapshot(poll(100, {}));
  c.on_event(exit_ev(episode(500, 150, 790, reason)));
  c.on_snapshot(poll(200, {rep(6381, "wait_bgsave"), rep(6382, "wait_bgsave"), rep(6383, "wait_bgsave")}));
  c.on_snapshot(poll(700, {rep(6381, "wait_bgsave"), rep(6382, "wait_bgsave"), rep(6383, "wait_bgsave")}));
  c.on_event(exit_ev(episode(501, 795, 1500, reason)));
}

// What the primary's log gives those syncs: 1 + 2, not 0 + 3.
void expect_first_then_the_late_two(const std::vector<thptrace::correlate::ForkEpisode>& forks) {
  ASSERT_EQ(forks.size(), 2u);
  ASSERT_EQ(forks[0].replicas.size(), 1u);
  EXPECT_EQ(forks[0].replicas[0].address, "127.0.0.1:6381");
  ASSERT_EQ(forks[1].replicas.size(), 2u);
  EXPECT_EQ(forks[1].replicas[0].address, "127.0.0.1:6382");
  EXPECT_EQ(forks[1].replicas[1].address, "127.0.0.1:6383");
}

}  // namespace

// Diskless with repl-diskless-sync-delay 0, as Redis 7.0.15 did it with three replicas attaching at
// once: the first asks and gets a fork; the two a few ms later wait for the next fork, which starts
// the moment the first child ends — a few ms before the poll that shows the first replica online.
TEST(Replicas, DisklessReplicaOnlineAfterTheNextForkBeganKeepsItsOwnFork) {
  Correlator c(kParent);
  three_wait_for_two_forks(c, REASON_FULL_SYNC_DISKLESS);
  c.on_snapshot(poll(800, {rep(6381, "online", 10), rep(6382, "wait_bgsave"), rep(6383, "wait_bgsave")}));
  c.on_snapshot(poll(1600, {rep(6381, "online", 10), rep(6382, "online", 20), rep(6383, "online", 20)}));
  const auto forks = c.take_remaining(true);
  expect_first_then_the_late_two(forks);
  if (HasFatalFailure()) return;
  EXPECT_EQ(forks[1].replicas[0].joined, ReplicaSync::Joined::waited);
}

TEST(Replicas, AnAofRewriteServesNoReplica) {
  Correlator c(kParent);
  c.on_snapshot(poll(100, {}));
  c.on_event(exit_ev(episode(500, 150, 300, REASON_AOF_REWRITE)));
  c.on_snapshot(poll(200, {rep(6381, "wait_bgsave")}));
  c.on_snapshot(poll(400, {rep(6381, "wait_bgsave")}));
  const auto forks = c.take_remaining(true);
  ASSERT_EQ(forks.size(), 1u);
  EXPECT_TRUE(forks[0].replicas.empty());
}

TEST(ReplicaParse, ReplicaLinesOfRedis7Redis8AndValkey8) {
  const auto info = thptrace::redis::parse_info(
      "# Replication\r\nrole:master\r\nconnected_slaves:3\r\n"
      "slave0:ip=127.0.0.1,port=7001,state=online,offset=1234,lag=0\r\n"
      "slave1:ip=127.0.0.1,port=7002,state=send_bulk_and_stream,offset=0,lag=3\r\n"
      "slave2:ip=::1,port=7003,state=bg_transfer,offset=0,lag=1,type=main-replica\r\n");
  const auto r = thptrace::redis::parse_replicas(info);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].address(), "127.0.0.1:7001");
  EXPECT_EQ(r[0].offset, 1234);
  EXPECT_EQ(r[1].state, "send_bulk_and_stream");
  EXPECT_EQ(r[1].lag, 3);
  EXPECT_EQ(r[2].state, "bg_transfer");
}

// Valkey 8.0.1 with dual-channel-replication-enabled, as its INFO showed three replicas attaching at
// once: a replica's rdb channel and main channel are two lines under one address.
TEST(ReplicaParse, Valkey8DualChannelLinesAreOneReplica) {
  const auto info = thptrace::redis::parse_info(
      "# Replication\r\nrole:master\r\nconnected_slaves:5\r\n"
      "slave0:ip=127.0.0.1,port=52653,state=bg_transfer,offset=0,lag=0,type=main-channel\r\n"
      "slave1:ip=127.0.0.1,port=43767,state=send_bulk,offset=0,lag=0,type=rdb-channel\r\n"
      "slave2:ip=127.0.0.1,port=33787,state=wait_bgsave,offset=0,lag=0,type=rdb-channel\r\n"
      "slave3:ip=127.0.0.1,port=33787,state=bg_transfer,offset=0,lag=0,type=main-channel\r\n"
      "slave4:ip=127.0.0.1,port=43767,state=bg_transfer,offset=7,lag=1,type=main-channel\r\n"
      "slave10:ip=127.0.0.1,port=7010,state=online,offset=9,lag=0,type=replica\r\n");
  const auto r = thptrace::redis::parse_replicas(info);
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[0].address(), "127.0.0.1:52653");
  EXPECT_EQ(r[0].state, "bg_transfer");
  EXPECT_EQ(r[1].address(), "127.0.0.1:43767");
  EXPECT_EQ(r[1].state, "send_bulk");
  EXPECT_EQ(r[1].offset, 7);
  EXPECT_EQ(r[2].address(), "127.0.0.1:33787");
  EXPECT_EQ(r[2].state, "wait_bgsave");
  EXPECT_EQ(r[3].address(), "127.0.0.1:7010");  // slave10 after slave4, as INFO listed it
}

// The same replica poll after poll: one sync through wait_bgsave, send_bulk, bg_transfer to online,
// not a drop each time its rdb channel's line comes back in wait_bgsave after its main channel's.
TEST(Replicas, Valkey8DualChannelSyncIsOneSync) {
  Correlator c(kParent);
  c.on_snapshot(poll(100, {}));
  c.on_snapshot(poll(200, {rep(6381, "wait_bgsave")}));
  c.on_event(exit_ev(episode(500, 250, 700, REASON_FULL_SYNC_DISKLESS)));
  c.on_snapshot(poll(300, {rep(6381, "wait_bgsave")}));
  c.on_snapshot(poll(400, {rep(6381, "send_bulk")}));
  c.on_snapshot(poll(800, {rep(6381, "bg_transfer")}));
  c.on_snapshot(poll(900, {rep(6381, "online", 100)}));
  const auto forks = c.take_remaining(true);
  ASSERT_EQ(forks.size(), 1u);
  ASSERT_EQ(forks[0].replicas.size(), 1u);
  const auto& s = forks[0].replicas[0];
  EXPECT_EQ(s.outcome, ReplicaSync::Outcome::online);
  ASSERT_EQ(s.states.size(), 4u);
  EXPECT_EQ(s.states[2].state, "bg_transfer");
  EXPECT_DOUBLE_EQ(*s.sync_ms(), 700.0);
}

// Valkey 8 dual channel, delay 0 (as thptrace bench's scale_out_channel ran it, 500k keys): the first
// replica's merged entry leaves wait_bgsave for bg_transfer only when its rdb channel is gone, after
// its child ended and just as the next fork began for the two that came late. Each keeps the fork
// the primary's log gives it: 1 + 2, not 0 + 3.
TEST(Replicas, Valkey8BgTransferAfterTheNextForkBeganKeepsItsOwnFork) {
  Correlator c(kParent);
  three_wait_for_two_forks(c, REASON_FULL_SYNC_RDB_CHANNEL);
  c.on_snapshot(poll(800, {rep(6381, "bg_transfer", 10), rep(6382, "wait_bgsave"), rep(6383, "wait_bgsave")}));
  c.on_snapshot(poll(1600, {rep(6381, "online", 30), rep(6382, "bg_transfer", 20), rep(6383, "bg_transfer", 20)}));
  c.on_snapshot(poll(1700, {rep(6381, "online", 30), rep(6382, "online", 30), rep(6383, "online", 30)}));
  expect_first_then_the_late_two(c.take_remaining(true));
}

TEST(ReplicaParse, OutputBufferLimitAndClientListOmem) {
  const auto l = thptrace::redis::parse_replica_output_buffer_limit(
      "normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60");
  ASSERT_TRUE(l);
  EXPECT_EQ(l->hard_bytes, 268435456u);
  EXPECT_EQ(l->soft_bytes, 67108864u);
  EXPECT_EQ(l->soft_seconds, 60u);
  EXPECT_TRUE(thptrace::redis::parse_replica_output_buffer_limit("replica 1024 0 0"));
  EXPECT_FALSE(thptrace::redis::parse_replica_output_buffer_limit("normal 0 0 0"));
  EXPECT_FALSE(thptrace::redis::parse_replica_output_buffer_limit("slave x 0 0"));
  EXPECT_EQ(thptrace::redis::max_client_omem("id=3 addr=x flags=S omem=10 tot-mem=1\n"
                                             "id=4 addr=y flags=S omem=2048 tot-mem=1\n"),
            2048u);
  EXPECT_FALSE(thptrace::redis::max_client_omem(""));
}
