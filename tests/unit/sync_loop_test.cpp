// SPDX-License-Identifier: Apache-2.0
// The full-sync loop in a report, from assembled inputs: a replica dropped three times and synced
// four, its forks wasted, the first finding naming the loop, the limit and one that would hold; the
// same replica synced once is no loop; the JSON round trip keeps the section and each fork's replicas.
#include <gtest/gtest.h>

#include "report/report.h"

using namespace thptrace;

namespace {

constexpr uint64_t kMs = 1'000'000;

void add_fork(report::CaptureInputs& in, uint32_t child, uint64_t fork_ms, uint64_t exit_ms) {
  thptrace_event e{};
  e.type = EV_CHILD_EXIT;
  e.tgid = 100;
  e.child_pid = child;
  e.ts_ns = exit_ms * kMs;
  e.episode.parent_tgid = 100;
  e.episode.child_pid = child;
  e.episode.fork_ts_ns = fork_ms * kMs;
  e.episode.exit_ts_ns = exit_ms * kMs;
  e.episode.reason = REASON_FULL_SYNC_DISKLESS;
  e.episode.faults.cow = 256;  // 1 MiB
  in.events.push_back(e);
}

redis::Snapshot poll(uint64_t ms, const char* state, int64_t sync_full, int64_t disconnections, int64_t offset) {
  redis::Snapshot s;
  s.up = true;
  s.ts_ns = s.sent_ns = ms * kMs;
  if (state) s.replicas.push_back({"127.0.0.1", 7001, state, 0, 0});
  s.sync_full = sync_full;
  s.client_output_buffer_limit_disconnections = disconnections;
  s.master_repl_offset = offset;
  s.mem_total_replication_buffers = 1 << 20;
  if (state && std::string(state) != "online") s.replica_output_buffer_max = 200 << 10;
  return s;
}

// `rounds` syncs of one replica, a second apart: each dropped after 400 ms but the last, which
// comes online. The replication stream grows 4 MiB/s.
report::CaptureInputs loop_inputs(int rounds) {
  report::CaptureInputs in;
  in.pid = 100;
  in.comm = "redis-server";
  in.start_ns = 0;
  in.end_ns = static_cast<uint64_t>(rounds + 1) * 1000 * kMs;
  in.redis_address = "127.0.0.1:7000";
  in.facts = redis::ServerFacts{};
  in.facts->version = "7.4.0";
  in.facts->client_output_buffer_limit = "normal 0 0 0 slave 262144 131072 1 pubsub 33554432 8388608 60";
  in.facts->repl_timeout = "60";
  int64_t syncs = 0, drops = 0;
  const auto offset = [](uint64_t ms) { return static_cast<int64_t>(ms * 4 * 1024 * 1024 / 1000); };
  in.timeline.push_back(poll(0, nullptr, 0, 0, 0));
  for (int i = 0; i < rounds; ++i) {
    const uint64_t t = static_cast<uint64_t>(i) * 1000 + 100;
    add_fork(in, 200 + static_cast<uint32_t>(i), t + 10, i + 1 < rounds ? t + 410 : t + 600);
    ++syncs;
    in.timeline.push_back(poll(t + 50, "wait_bgsave", syncs, drops, offset(t + 50)));
    in.timeline.push_back(poll(t + 350, "wait_bgsave", syncs, drops, offset(t + 350)));
    if (i + 1 < rounds) {
      ++drops;
      in.timeline.push_back(poll(t + 450, nullptr, syncs, drops, offset(t + 450)));
    } else {
      in.timeline.push_back(poll(t + 700, "online", syncs, drops, offset(t + 700)));
    }
  }
  return in;
}

}  // namespace

TEST(SyncLoop, TheFirstFindingNamesTheLoopTheLimitAndOneThatHolds) {
  const auto r = report::assemble(loop_inputs(4));
  ASSERT_TRUE(r.replication);
  const auto& x = *r.replication;
  EXPECT_EQ(x.full_syncs, 4u);
  EXPECT_EQ(x.replica_syncs, 4u);
  EXPECT_EQ(x.dropped_syncs, 3u);
  EXPECT_EQ(x.output_buffer_limit_disconnections, 3u);
  ASSERT_EQ(x.loops.size(), 1u);
  EXPECT_EQ(x.loops[0].address, "127.0.0.1:7001");
  EXPECT_EQ(x.loops[0].syncs, 4u);
  EXPECT_EQ(x.loops[0].dropped, 3u);
  EXPECT_EQ(x.loop_cause, "output_buffer_limit");
  ASSERT_TRUE(x.limit);
  EXPECT_EQ(x.limit->hard_bytes, 262144u);
  EXPECT_EQ(x.replica_output_buffer_peak_bytes, 200u << 10);
  // 4 MiB/s over the longest sync or child (600 ms, at least 1 s), twice over: 8 MiB.
  EXPECT_EQ(x.suggested_hard_limit_bytes, 8u << 20);
  EXPECT_EQ(x.wasted_forks, 3u);
  EXPECT_EQ(x.wasted_copied_bytes, 3u << 20);
  const auto f = report::finding_texts(r);
  ASSERT_FALSE(f.empty());
  EXPECT_EQ(
      f[0].rfind("Full-sync loop: replica 127.0.0.1:7001 full-synced 4 times in this capture (3 dropped before online)",
                 0),
      0u)
      << f[0];
  EXPECT_NE(f[0].find("`client-output-buffer-limit replica 256kb 128kb 1`"), std::string::npos) << f[0];
  EXPECT_NE(f[0].find("3 disconnections by that limit"), std::string::npos) << f[0];
  EXPECT_NE(f[0].find("replica 8mb"), std::string::npos) << f[0];
  bool wasted = false;
  for (const auto& s : f) wasted = wasted || s.find("3 full-sync forks served only replicas that were dropped") == 0;
  EXPECT_TRUE(wasted);
  // Each fork served its own round of the replica.
  ASSERT_EQ(r.forks.size(), 4u);
  for (const auto& e : r.forks) ASSERT_EQ(e.replicas.size(), 1u);
  EXPECT_EQ(r.forks[0].replicas[0].outcome, correlate::ReplicaSync::Outcome::dropped);
  EXPECT_EQ(r.forks[3].replicas[0].outcome, correlate::ReplicaSync::Outcome::online);
}

