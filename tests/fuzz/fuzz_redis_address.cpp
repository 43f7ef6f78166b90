// SPDX-License-Identifier: Apache-2.0
// The --redis value of the command line and the config file: redis::parse_address, in all its forms
// (HOST:PORT, [V6]:PORT, unix:/PATH).
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_check.h"
#include "redis/address.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const auto a = thptrace::redis::parse_address(text);
  if (!a) return 0;
  if (a->is_unix()) {
    // A socket path connect(2) can take whole: absolute, short enough for sun_path, no NUL.
    FUZZ_CHECK(a->host.empty());
    FUZZ_CHECK(a->path.front() == '/');
    FUZZ_CHECK(a->path.size() <= thptrace::redis::kMaxUnixPath);
    FUZZ_CHECK(a->path.find('\0') == std::string::npos);
    FUZZ_CHECK(a->str() == text);
  } else {
    FUZZ_CHECK(!a->host.empty());
    FUZZ_CHECK(a->path.empty());
    FUZZ_CHECK(a->port >= 1 && a->port <= 65535);
    FUZZ_CHECK(a->host.size() < text.size());
    FUZZ_CHECK(a->host.find('\0') == std::string::npos);
  }
  // What str() prints (in messages, the report and the target label) parses back to the same address.
  const auto again = thptrace::redis::parse_address(a->str());
  FUZZ_CHECK(again && again->host == a->host && again->port == a->port && again->path == a->path);
  return 0;
}
