// SPDX-License-Identifier: Apache-2.0
#include "cli/redis_setup.h"

#include <fmt/core.h>

#include "common/error.h"
#include "common/log.h"
#include "redis/client.h"

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

}  // namespace thptrace::cli
