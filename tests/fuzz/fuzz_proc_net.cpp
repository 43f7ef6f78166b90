// /proc/PID/net/{tcp,tcp6,unix} as --discover reads them: proc::parse_tcp_listeners and
// proc::parse_unix_listeners. The first byte picks the table.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_check.h"
#include "proc/net.h"
#include "redis/address.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0:
    case 1:
      for (const auto& l : thptrace::proc::parse_tcp_listeners(text, data[0] % 3 == 1)) {
        FUZZ_CHECK(l.port >= 1 && l.port <= 65535);
        // Every listener turns into an address that --redis would accept.
        const auto a = thptrace::redis::parse_address(thptrace::redis::Address{l.ip, l.port}.str());
        FUZZ_CHECK(a && a->host == l.ip && a->port == l.port);
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
