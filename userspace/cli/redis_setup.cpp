// SPDX-License-Identifier: Apache-2.0
#include "cli/redis_setup.h"

#include <fmt/core.h>

#include "common/error.h"
#include "common/log.h"
#include "redis/client.h"
#include "redis/locate.h"

namespace thptrace::cli {

std::optional<RedisSetup> prepare_redis(const std::string& address_text, const redis::ConnectionSettings& settings) {
  if (const auto wrong = redis::check_settings(settings); !wrong.empty()) throw FatalError(kExitUsage, wrong);
  if (address_text.empty()) {
    if (settings.tls) throw FatalError(kExitUsage, "--redis-tls needs --redis HOST:PORT (the server's tls-port).");
    return std::nullopt;
  }
  RedisSetup setup;
  const auto address = redis::parse_address(address_text);
  if (!address)
    throw FatalError(kExitUsage, fmt::format("--redis {}: expected {}.", address_text, redis::kAddressForms));
  setup.address = *address;
  if (settings.tls && setup.address.is_unix())
    throw FatalError(kExitUsage, fmt::format("--redis {}: Redis serves no TLS on a unix socket; drop --redis-tls.",
                                             address_text));
  std::string error;
  auto credentials = redis::load_credentials(settings, &error);
  if (!credentials) throw FatalError(kExitUsage, error);
  setup.credentials = std::move(*credentials);
  if (setup.credentials.tls) {
    redis::ConnectError failure;
    const auto client = redis::Client::connect(
        setup.address,
        {.user = settings.user, .password = setup.credentials.password, .timeout = std::chrono::milliseconds(3000),
         .tls = setup.credentials.tls},
        &failure);
    if (!client && failure.tls) throw FatalError(kExitRuntime, failure.sentence);
    if (!client) log::warn("{}; tracing the kernel side and trying again", failure.sentence);
  }
  return setup;
}

pid_t resolve_redis_target(const RedisSetup& redis, const std::string& user, pid_t given) {
  // The socket tables read are TCP's: a unix socket's server is not looked up.
  if (redis.address.is_unix()) {
    if (!given)
      throw FatalError(kExitUsage,
                       fmt::format("--redis {} is a unix socket: give the server's --pid too.", redis.address.str()));
    return given;
  }
  const auto found = redis::locate_server(
      redis.address, redis::ConnectOptions{.user = user,
                                           .password = redis.credentials.password,
                                           .timeout = std::chrono::milliseconds(2000),
                                           .tls = redis::tls_for(redis.credentials, redis.address)});
  if (found.pid && given && found.pid != given)
    throw FatalError(kExitUsage, fmt::format("--pid {} is not the server at {}: that is host pid {} ({}).", given,
                                             redis.address.str(), found.pid, found.how));
  if (found.pid) {
    log::debug("{} is host pid {}: {}", redis.address.str(), found.pid, found.how);
    return found.pid;
  }
  if (!given) throw FatalError(kExitUsage, "--redis " + redis.address.str() + " without --pid: " + found.error);
  log::warn("cannot check that pid {} is the server at {}: {}", given, redis.address.str(), found.error);
  return given;
}

}  // namespace thptrace::cli
