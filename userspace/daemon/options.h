// SPDX-License-Identifier: Apache-2.0
#pragma once
// `thptrace daemon`'s flags and config file, parsed apart from the daemon so the parser can be fuzzed
// (tests/fuzz/fuzz_daemon_config.cpp) without the tracer.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "daemon/credential_rules.h"
#include "daemon/web_config.h"
#include "redis/address.h"
#include "redis/credentials.h"
#include "tracer/options.h"

namespace thptrace::daemon {

struct DaemonOptions {
  std::string listen = "127.0.0.1:9966";
  std::vector<std::string> redis;  // HOST:PORT or unix:/PATH
  std::vector<int> pids;
  redis::ConnectionSettings redis_settings;  // user, password file, TLS (for TCP addresses)
  std::vector<CredentialRule> redis_auth;    // --redis-auth: a login per target (daemon/credential_rules.h)
  bool discover = false;
  uint32_t max_discovered = 256;     // --discover: servers watched at once; more are logged, not taken
  // --discover: the executables and addresses a discovered server's credentials may go to
  // (daemon/discovery.h, CredentialPolicy); a TLS route with a verified certificate always may.
  std::vector<std::string> discover_credentials_exe;
  std::vector<redis::Address> discover_credentials_address;
  // PINGs a second per Redis target (redis/latency_probe.h) while a fork child of it lives (0 = off),
  // and while none does.
  uint32_t latency_probe_hz = 100;
  uint32_t latency_probe_idle_hz = 2;
  int poll_interval_ms = 100;        // while a fork of the target is in progress
  int idle_poll_interval_ms = 2000;  // while none is (common/cadence.h)
  tracer::LoadFlags load;            // --force-fallback, --disk, --ringbuf-kb
  uint32_t max_targets = 64;    // processes traced at once (the in-kernel targets map)
  uint32_t max_episodes = 256;  // fork children tracked at once (the in-kernel episodes map)
  WebConfig web;                // --web.config.file: TLS and basic auth of /metrics (none by default)
};

// Parses flags and the config file (flags win). Throws FatalError(kExitUsage) on bad input.
// Returns nullopt after printing --help.
std::optional<DaemonOptions> parse_daemon_options(int argc, char** argv);
}  // namespace thptrace::daemon
