// SPDX-License-Identifier: Apache-2.0
#include "bench/server.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include "bench/bench.h"
#include "bench/process.h"

namespace thptrace::bench {
namespace {

// The major version of "8.0.2"; 0 when it does not start with a number.
long major_of(const std::string& version) { return std::strtol(version.c_str(), nullptr, 10); }

}  // namespace

std::string ServerBuild::label() const {
  std::string n = name.empty() ? std::string("redis") : name;
  n[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(n[0])));
  return version.empty() ? n : n + " " + version;
}

ServerBuild identify_server(const std::string& path, const redis::InfoMap& info,
                            const std::map<std::string, std::string>& configs) {
  ServerBuild b;
  b.path = path;
  b.name = redis::info_str(info, "server_name");
  if (b.name.empty()) b.name = "redis";
  b.version = redis::info_str(info, b.name == "valkey" ? "valkey_version" : "redis_version");
  // Valkey 8.0 added dual-channel replication, Redis 8.0 the rdb channel (repl-rdb-channel): before
  // them a full sync has one connection per replica, so the INFO version decides.
  const bool valkey = b.name == "valkey";
  const char* config = valkey ? "dual-channel-replication-enabled" : "repl-rdb-channel";
  if (b.name != "redis" && !valkey) {
    b.no_channel_why = fmt::format("{} is neither Redis nor Valkey (INFO server_name {})", path, b.name);
  } else if (major_of(b.version) < 8) {
    b.no_channel_why = fmt::format(
        "{} ({}) has no rdb channel: Redis ≥ 8.0 has repl-rdb-channel, Valkey ≥ 8.0 "
        "dual-channel-replication-enabled",
        path, b.label());
  } else if (configs.count(config) == 0) {
    b.no_channel_why = fmt::format("{} ({}) does not know CONFIG {}", path, b.label(), config);
  } else {
    b.rdb_channel_config = config;
    b.channel_state = valkey ? "bg_transfer" : "send_bulk_and_stream";
  }
  return b;
}

std::string resolve_server(const std::string& given) {
  if (given.empty()) throw UsageError("--server cannot be empty");
  std::string path = given;
  if (given.find('/') == std::string::npos) {
    path = find_in_path(given);
    if (path.empty()) throw UsageError(fmt::format("--server {}: no such executable in PATH", given));
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw UsageError(fmt::format("--server {}: no such file", given));
  if (!S_ISREG(st.st_mode) || ::access(path.c_str(), X_OK) != 0)
    throw UsageError(fmt::format("--server {}: not an executable file", given));
  return path;
}

ServerBuild probe_server(const std::string& path, const std::filesystem::path& dir) {
  RedisInstance server(path, dir, {});
  const auto info = server.info("server");
  return identify_server(path, info, server.config_get({"repl-rdb-channel", "dual-channel-replication-enabled"}));
}

}  // namespace thptrace::bench
