// SPDX-License-Identifier: Apache-2.0
#pragma once
// The server binary `thptrace bench --server` starts for every primary and replica: which build it
// is, and whether it has an rdb channel (the fork child sends the RDB over a connection of the
// replica's own while the primary streams the writes on the main one).

#include <filesystem>
#include <map>
#include <string>

#include "redis/parse.h"

namespace thptrace::bench {

struct ServerBuild {
  std::string path;
  std::string name;     // "redis" or "valkey" (INFO server_name; Redis has none)
  std::string version;  // valkey_version for Valkey (its redis_version is the 7.2.4 it forked from)
  // The config that turns the rdb channel on ("repl-rdb-channel", "dual-channel-replication-enabled"),
  // "" when the build has none.
  std::string rdb_channel_config;
  // The replica state (the primary's INFO replication) only that channel shows: Redis 8
  // send_bulk_and_stream, Valkey 8 bg_transfer.
  std::string channel_state;
  // Why the build has no rdb channel, one clause; "" when it has one.
  std::string no_channel_why;

  // "Valkey 8.0.1", "Redis 7.0.15".
  std::string label() const;
};

// Which build answered INFO server, and its rdb channel where it has one: Redis ≥ 8.0 has
// repl-rdb-channel, Valkey ≥ 8.0 dual-channel-replication-enabled; `configs` (CONFIG GET of both
// names) must know the config too, so a build that renamed it is not switched on blindly.
ServerBuild identify_server(const std::string& path, const redis::InfoMap& info,
                            const std::map<std::string, std::string>& configs);

// --server as given: a path, or a bare name looked up in PATH. Throws UsageError when it names no
// executable file.
std::string resolve_server(const std::string& given);

// Starts `path` once on a free 127.0.0.1 port in `dir` and identifies it. Throws BenchError when it
// does not start and answer PING.
ServerBuild probe_server(const std::string& path, const std::filesystem::path& dir);

}  // namespace thptrace::bench
