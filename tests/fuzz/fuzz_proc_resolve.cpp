// SPDX-License-Identifier: Apache-2.0
// The /proc text the server resolver reads (proc/resolve.h): /proc/PID/net/tcp{,6} of every network
// namespace, /proc/PID/fd link targets, /proc/PID/stat (comm is the process's choice), /proc/uptime,
// /proc/PID/net/fib_trie, NSpid of /proc/PID/status, and CLIENT INFO's laddr/addr from the server.
// The first byte picks the parser.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include "fuzz_check.h"
#include "proc/resolve.h"

using namespace thptrace::proc;

namespace {

void check_endpoint(const Endpoint& e) {
  FUZZ_CHECK(!e.ip.empty() && e.ip.size() <= 45);
  // What str() writes reads back as the same endpoint.
  const auto again = parse_endpoint(e.str());
  FUZZ_CHECK(again && *again == e);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 7) {
    case 0:
      for (const auto& s : parse_net_tcp(text)) {
        check_endpoint(s.local);
        check_endpoint(s.remote);
      }
      break;
    case 1:
      if (const auto e = parse_endpoint(text)) check_endpoint(*e);
      break;
    case 2:
      if (parse_socket_link(text)) FUZZ_CHECK(text.starts_with("socket:[") && text.ends_with(']'));
      break;
    case 3: (void)parse_stat_start_ticks(text); break;
    case 4:
      if (const auto up = parse_uptime(text)) FUZZ_CHECK(*up >= 0);
      break;
    case 5: {
      const auto locals = parse_fib_trie_local_addresses(text);
      // Distinct IPv4 addresses, never loopback.
      FUZZ_CHECK(std::set<std::string>(locals.begin(), locals.end()).size() == locals.size());
      for (const auto& ip : locals) {
        FUZZ_CHECK(ip.rfind("127.", 0) != 0);
        // In its canonical form: parse_endpoint writes it back unchanged.
        const auto e = parse_endpoint(ip + ":1");
        FUZZ_CHECK(e && e->ip == ip);
      }
      break;
    }
    default:
      // Only from an "NSpid:" line.
      if (!parse_nspid(text).empty()) FUZZ_CHECK(text.find("NSpid:") != std::string_view::npos);
  }
  return 0;
}
