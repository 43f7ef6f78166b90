// SPDX-License-Identifier: Apache-2.0
// Which Redis/Valkey fork entry points a binary gives, decided from its function symbols, and which
// reasons the uprobes can then label; the rest are left to INFO polling.
#include <gtest/gtest.h>

#include "kernel/abi.h"
#include "tracer/entry_points.h"

using namespace thptrace::tracer;

namespace {

std::string symbol_of(const BinaryEntryPoints& b, uint32_t anchor) {
  for (const auto& f : b.found)
    if (f.entry->anchor == anchor) return f.symbol;
  return "?";
}

bool by_uprobe(uint32_t anchors, const std::string& reason) {
  for (const auto& c : label_coverage(anchors))
    if (c.reason == reason) return c.by_uprobe;
  ADD_FAILURE() << "no reason " << reason;
  return false;
}

constexpr uint32_t kAll = REDIS_ANCHOR_FORK | REDIS_ANCHOR_REPLICATION | REDIS_ANCHOR_RDB_SOCKETS |
                          REDIS_ANCHOR_RDB_BACKGROUND | REDIS_ANCHOR_AOF_REWRITE;

}  // namespace

TEST(EntryPoints, DebianRedisGivesEveryEntryPoint) {
  const auto b = entry_points_from_symbols(
      "redis-server", {{"redisFork", 1}, {"startBgsaveForReplication", 2}, {"rdbSaveToSlavesSockets", 3},
                       {"rdbSaveBackground", 4}, {"rewriteAppendOnlyFileBackground", 5}, {"call", 6}});
  EXPECT_EQ(b.anchors(), kAll);
  for (const auto& c : label_coverage(b.anchors())) EXPECT_TRUE(c.by_uprobe) << c.reason;
  EXPECT_NE(describe(b).find("every reason by uprobe"), std::string::npos) << describe(b);
}

TEST(EntryPoints, ValkeyNamesAreTakenToo) {
  const auto b = entry_points_from_symbols(
      "valkey-server", {{"serverFork", 1}, {"startBgsaveForReplication", 2}, {"rdbSaveToReplicasSockets", 3},
                        {"rdbSaveBackground", 4}, {"rewriteAppendOnlyFileBackground", 5}});
  EXPECT_EQ(b.anchors(), kAll);
  EXPECT_EQ(symbol_of(b, REDIS_ANCHOR_FORK), "serverFork");
  EXPECT_EQ(symbol_of(b, REDIS_ANCHOR_RDB_SOCKETS), "rdbSaveToReplicasSockets");
}

TEST(EntryPoints, LtoCopiesAreTakenOnlyWhereTheirArgumentsAreNotRead) {
  const auto b = entry_points_from_symbols(
      "redis-server", {{"redisFork", 1},
                       {"startBgsaveForReplication.lto_priv.0", 2},     // same function, made local
                       {"rdbSaveToSlavesSockets.constprop.0", 3},      // arguments folded: req unknown
                       {"rdbSaveBackground.isra.0", 4},                // argument not read: fine
                       {"rewriteAppendOnlyFileBackground.part.0", 5}});  // a piece only
  EXPECT_EQ(symbol_of(b, REDIS_ANCHOR_REPLICATION), "startBgsaveForReplication.lto_priv.0");
  EXPECT_EQ(symbol_of(b, REDIS_ANCHOR_RDB_SOCKETS), "");
  EXPECT_EQ(symbol_of(b, REDIS_ANCHOR_RDB_BACKGROUND), "rdbSaveBackground.isra.0");
  EXPECT_EQ(symbol_of(b, REDIS_ANCHOR_AOF_REWRITE), "");
  const std::string d = describe(b);
  EXPECT_NE(d.find("rdbSaveToSlavesSockets.constprop.0"), std::string::npos) << d;
  EXPECT_NE(d.find("rewriteAppendOnlyFileBackground.part.0"), std::string::npos) << d;
  // Without the sockets entry point a diskless sync cannot be told; a disk one still can, through
  // rdbSaveBackground under startBgsaveForReplication.
  EXPECT_FALSE(by_uprobe(b.anchors(), "full_sync_diskless"));
  EXPECT_TRUE(by_uprobe(b.anchors(), "full_sync_disk"));
  EXPECT_TRUE(by_uprobe(b.anchors(), "aof_rewrite"));  // from redisFork's purpose
  EXPECT_TRUE(by_uprobe(b.anchors(), "bgsave"));
}

TEST(EntryPoints, TwoClonesOfOneFunctionCannotBeOneAnchor) {
  const auto b = entry_points_from_symbols("x", {{"rdbSaveBackground.constprop.0", 1}, {"rdbSaveBackground.constprop.1", 2}});
  EXPECT_EQ(symbol_of(b, REDIS_ANCHOR_RDB_BACKGROUND), "");
}

TEST(EntryPoints, EachMissingEntryPointCostsOnlyItsLabels) {
  // Only the fork anchor: AOF rewrites and module forks by uprobe; RDB children cannot be told apart.
  EXPECT_TRUE(by_uprobe(REDIS_ANCHOR_FORK, "aof_rewrite"));
  EXPECT_TRUE(by_uprobe(REDIS_ANCHOR_FORK, "module"));
  EXPECT_FALSE(by_uprobe(REDIS_ANCHOR_FORK, "bgsave"));
  EXPECT_FALSE(by_uprobe(REDIS_ANCHOR_FORK, "full_sync_disk"));
  // Without the fork anchor: no module label; the rest from the older entry points.
  const uint32_t no_fork = kAll & ~REDIS_ANCHOR_FORK;
  EXPECT_FALSE(by_uprobe(no_fork, "module"));
  for (const char* r : {"bgsave", "full_sync_disk", "full_sync_diskless", "full_sync_rdb_channel", "aof_rewrite"})
    EXPECT_TRUE(by_uprobe(no_fork, r)) << r;
  for (const auto& c : label_coverage(0)) EXPECT_FALSE(c.by_uprobe) << c.reason;
}

TEST(EntryPoints, AnUnreadableBinaryGivesNothing) {
  const auto b = find_entry_points("/nonexistent/redis-server");
  EXPECT_FALSE(b.readable);
  EXPECT_EQ(b.anchors(), 0u);
  EXPECT_NE(describe(b).find("cannot read"), std::string::npos);
}