TEST(SyncLoop, SyncsThePollsMergedCountForTheOneReplicaSeen) {
  // Redis counted 6 full syncs; the polls saw the replica dropped once and online once.
  auto in = loop_inputs(2);
  in.timeline.back().sync_full = 6;
  const auto r = report::assemble(in);
  ASSERT_TRUE(r.replication);
  const auto& x = *r.replication;
  EXPECT_EQ(x.full_syncs, 6u);
  EXPECT_EQ(x.replica_syncs, 2u);  // seen
  ASSERT_EQ(x.loops.size(), 1u);
  EXPECT_EQ(x.loops[0].syncs, 6u);
  EXPECT_EQ(x.loops[0].dropped, 5u);
}

TEST(SyncLoop, OneSyncIsNoLoop) {
  const auto r = report::assemble(loop_inputs(1));
  ASSERT_TRUE(r.replication);
  EXPECT_TRUE(r.replication->loops.empty());
  EXPECT_EQ(r.replication->loop_cause, "");
  EXPECT_FALSE(r.replication->suggested_hard_limit_bytes);
  for (const auto& f : report::finding_texts(r)) EXPECT_EQ(f.find("Full-sync loop"), std::string::npos) << f;
}

TEST(SyncLoop, DisconnectionsByTheLimitWithoutASecondFullSyncAreAFinding) {
  auto in = loop_inputs(1);
  in.timeline.back().client_output_buffer_limit_disconnections = 2;  // came back with partial resyncs
  const auto r = report::assemble(in);
  ASSERT_TRUE(r.replication);
  EXPECT_TRUE(r.replication->loops.empty());
  bool found = false;
  for (const auto& f : report::finding_texts(r))
    found = found || f.rfind(
                         "Redis dropped a replica 2 times for overcoming its output buffer limit "
                         "`client-output-buffer-limit replica 256kb 128kb 1`",
                         0) == 0;
  EXPECT_TRUE(found);
}

TEST(SyncLoop, WithoutTheCounterTheStreamDuringADroppedSyncNamesTheLimit) {
  auto in = loop_inputs(3);
  for (auto& s : in.timeline) {
    s.client_output_buffer_limit_disconnections = -1;  // Redis 7.0
    s.replica_output_buffer_max = -1;
  }
  const auto r = report::assemble(in);
  ASSERT_TRUE(r.replication);
  EXPECT_FALSE(r.replication->output_buffer_limit_disconnections);
  // 4 MiB/s over a 300 ms dropped sync is more than the 128 KiB soft limit.
  EXPECT_EQ(r.replication->loop_cause, "output_buffer_limit");
}

// The same where each dropped sync is seen in one poll only (its length then reads 0, and no
// output buffer figure): the fork children, 400 ms each at 4 MiB/s, outlived the 256 KiB hard limit.
TEST(SyncLoop, WithoutTheCounterAChildThatOutlivedTheLimitNamesIt) {
  auto in = loop_inputs(3);
  std::erase_if(in.timeline, [](const redis::Snapshot& s) { return s.ts_ns == 450 * kMs || s.ts_ns == 1450 * kMs; });
  for (auto& s : in.timeline) {
    s.client_output_buffer_limit_disconnections = -1;  // Redis 7.0
    s.replica_output_buffer_max = -1;
  }
  const auto r = report::assemble(in);
  ASSERT_TRUE(r.replication);
  ASSERT_FALSE(r.replication->loops.empty());
  EXPECT_EQ(r.replication->loop_cause, "output_buffer_limit");
}

TEST(SyncLoop, TheJsonKeepsTheSectionAndEachForksReplicas) {
  const auto r = report::assemble(loop_inputs(3));
  const auto j = report::to_json(r);
  const auto back = report::from_json(nlohmann::json::parse(j.dump()));
  EXPECT_EQ(report::to_json(back).dump(), j.dump());
  EXPECT_EQ(report::to_text(back), report::to_text(r));
  ASSERT_EQ(j["forks"][0]["replicas"].size(), 1u);
  EXPECT_EQ(j["forks"][0]["replicas"][0]["outcome"], "dropped");
  EXPECT_EQ(j["replication"]["loops"][0]["syncs"], 3);
}
