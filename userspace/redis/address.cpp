// SPDX-License-Identifier: Apache-2.0
#include "redis/address.h"

#include <charconv>

namespace thptrace::redis {

std::string Address::str() const {
  if (is_unix()) return "unix:" + path;
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::optional<Address> parse_address(const std::string& text) {
  if (text.rfind("unix:/", 0) == 0) {
    Address a;
    a.path = text.substr(5);
    // A NUL would cut the path short in connect(2); a longer path does not fit sockaddr_un.
    if (a.path.size() > kMaxUnixPath || a.path.find('\0') != std::string::npos) return std::nullopt;
    return a;
  }
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) return std::nullopt;
  Address a;
  a.host = text.substr(0, colon);
  const bool bracketed = a.host.front() == '[';
  if (bracketed) {
    if (a.host.size() < 3 || a.host.back() != ']') return std::nullopt;
    a.host = a.host.substr(1, a.host.size() - 2);
  }
  // Brackets only delimit an IPv6 literal; a host that still holds one ("[[::1]]:1") is no host,
  // and str() of it would not parse back (found by tests/fuzz).
  if (a.host.find_first_of("[]") != std::string::npos) return std::nullopt;
  // A host with a colon is an IPv6 literal: str() brackets it, so it must not also hold a '/' or a
  // NUL that getaddrinfo would read differently; bracketed text must hold a colon to be IPv6.
  if (a.host.find('\0') != std::string::npos) return std::nullopt;
  if (bracketed && a.host.find(':') == std::string::npos) return std::nullopt;
  const char* first = text.data() + colon + 1;
  const char* last = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(first, last, a.port);
  if (ec != std::errc() || ptr != last || a.port < 1 || a.port > 65535) return std::nullopt;
  return a;
}

}  // namespace thptrace::redis
