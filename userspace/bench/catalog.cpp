// SPDX-License-Identifier: Apache-2.0
// The bench's scenarios, one table, and --scenarios' choice among them (names and groups).
#include <fmt/format.h>

#include <sstream>
#include <string>
#include <vector>

#include "bench/scenario.h"
#include "common/error.h"

namespace thptrace::bench {
namespace {

std::vector<std::string> aof_args(const char* fsync, const char* no_fsync_on_rewrite) {
  // auto-aof-rewrite-percentage 0: no automatic rewrite while the dataset loads, only ours.
  const std::pair<const char*, const char*> flags[] = {
      {"--appendonly", "yes"},
      {"--appendfsync", fsync},
      {"--no-appendfsync-on-rewrite", no_fsync_on_rewrite},
      {"--auto-aof-rewrite-percentage", "0"},
  };
  std::vector<std::string> args;
  for (const auto& [flag, value] : flags) args.insert(args.end(), {flag, value});
  return args;
}

}  // namespace

const std::vector<ScenarioSpec>& all_scenarios() {
  static const std::vector<ScenarioSpec> specs = [] {
    std::vector<ScenarioSpec> v;
    v.push_back({"steady", Trigger::none, false, "", {}, "", "write load, no fork"});
    v.push_back({"full_sync_disk",
                 Trigger::replica_sync,
                 false,
                 "full_sync_disk",
                 {"--repl-diskless-sync", "no"},
                 "",
                 "a fresh replica pulls a full sync over disk (repl-diskless-sync no)"});
    v.push_back({"full_sync_diskless",
                 Trigger::replica_sync,
                 false,
                 "full_sync_diskless",
                 {"--repl-diskless-sync", "yes"},
                 "",
                 "a fresh replica pulls a diskless full sync (repl-diskless-sync yes)"});
    // A scale-out: three fresh replicas attach to the loaded primary at once.
    v.push_back({"scale_out_disk",
                 Trigger::replica_sync,
                 false,
                 "full_sync_disk",
                 {"--repl-diskless-sync", "no"},
                 "",
                 "three fresh replicas attach at once, full syncs over disk (repl-diskless-sync no)",
                 3});
    v.push_back({"scale_out_diskless",
                 Trigger::replica_sync,
                 false,
                 "full_sync_diskless",
                 {"--repl-diskless-sync", "yes"},
                 "",
                 "three fresh replicas attach at once, diskless full syncs (repl-diskless-sync yes, delay 0)",
                 3});
    // The same over the build's rdb channel: the child sends the RDB on a connection of the
    // replica's own while the primary streams the writes on the main one (Redis 8, Valkey 8).
    v.push_back({"scale_out_channel",
                 Trigger::replica_sync,
                 false,
                 "full_sync_rdb_channel",
                 {"--repl-diskless-sync", "yes"},
                 "",
                 "three fresh replicas attach at once, diskless full syncs over the server's rdb channel "
                 "(repl-rdb-channel / dual-channel-replication-enabled yes, delay 0)",
                 3,
                 true});
    v.push_back({"readonly_control",
                 Trigger::replica_sync,
                 true,
                 "full_sync_disk",
                 {"--repl-diskless-sync", "no"},
                 "",
                 "the disk full sync under a read-only load (GET): the negative control"});
    for (const char* fsync : {"always", "everysec"})
      for (const char* skip : {"no", "yes"})
        v.push_back({fmt::format("aof_{}_{}", fsync, skip), Trigger::rewrite_aof, false, "aof_rewrite",
                     aof_args(fsync, skip), "",
                     fmt::format("BGREWRITEAOF with appendfsync {}, no-appendfsync-on-rewrite {}", fsync, skip)});
    v.push_back({"thp_always",
                 Trigger::bgsave,
                 false,
                 "bgsave",
                 {"--disable-thp", "no"},
                 "always",
                 "BGSAVE with THP `always` and disable-thp no"});
    v.push_back({"thp_never",
                 Trigger::bgsave,
                 false,
                 "bgsave",
                 {"--disable-thp", "no"},
                 "never",
                 "BGSAVE with THP `never` and disable-thp no"});
    return v;
  }();
  return specs;
}

std::vector<ScenarioSpec> select_scenarios(const std::string& comma_list) {
  std::vector<bool> chosen(all_scenarios().size(), false), named(chosen);
  std::istringstream in(comma_list);
  bool any = false;
  for (std::string word; std::getline(in, word, ',');) {
    if (word.empty()) continue;
    any = true;
    bool matched = false;
    for (size_t i = 0; i < all_scenarios().size(); ++i) {
      const auto& s = all_scenarios()[i];
      const bool hit = word == s.name || word == "all" ||
                       (word == "aof_rewrite" && s.trigger == Trigger::rewrite_aof) ||
                       (word == "thp_ab" && !s.thp_mode.empty()) ||
                       (word == "full_sync" && s.trigger == Trigger::replica_sync && !s.read_only && s.replicas == 1) ||
                       (word == "scale_out" && s.replicas > 1);
      if (hit) chosen[i] = matched = true;
      if (word == s.name) named[i] = true;
    }
    if (!matched) {
      std::string names;
      for (const auto& s : all_scenarios()) names += s.name + ", ";
      throw UsageError(
          fmt::format("--scenarios: unknown scenario '{}' (known: {}and the groups full_sync, "
                      "scale_out, aof_rewrite, thp_ab, all)",
                      word, names));
    }
  }
  if (!any) throw UsageError("--scenarios: the list is empty");
  std::vector<ScenarioSpec> out;
  for (size_t i = 0; i < chosen.size(); ++i)
    if (chosen[i]) {
      out.push_back(all_scenarios()[i]);
      out.back().named = named[i];
    }
  return out;
}

}  // namespace thptrace::bench
