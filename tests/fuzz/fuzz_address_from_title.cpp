// SPDX-License-Identifier: Apache-2.0
// daemon::address_from_title: a redis-server's /proc/PID/cmdline, which the process writes itself
// (any process may call itself redis-server), read by --discover for a server's address and label.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_check.h"
#include "redis/address.h"

// Declared by daemon/discovery.h, whose library needs the BPF skeletons (CMakeLists.txt).
namespace thptrace::daemon {
std::string address_from_title(const std::string& cmdline);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string cmdline(reinterpret_cast<const char*>(data), size);
  const std::string addr = thptrace::daemon::address_from_title(cmdline);
  if (addr.empty()) return 0;
  // What it finds is an address --redis accepts, and not a wildcard.
  const auto parsed = thptrace::redis::parse_address(addr);
  FUZZ_CHECK(parsed.has_value());
  FUZZ_CHECK(parsed->str() == addr);
  FUZZ_CHECK(parsed->host != "*" && parsed->host != "0.0.0.0" && parsed->host != "::");
  FUZZ_CHECK(addr.size() <= size + 16);
  FUZZ_CHECK(addr.find('\0') == std::string::npos && addr.find(' ') == std::string::npos);
  return 0;
}
