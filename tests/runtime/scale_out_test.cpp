// SPDX-License-Identifier: Apache-2.0
// A scale-out captured with real replicas on loopback: three replicas attached at once to a loaded
// primary (over disk and diskless), and a replica whose output buffer limit is too small for the
// writes during its sync (the full-sync loop), then the same with the limit raised; and three
// replicas at once on Valkey 8's dual channel and on Redis 8's rdb channel, whose syncs pass through
// their own states.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <set>
#include <thread>

#include "harness.h"
#include "redis/parse.h"

using namespace thptrace::test;
using namespace std::chrono_literals;

namespace {

void populate(const RedisServer& r, int steps) {
  for (int i = 0; i < steps; ++i) r.cmd({"DEBUG", "POPULATE", "20000", "key" + std::to_string(i), "400"});
}

// The primary's replica lines as INFO shows them now.
std::vector<thptrace::redis::ReplicaInfo> replicas_of(const RedisServer& primary) {
  auto c = primary.client();
  const auto text = c->info("replication");
  return text ? thptrace::redis::parse_replicas(thptrace::redis::parse_info(*text))
              : std::vector<thptrace::redis::ReplicaInfo>{};
}

bool all_online(const RedisServer& primary, size_t n) {
  const auto r = replicas_of(primary);
  return r.size() == n && std::all_of(r.begin(), r.end(), [](const auto& x) { return x.state == "online"; });
}

// A replica first listed online already: its whole sync fell between two polls (a slow poll under
// a sanitizer, a fast sync). The report must say so (only `online`, no sync time); it is still
// counted and given its fork.
bool synced_between_polls(const nlohmann::json& r) {
  if (r["states"].size() != 1) return false;
  EXPECT_EQ(r["states"][0]["state"], "online") << r.dump(2);
  EXPECT_TRUE(r["sync_ms"].is_null()) << r.dump(2);
  EXPECT_NE(r["joined"], "unknown") << r.dump(2);
  return true;
}

// A capture of the primary around body(); its JSON report.
template <typename Body>
nlohmann::json capture(const RedisServer& primary, Body body) {
  const std::string dir = make_temp_dir("thptrace-scale-out-");
  const std::string json = dir + "/report.json";
  Process tracer(
      {thptrace_bin(), "--pid", std::to_string(primary.pid()), "--redis", primary.address(), "--json", json});
  EXPECT_TRUE(tracer.wait_stderr_line("tracing pid", 30s)) << tracer.err();
  std::this_thread::sleep_for(300ms);
  body();
  std::this_thread::sleep_for(300ms);
  tracer.signal(SIGINT);
  EXPECT_EQ(tracer.wait(60s), 0) << tracer.err();
  auto j = std::filesystem::exists(json) ? read_json(json) : nlohmann::json();
  std::filesystem::remove_all(dir);
  return j;
}

void three_replicas(bool diskless) {
  REQUIRE_BPF();
  RedisServer primary(
      {"--repl-diskless-sync", diskless ? "yes" : "no", "--repl-diskless-sync-delay", diskless ? "2" : "0"});
  populate(primary, 5);  // 100,000 keys of 400 bytes
  std::set<std::string> addresses;
  const auto forks_before = primary.info_field("total_forks");
  const auto report = capture(primary, [&] {
    WriteLoad load(primary, "load:", 50000);
    const std::vector<std::string> replica_of = {"--replicaof", "127.0.0.1", std::to_string(primary.port())};
    RedisServer a(replica_of), b(replica_of), c(replica_of);
    const auto until = std::chrono::steady_clock::now() + 45s;
    while (!all_online(primary, 3) && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(50ms);
    ASSERT_TRUE(all_online(primary, 3));
    for (const auto& r : replicas_of(primary)) addresses.insert(r.address());
    std::this_thread::sleep_for(300ms);
  });
  ASSERT_TRUE(report.is_object());
  ASSERT_EQ(addresses.size(), 3u);
  // Redis's own count of its forks, and what the capture knew of its polls, for a failure's message.
  const std::string context = "INFO total_forks " + forks_before + " -> " + primary.info_field("total_forks") +
                              "; the report's redis: " + report["redis"].dump() +
                              "; capture: " + report["capture"].dump();
  std::set<std::string> served;
  size_t syncs = 0, between_polls = 0;
  for (const auto& f : report["forks"]) {
    if (f["replicas"].empty()) continue;
    EXPECT_EQ(f["reason"], diskless ? "full_sync_diskless" : "full_sync_disk") << f.dump(2);
    for (const auto& r : f["replicas"]) {
      ++syncs;
      served.insert(r["address"].get<std::string>());
      EXPECT_EQ(r["outcome"], "online") << r.dump(2);
      if (synced_between_polls(r)) {
        ++between_polls;
        continue;
      }
      ASSERT_TRUE(r["sync_ms"].is_number()) << r.dump(2);
      EXPECT_GT(r["sync_ms"].get<double>(), 0) << r.dump(2);
      const auto& states = r["states"];
      ASSERT_GE(states.size(), 2u) << r.dump(2);
      EXPECT_EQ(states.front()["state"], "wait_bgsave") << r.dump(2);
      EXPECT_EQ(states.back()["state"], "online") << r.dump(2);
      for (size_t i = 1; i < states.size(); ++i)
        EXPECT_GT(states[i]["after_ms"].get<double>(), states[i - 1]["after_ms"].get<double>()) << r.dump(2);
      EXPECT_DOUBLE_EQ(states.back()["after_ms"].get<double>(), r["sync_ms"].get<double>());
      EXPECT_NE(r["joined"], "unknown") << r.dump(2);
    }
  }
  EXPECT_EQ(served, addresses) << context << "\n" << report["forks"].dump(2);
  EXPECT_EQ(syncs, 3u) << context;
  EXPECT_LT(between_polls, syncs) << "no sync was seen before it was online: " << report["forks"].dump(2);
  ASSERT_TRUE(report["replication"].is_object());
  EXPECT_EQ(report["replication"]["full_syncs"], 3);
  EXPECT_EQ(report["replication"]["dropped_syncs"], 0);
  EXPECT_TRUE(report["replication"]["loops"].empty());
  if (diskless) {  // repl-diskless-sync-delay 2: the replicas waited for the fork, batched into one
    EXPECT_EQ(report["forks"].size(), 1u) << report["forks"].dump(2);
    bool waited = false;
    for (const auto& r : report["forks"][0]["replicas"]) waited = waited || r["joined"] == "waited";
    EXPECT_TRUE(waited) << report["forks"].dump(2);
  }
}

// Three fresh replicas at once, each over its own rdb channel (Valkey 8's dual-channel replication,
// diskless): the replicas the report gives the forks are the primary's own, each online after the
// states of that build, in their order.
void three_replicas_over_their_channels(const ServerBuild& s, const std::vector<std::string>& states_in_order) {
  const std::vector<std::string> channel = {"--" + s.channel_config, "yes"};
  std::vector<std::string> primary_args = {"--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0"};
  primary_args.insert(primary_args.end(), channel.begin(), channel.end());
  RedisServer primary(primary_args, 0, s.binary);
  populate(primary, 10);  // 200,000 keys: each replica loads its RDB long enough for a poll to see it
  std::set<std::string> addresses, replica_ports;
  const auto report = capture(primary, [&] {
    WriteLoad load(primary, "load:", 50000);
    auto replica_of = channel;
    replica_of.insert(replica_of.end(), {"--replicaof", "127.0.0.1", std::to_string(primary.port())});
    RedisServer a(replica_of, 0, s.binary), b(replica_of, 0, s.binary), c(replica_of, 0, s.binary);
    for (const auto* r : {&a, &b, &c}) replica_ports.insert(r->address());
    const auto until = std::chrono::steady_clock::now() + 45s;
    while (!all_online(primary, 3) && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(50ms);
    ASSERT_TRUE(all_online(primary, 3)) << primary.cmd({"INFO", "replication"});
    for (const auto& r : replicas_of(primary)) addresses.insert(r.address());
    std::this_thread::sleep_for(300ms);
  });
  ASSERT_TRUE(report.is_object());
  ASSERT_EQ(addresses, replica_ports);
  std::set<std::string> served, states_seen;
  size_t syncs = 0, between_polls = 0;
  for (const auto& f : report["forks"]) {
    if (f["replicas"].empty()) continue;
    EXPECT_EQ(f["reason"], "full_sync_rdb_channel") << f.dump(2);
    for (const auto& r : f["replicas"]) {
      ++syncs;
      served.insert(r["address"].get<std::string>());
      EXPECT_EQ(r["outcome"], "online") << r.dump(2);
      if (synced_between_polls(r)) {
        ++between_polls;
        continue;
      }
      ASSERT_TRUE(r["sync_ms"].is_number()) << r.dump(2);
      EXPECT_GT(r["sync_ms"].get<double>(), 0) << r.dump(2);
      const auto& states = r["states"];
      ASSERT_GE(states.size(), 2u) << r.dump(2);
      EXPECT_EQ(states.back()["state"], "online") << r.dump(2);
      // Each state one of this build's, in the build's order, at a later poll than the one before.
      size_t at = 0;
      for (size_t i = 0; i < states.size(); ++i) {
        const auto name = states[i]["state"].get<std::string>();
        states_seen.insert(name);
        const auto it =
            std::find(states_in_order.begin() + static_cast<std::ptrdiff_t>(at), states_in_order.end(), name);
        ASSERT_NE(it, states_in_order.end())
            << name << " out of order or not a state of " << s.name << ": " << r.dump(2);
        at = static_cast<size_t>(it - states_in_order.begin()) + 1;
        if (i > 0) {
          EXPECT_GT(states[i]["after_ms"].get<double>(), states[i - 1]["after_ms"].get<double>()) << r.dump(2);
        }
      }
      EXPECT_DOUBLE_EQ(states.back()["after_ms"].get<double>(), r["sync_ms"].get<double>());
      EXPECT_NE(r["joined"], "unknown") << r.dump(2);
    }
  }
  EXPECT_EQ(served, addresses) << report["forks"].dump(2);
  EXPECT_EQ(syncs, 3u) << report["forks"].dump(2);
  EXPECT_LT(between_polls, syncs) << "no sync was seen before it was online: " << report["forks"].dump(2);
  // The step only this build has: the replica loading its RDB while the primary buffers its stream.
  EXPECT_TRUE(states_seen.count(states_in_order[states_in_order.size() - 2])) << report["forks"].dump(2);
  ASSERT_TRUE(report["replication"].is_object());
  EXPECT_EQ(report["replication"]["full_syncs"], 3);
  EXPECT_EQ(report["replication"]["dropped_syncs"], 0);
  EXPECT_TRUE(report["replication"]["loops"].empty()) << report["replication"].dump(2);
}

// One replica under write load, its output buffer limit `limit` ("replica HARD SOFT SECONDS"), for a
// few seconds: the report, and the primary's own count of full syncs over it.
nlohmann::json one_replica_under_load(const std::string& limit, int64_t* full_syncs, std::string* address) {
  RedisServer primary(
      {"--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0", "--client-output-buffer-limit", limit});
  populate(primary, 10);  // 200,000 keys: the sync lasts long enough for the polls to see it
  const int64_t before = std::stoll(primary.info_field("sync_full"));
  auto report = capture(primary, [&] {
    WriteLoad load(primary, "load:", 50000), load2(primary, "load:", 50000);
    RedisServer replica({"--replicaof", "127.0.0.1", std::to_string(primary.port())});
    *address = "127.0.0.1:" + std::to_string(replica.port());
    std::this_thread::sleep_for(6s);
  });
  *full_syncs = std::stoll(primary.info_field("sync_full")) - before;
  return report;
}

// The builds from tests/servers/fetch.sh (a missing one fails, not skips, under
// THPTRACE_REQUIRE_BPF=1, as RedisBuild.* does), each through its own states: Valkey 8.0.1's dual
// channel (two lines a replica in INFO, merged), Redis 8.0.2's rdb channel (one line: the rdb channel
// is not listed).
void over_their_channels(const std::string& build, const std::vector<std::string>& states_in_order) {
  REQUIRE_FETCHED_SERVER(server, build);
  three_replicas_over_their_channels(*server, states_in_order);
}

}  // namespace

TEST(ScaleOut, ThreeReplicasAtOnceOverDisk) { three_replicas(false); }
TEST(ScaleOut, ThreeReplicasAtOnceDiskless) { three_replicas(true); }

TEST(ScaleOut, ThreeValkey8ReplicasOverTheirDualChannels) {
  REQUIRE_BPF();
  over_their_channels("valkey-8.0.1", {"wait_bgsave", "send_bulk", "bg_transfer", "online"});
}

TEST(ScaleOut, ThreeRedis8ReplicasOverTheirRdbChannels) {
  REQUIRE_BPF();
  over_their_channels("redis-8.0.2", {"wait_bgsave", "send_bulk_and_stream", "online"});
}

TEST(ScaleOut, TinyReplicaOutputBufferMakesAFullSyncLoop) {
  REQUIRE_BPF();
  int64_t full_syncs = 0;
  std::string address;
  const auto report = one_replica_under_load("replica 1mb 512kb 1", &full_syncs, &address);
  ASSERT_TRUE(report.is_object());
  ASSERT_GE(full_syncs, 2) << "the known answer: the primary dropped the replica and synced it again; the report's "
                              "replication section: "
                           << report.value("replication", nlohmann::json()).dump(1);
  const auto& x = report["replication"];
  ASSERT_TRUE(x.is_object()) << report.dump(2);
  ASSERT_FALSE(x["loops"].empty()) << x.dump(2);
  EXPECT_EQ(x["loops"][0]["address"], address);
  EXPECT_GE(x["loops"][0]["syncs"].get<int>(), 2);
  EXPECT_EQ(x["loop_cause"], "output_buffer_limit") << x.dump(2);
  EXPECT_EQ(x["replica_output_buffer_limit"]["hard_bytes"], 1024 * 1024);
  EXPECT_GT(x["suggested_hard_limit_bytes"].get<uint64_t>(), 1024u * 1024) << x.dump(2);
  const auto first = report["findings"][0]["text"].get<std::string>();
  EXPECT_NE(first.find("Full-sync loop"), std::string::npos) << first;
  EXPECT_NE(first.find(address), std::string::npos) << first;
  EXPECT_NE(first.find("client-output-buffer-limit replica 1mb 512kb 1"), std::string::npos) << first;
}

TEST(ScaleOut, RaisedReplicaOutputBufferMakesNoLoop) {
  REQUIRE_BPF();
  int64_t full_syncs = 0;
  std::string address;
  const auto report = one_replica_under_load("replica 512mb 256mb 60", &full_syncs, &address);
  ASSERT_TRUE(report.is_object());
  EXPECT_EQ(full_syncs, 1);
  const auto& x = report["replication"];
  ASSERT_TRUE(x.is_object()) << report.dump(2);
  EXPECT_TRUE(x["loops"].empty()) << x.dump(2);
  EXPECT_EQ(x["dropped_syncs"], 0);
  for (const auto& f : report["findings"])
    EXPECT_EQ(f["text"].get<std::string>().find("Full-sync loop"), std::string::npos);
}
