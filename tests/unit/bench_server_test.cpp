// SPDX-License-Identifier: Apache-2.0
// `thptrace bench --server`: which build INFO server names, and whether scale_out_channel can run on
// it (its rdb channel), from the INFO and CONFIG GET answers of the three builds this project uses;
// and how --scenarios marks the scenarios it names, so a named one it cannot run is a usage error.
#include <gtest/gtest.h>

#include "bench/bench.h"
#include "bench/server.h"

using namespace thptrace;
using namespace thptrace::bench;

namespace {

// INFO server as each build answers it (the fields that matter).
const redis::InfoMap kDebianRedis7 = {{"redis_version", "7.0.15"}};
const redis::InfoMap kRedis8 = {{"redis_version", "8.0.2"}};
const redis::InfoMap kValkey8 = {{"redis_version", "7.2.4"}, {"server_name", "valkey"}, {"valkey_version", "8.0.1"}};
const redis::InfoMap kValkey7 = {{"redis_version", "7.2.4"}, {"server_name", "valkey"}, {"valkey_version", "7.2.5"}};

}  // namespace

TEST(BenchServer, DebianRedis7HasNoRdbChannel) {
  const auto b = identify_server("/usr/bin/redis-server", kDebianRedis7, {});
  EXPECT_EQ(b.label(), "Redis 7.0.15");
  EXPECT_EQ(b.rdb_channel_config, "");
  EXPECT_EQ(b.channel_state, "");
  EXPECT_NE(b.no_channel_why.find("/usr/bin/redis-server (Redis 7.0.15) has no rdb channel"), std::string::npos)
      << b.no_channel_why;
}

TEST(BenchServer, Redis8TurnsOnReplRdbChannel) {
  const auto b = identify_server("/x/redis-server", kRedis8, {{"repl-rdb-channel", "yes"}});
  EXPECT_EQ(b.label(), "Redis 8.0.2");
  EXPECT_EQ(b.rdb_channel_config, "repl-rdb-channel");
  EXPECT_EQ(b.channel_state, "send_bulk_and_stream");
  EXPECT_EQ(b.no_channel_why, "");
}

TEST(BenchServer, Valkey8TurnsOnDualChannelByItsOwnVersion) {
  // Its redis_version (7.2.4, the Redis it forked from) must not hide its own 8.0.1.
  const auto b = identify_server("/x/valkey-server", kValkey8, {{"dual-channel-replication-enabled", "no"}});
  EXPECT_EQ(b.label(), "Valkey 8.0.1");
  EXPECT_EQ(b.rdb_channel_config, "dual-channel-replication-enabled");
  EXPECT_EQ(b.channel_state, "bg_transfer");
}

TEST(BenchServer, Valkey7HasNoDualChannel) {
  const auto b = identify_server("/x/valkey-server", kValkey7, {});
  EXPECT_EQ(b.rdb_channel_config, "");
  EXPECT_NE(b.no_channel_why.find("Valkey 7.2.5"), std::string::npos) << b.no_channel_why;
}

TEST(BenchServer, AnEightThatDoesNotKnowTheConfigHasNoChannel) {
  // The other build's config name is no substitute.
  const auto b = identify_server("/x/redis-server", kRedis8, {{"dual-channel-replication-enabled", "no"}});
  EXPECT_EQ(b.rdb_channel_config, "");
  EXPECT_NE(b.no_channel_why.find("does not know CONFIG repl-rdb-channel"), std::string::npos) << b.no_channel_why;
}

TEST(BenchServer, ServerFlagNeedsAnExecutableFile) {
  EXPECT_THROW(resolve_server("/nonexistent/valkey-server"), UsageError);
  EXPECT_THROW(resolve_server("/proc/version"), UsageError);  // not executable
  EXPECT_THROW(resolve_server("/usr/bin"), UsageError);       // a directory
  EXPECT_THROW(resolve_server("no-such-server-anywhere"), UsageError);
  EXPECT_THROW(resolve_server(""), UsageError);
  EXPECT_EQ(resolve_server("/bin/sh"), "/bin/sh");
}

TEST(BenchServer, ScenariosNamedByNameAreMarked) {
  const auto by_group = select_scenarios("scale_out");
  ASSERT_EQ(by_group.size(), 3u);
  EXPECT_EQ(by_group.back().name, "scale_out_channel");
  EXPECT_TRUE(by_group.back().rdb_channel);
  EXPECT_EQ(by_group.back().expected_reason, "full_sync_rdb_channel");
  for (const auto& s : by_group) EXPECT_FALSE(s.named) << s.name;

  const auto named = select_scenarios("all,scale_out_channel");
  size_t channel = 0;
  for (const auto& s : named) {
    EXPECT_EQ(s.named, s.name == "scale_out_channel") << s.name;
    channel += s.rdb_channel ? 1 : 0;
  }
  EXPECT_EQ(channel, 1u);
}
