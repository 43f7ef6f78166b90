// SPDX-License-Identifier: Apache-2.0
// /proc/PID/net/{tcp,tcp6,unix,fib_trie} as --discover reads them: proc::parse_tcp_listeners,
// proc::parse_unix_listeners and proc::parse_local_ipv4. The first byte picks the table.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_check.h"
#include "proc/net.h"
#include "redis/address.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 4) {
    case 0:
    case 1:
      for (const auto& l : thptrace::proc::parse_tcp_listeners(text, data[0] % 4 == 1)) {
        FUZZ_CHECK(l.port >= 1 && l.port <= 65535);
        // Every listener turns into an address that --redis would accept.
        const auto a = thptrace::redis::parse_address(thptrace::redis::Address{l.ip, l.port}.str());
        FUZZ_CHECK(a && a->host == l.ip && a->port == l.port);
      }
      break;
    case 3:
      for (const auto& ip : thptrace::proc::parse_local_ipv4(text)) {
        // An IPv4 address of our own, never loopback, usable as --redis's host.
        FUZZ_CHECK(!ip.empty() && ip.rfind("127.", 0) != 0);
        const auto a = thptrace::redis::parse_address(ip + ":6379");
        FUZZ_CHECK(a && a->host == ip);
      }
      break;
    default:
      for (const auto& l : thptrace::proc::parse_unix_listeners(text)) {
        FUZZ_CHECK(!l.path.empty() && l.path.front() == '/');
        FUZZ_CHECK(l.path.find('\n') == std::string::npos);
      }
  }
  return 0;
}
