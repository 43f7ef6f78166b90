// SPDX-License-Identifier: Apache-2.0
// /proc/PID/net/{tcp,tcp6,unix,fib_trie} as --discover and the resolver read them: proc::parse_net_tcp,
// proc::parse_unix_listeners and proc::parse_local_ipv4. The first byte picks the table.
#include <cstddef>
#include <cstdint>
#include <set>
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
      for (const auto& s : thptrace::proc::parse_net_tcp(text)) {
        for (const auto* e : {&s.local, &s.remote}) {
          // What str() writes reads back as the same endpoint.
          FUZZ_CHECK(!e->ip.empty() && e->ip.size() <= 45);
          const auto again = thptrace::proc::parse_endpoint(e->str());
          FUZZ_CHECK(again && *again == *e);
        }
        if (s.local.port == 0) continue;
        // Every listener turns into an address that --redis would accept.
        const auto a = thptrace::redis::parse_address(thptrace::redis::Address{s.local.ip, s.local.port}.str());
        FUZZ_CHECK(a && a->host == s.local.ip && a->port == s.local.port);
      }
      break;
    case 3: {
      const auto locals = thptrace::proc::parse_local_ipv4(text);
      // Distinct addresses.
      FUZZ_CHECK(std::set<std::string>(locals.begin(), locals.end()).size() == locals.size());
      for (const auto& ip : locals) {
        // An IPv4 address of our own, never loopback, usable as --redis's host.
        FUZZ_CHECK(!ip.empty() && ip.rfind("127.", 0) != 0);
        const auto a = thptrace::redis::parse_address(ip + ":6379");
        FUZZ_CHECK(a && a->host == ip);
      }
      break;
    }
    default:
      for (const auto& l : thptrace::proc::parse_unix_listeners(text)) {
        FUZZ_CHECK(!l.path.empty() && l.path.front() == '/');
        FUZZ_CHECK(l.path.find('\n') == std::string::npos);
      }
  }
  return 0;
}
