// SPDX-License-Identifier: Apache-2.0
#pragma once
// The capture's Redis connection, made ready before anything is attached: the address parsed, the
// password and TLS files read once, and one connection tried, so a certificate that can never be
// accepted stops the capture at once with its sentence instead of leaving a report without Redis.

#include <sys/types.h>

#include <optional>
#include <string>

#include "redis/address.h"
#include "redis/credentials.h"

namespace thptrace::cli {

struct RedisSetup {
  redis::Address address;
  redis::Credentials credentials;
};

// nullopt when no --redis was given. Throws FatalError: kExitUsage for a bad address, contradicting
// flags or an unreadable file; kExitRuntime when the TLS handshake or the server's certificate
// fails. A server that is merely down is no error: the capture traces the kernel side without it.
std::optional<RedisSetup> prepare_redis(const std::string& address_text, const redis::ConnectionSettings& settings);

// The host pid of the server at --redis. The pid Redis reports is its pid in its own PID namespace
// (1 in a container): the kernel's socket tables say which host process it is. given: --pid, 0 when
// omitted. Throws FatalError (kExitUsage) when --pid names another process, or when neither says
// which process it is.
pid_t resolve_redis_target(const RedisSetup& redis, const std::string& user, pid_t given);

}  // namespace thptrace::cli
