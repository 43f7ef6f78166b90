// The --redis HOST:PORT value of the command line: redis::parse_address.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_check.h"
#include "redis/client.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const auto a = thptrace::redis::parse_address(text);
  if (!a) return 0;
  FUZZ_CHECK(!a->host.empty());
  FUZZ_CHECK(a->port >= 1 && a->port <= 65535);
  FUZZ_CHECK(a->host.size() < text.size());
  // What str() prints (in messages and the report) parses back to the same address.
  const auto again = thptrace::redis::parse_address(a->str());
  FUZZ_CHECK(again && again->host == a->host && again->port == a->port);
  return 0;
}
