// SPDX-License-Identifier: Apache-2.0
#pragma once
// The host process of the Redis (or Valkey) at an address, found from the kernel's socket tables with
// what the server says about one of our connections (proc/resolve.h explains the method).

#include <chrono>
#include <string>
#include <string_view>

#include "proc/resolve.h"
#include "redis/client.h"

namespace thptrace::redis {

// CLIENT INFO's reply ("id=4 addr=10.88.0.1:57326 laddr=10.88.0.10:6379 ...") and INFO server's
// text -> the claim proc::resolve_server checks. Missing fields stay unset.
proc::ServerClaim claim_from_replies(const std::string& address, std::string_view client_info, std::string_view info);

// Connects to addr, asks CLIENT INFO and INFO server, and resolves the server's host pid while that
// connection is open. On failure the Resolution's error is one sentence.
proc::Resolution locate_server(const Address& addr, const std::string& user, const std::string& password,
                               std::chrono::milliseconds timeout = std::chrono::milliseconds(2000));
// The same over a connection made with options (TLS, the network namespace to connect from).
proc::Resolution locate_server(const Address& addr, const ConnectOptions& options);

}  // namespace thptrace::redis
