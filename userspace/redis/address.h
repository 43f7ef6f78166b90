// SPDX-License-Identifier: Apache-2.0
#pragma once
// Where a Redis listens: a TCP host and port, or a unix socket. The text forms are those of the
// command line, the config file and the `target` label: "HOST:PORT", "[V6]:PORT", "unix:/PATH".

#include <optional>
#include <string>

namespace thptrace::redis {

// Longest unix socket path connect(2) takes: sizeof(sockaddr_un::sun_path) less the NUL.
inline constexpr size_t kMaxUnixPath = 107;

struct Address {
  std::string host;  // TCP: a name or an IP literal (IPv6 without brackets); "" for a unix socket
  int port = 6379;
  std::string path{};  // unix socket: an absolute path; "" for TCP

  bool is_unix() const { return !path.empty(); }
  // "HOST:PORT", "[V6]:PORT" or "unix:/PATH"; parse_address() reads it back to the same address.
  std::string str() const;
};

// "HOST:PORT", "[V6]:PORT" (port 1..65535) or "unix:/PATH" (absolute, at most kMaxUnixPath bytes,
// no NUL) -> Address; nullopt for anything else. "unix:6379" is the host "unix": a socket path must
// start with '/'.
std::optional<Address> parse_address(const std::string& text);

// What --redis expects, for the one sentence of a usage error.
inline constexpr const char* kAddressForms = "HOST:PORT, [IPV6]:PORT or unix:/PATH/TO/SOCKET";

}  // namespace thptrace::redis
