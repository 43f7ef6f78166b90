// SPDX-License-Identifier: Apache-2.0
// `thptrace daemon` flags and config file (Boost.Program_options; a flag wins over the file).
#include <algorithm>
#include <boost/program_options.hpp>
#include <iostream>
#include <sstream>

#include "common/error.h"
#include "common/log.h"
#include "common/program_options.h"
#include "daemon/options.h"
#include "proc/proc.h"
#include "redis/client.h"
#include "redis/options.h"

namespace po = boost::program_options;

namespace thptrace::daemon {

namespace {

// What to watch: --redis, --pid, --discover and how many it takes.
void targets_from(const po::variables_map& vm, DaemonOptions& o) {
  o.discover = vm["discover"].as<bool>();
  o.max_discovered = vm["max-discovered"].as<uint32_t>();
  if (o.max_discovered < 1 || o.max_discovered > 65536)
    throw FatalError(kExitUsage, "--max-discovered: expected 1 to 65536.");
  if (vm.count("redis")) o.redis = vm["redis"].as<std::vector<std::string>>();
  for (const auto& r : o.redis)
    if (!redis::parse_address(r))
      throw FatalError(kExitUsage, "--redis " + r + ": expected " + redis::kAddressForms + ".");
  if (vm.count("pid")) o.pids = vm["pid"].as<std::vector<int>>();
  for (const int p : o.pids)
    if (p <= 0) throw FatalError(kExitUsage, "--pid " + std::to_string(p) + ": expected a positive process id.");
}

// What each target's Redis is sent, and to whom a discovered server's login may go.
void credentials_from(const po::variables_map& vm, DaemonOptions& o) {
  o.redis_settings = redis_connection_settings(vm);
  if (const auto wrong = redis::check_settings(o.redis_settings); !wrong.empty()) throw FatalError(kExitUsage, wrong);
  if (vm.count("redis-auth"))
    for (const auto& text : vm["redis-auth"].as<std::vector<std::string>>()) {
      std::string error;
      auto rule = parse_credential_rule(text, &error);
      if (!rule) throw FatalError(kExitUsage, error);
      o.redis_auth.push_back(std::move(*rule));
    }
  if (vm.count("discover-credentials-exe"))
    o.discover_credentials_exe = vm["discover-credentials-exe"].as<std::vector<std::string>>();
  for (const auto& path : o.discover_credentials_exe)
    if (path.empty() || path.front() != '/')
      throw FatalError(kExitUsage, "--discover-credentials-exe " + path + ": expected an absolute path.");
  if (vm.count("discover-credentials-address"))
    for (const auto& text : vm["discover-credentials-address"].as<std::vector<std::string>>()) {
      const auto a = redis::parse_address(text);
      if (!a)
        throw FatalError(kExitUsage,
                         "--discover-credentials-address " + text + ": expected " + redis::kAddressForms + ".");
      o.discover_credentials_address.push_back(*a);
    }
}

// How often each Redis is polled and probed.
void pace_from(const po::variables_map& vm, DaemonOptions& o) {
  o.latency_probe_hz = vm["latency-probe"].as<uint32_t>();
  if (o.latency_probe_hz > 10000) throw FatalError(kExitUsage, "--latency-probe: expected 0 (off) to 10000.");
  o.latency_probe_idle_hz = vm["latency-probe-idle"].as<uint32_t>();
  if (o.latency_probe_idle_hz < 1 || o.latency_probe_idle_hz > 10000)
    throw FatalError(kExitUsage, "--latency-probe-idle: expected 1 to 10000.");
  o.poll_interval_ms = vm["poll-interval-ms"].as<int>();
  if (o.poll_interval_ms < 10 || o.poll_interval_ms > 60000)
    throw FatalError(kExitUsage, "--poll-interval-ms: expected 10 to 60000.");
  // Unset, it follows a --poll-interval-ms above its default (a constant cadence).
  o.idle_poll_interval_ms = vm["idle-poll-interval-ms"].defaulted()
                                ? std::max(vm["idle-poll-interval-ms"].as<int>(), o.poll_interval_ms)
                                : vm["idle-poll-interval-ms"].as<int>();
  // At most 5 s: the INFO history the daemon keeps to name a fork reaches 5 s back from its fork
  // (correlate/correlator.cpp), and the poll answered before the fork must still be in it.
  if (o.idle_poll_interval_ms < o.poll_interval_ms ||
      (o.idle_poll_interval_ms > 5000 && o.idle_poll_interval_ms != o.poll_interval_ms))
    throw FatalError(kExitUsage, "--idle-poll-interval-ms: expected --poll-interval-ms to 5000.");
}

po::options_description daemon_options_description() {
  po::options_description desc("thptrace daemon: Prometheus exporter of fork, COW and THP figures");
  desc.add_options()("help,h", "show this help")("config", po::value<std::string>(), "config file (INI: key = value)")(
      "listen", po::value<std::string>()->default_value("127.0.0.1:9966"), "HOST:PORT of the /metrics endpoint")(
      "redis", po::value<std::vector<std::string>>()->composing(),
      "Redis HOST:PORT or unix:/PATH to watch (repeatable)")("pid", po::value<std::vector<int>>()->composing(),
                                                             "process to watch without Redis (repeatable)")(
      "discover", po::value<bool>()->default_value(false)->implicit_value(true), "also watch every local redis-server")(
      "max-discovered", po::value<uint32_t>()->default_value(256),
      "--discover: servers watched at once (more are logged and not taken)")(
      "discover-credentials-exe", po::value<std::vector<std::string>>()->composing(),
      "--discover: send the Redis credentials to a server running this executable (absolute path, "
      "compared by inode; repeatable)")(
      "discover-credentials-address", po::value<std::vector<std::string>>()->composing(),
      "--discover: send the Redis credentials to a server reached at this HOST:PORT or unix:/PATH (repeatable)")(
      "redis-auth", po::value<std::vector<std::string>>()->composing(),
      "MATCH=PATH: the Redis login of the targets whose label or NAMESPACE/POD matches the glob MATCH: PATH is "
      "a directory with `password` and `username` (a mounted basic-auth Secret) or a password file; the first "
      "match wins, others use --redis-password-file (repeatable)")(
      "latency-probe", po::value<uint32_t>()->default_value(100),
      "PINGs a second to each Redis while a fork child of it lives, each timed from its due time, for "
      "thptrace_redis_client_latency_seconds (0 = off)")(
      "latency-probe-idle", po::value<uint32_t>()->default_value(2),
      "PINGs a second to each Redis while no fork child of it lives (a fork is timed from its start all the "
      "same)")("poll-interval-ms", po::value<int>()->default_value(100),
               "Redis INFO poll interval while a fork is in progress, ms")(
      "idle-poll-interval-ms", po::value<int>()->default_value(2000),
      "Redis INFO poll interval while no fork is in progress, ms (a fork wakes the poller at once)")(
      "max-targets", po::value<uint32_t>()->default_value(64), "processes traced at once (in-kernel map size)")(
      "max-episodes", po::value<uint32_t>()->default_value(256), "fork children tracked at once (in-kernel map size)")(
      "web.config.file", po::value<std::string>(),
      "TLS and basic auth of /metrics: a web configuration file as Prometheus exporters read it "
      "(docs/guide/daemon.md)")("verbose,v", "print libbpf's messages and debug lines");
  tracer::add_load_options(desc);
  add_redis_connection_options(desc);
  return desc;
}

}  // namespace

std::optional<DaemonOptions> parse_daemon_options(int argc, char** argv) {
  const po::options_description desc = daemon_options_description();
  po::variables_map vm;
  // The config file is read once, at most 1 MiB of it.
  std::optional<std::string> config_text;
  const auto parse = [&](int n, const char* const* args, po::variables_map& out, bool safe) {
    po::store(po::command_line_parser(n, args).options(desc).run(), out);
    if (out.count("config")) {
      const std::string path = out["config"].as<std::string>();
      if (!config_text) {
        config_text = proc::read_file(path, 1 << 20);
        if (!config_text) throw FatalError(kExitUsage, "cannot read the config file " + path + ".");
      }
      std::string text = *config_text;
      if (safe) std::replace(text.begin(), text.end(), '%', '?');
      std::istringstream in(text);
      po::store(po::parse_config_file(in, desc), out);
    }
    po::notify(out);
  };
  if (const auto error = parse_command_line(parse, argc, argv, vm))
    throw FatalError(kExitUsage, "daemon: " + *error + " (see thptrace daemon --help).");
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return std::nullopt;
  }
  DaemonOptions o;
  o.listen = vm["listen"].as<std::string>();
  if (const auto l = redis::parse_address(o.listen); !l || l->is_unix())
    throw FatalError(kExitUsage, "--listen " + o.listen + ": expected HOST:PORT.");
  targets_from(vm, o);
  credentials_from(vm, o);
  pace_from(vm, o);
  o.load = tracer::load_flags(vm);
  o.max_targets = vm["max-targets"].as<uint32_t>();
  if (o.max_targets < 1 || o.max_targets > 65536) throw FatalError(kExitUsage, "--max-targets: expected 1 to 65536.");
  o.max_episodes = vm["max-episodes"].as<uint32_t>();
  if (o.max_episodes < 1 || o.max_episodes > 65536)
    throw FatalError(kExitUsage, "--max-episodes: expected 1 to 65536.");
  if (vm.count("web.config.file")) o.web = load_web_config(vm["web.config.file"].as<std::string>());
  if (o.redis.empty() && o.pids.empty() && !o.discover)
    throw FatalError(kExitUsage, "nothing to watch: give --redis, --pid or --discover (see thptrace daemon --help).");
  log::set_verbose(vm.count("verbose") > 0);
  return o;
}

}  // namespace thptrace::daemon
