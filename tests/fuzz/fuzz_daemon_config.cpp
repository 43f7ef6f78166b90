// SPDX-License-Identifier: Apache-2.0
// The daemon's config file (INI, Boost.Program_options): parse_daemon_options with --config.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>

#include "common/error.h"
#include "daemon/options.h"
#include "fuzz_check.h"
#include "redis/client.h"

namespace {

// The file each input is written to, removed when the fuzzer exits.
struct ConfigFile {
  const std::string path = "/tmp/thptrace-fuzz-daemon-" + std::to_string(::getpid()) + ".conf";
  ConfigFile() = default;
  ConfigFile(const ConfigFile&) = delete;
  ConfigFile& operator=(const ConfigFile&) = delete;
  ~ConfigFile() { ::unlink(path.c_str()); }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ConfigFile file;
  const std::string& path = file.path;
  {
    std::ofstream out(path, std::ios::trunc | std::ios::binary);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  const char* argv[] = {"daemon", "--config", path.c_str()};
  try {
    const auto o = thptrace::daemon::parse_daemon_options(3, const_cast<char**>(argv));
    if (!o) return 0;  // help = yes in the file
    FUZZ_CHECK(thptrace::redis::parse_address(o->listen).has_value());
    for (const auto& r : o->redis) FUZZ_CHECK(thptrace::redis::parse_address(r).has_value());
    for (const int p : o->pids) FUZZ_CHECK(p > 0);
    for (const auto& r : o->redis_auth) FUZZ_CHECK(!r.match.empty() && !r.path.empty() && r.path.front() == '/');
    FUZZ_CHECK(o->poll_interval_ms >= 10 && o->poll_interval_ms <= 60000);
    FUZZ_CHECK(o->idle_poll_interval_ms >= o->poll_interval_ms &&
               (o->idle_poll_interval_ms <= 5000 || o->idle_poll_interval_ms == o->poll_interval_ms));
    FUZZ_CHECK(!o->redis.empty() || !o->pids.empty() || o->discover);
  } catch (const thptrace::FatalError& e) {
    FUZZ_CHECK(e.code() == thptrace::kExitUsage);
  }
  return 0;
}
