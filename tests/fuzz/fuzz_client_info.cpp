// SPDX-License-Identifier: Apache-2.0
// CLIENT INFO and INFO server replies from a server we do not control, as locate_server reads them
// (redis/locate.h): the bytes before the first NUL are the CLIENT INFO line, the rest INFO's text.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_check.h"
#include "redis/locate.h"
#include "redis/parse.h"

using namespace thptrace;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const auto nul = bytes.find('\0');
  const std::string_view client_info = bytes.substr(0, nul);
  const std::string_view info = nul == std::string_view::npos ? std::string_view{} : bytes.substr(nul + 1);
  const proc::ServerClaim c = redis::claim_from_replies("127.0.0.1:6379", client_info, info);
  FUZZ_CHECK(c.address == "127.0.0.1:6379");
  // A side is only ever read from its own field.
  if (c.server_side) FUZZ_CHECK(client_info.find("laddr=") != std::string_view::npos);
  if (c.client_side) FUZZ_CHECK(client_info.find("addr=") != std::string_view::npos);
  if (c.process_id != 0) FUZZ_CHECK(info.find("process_id:") != std::string_view::npos);
  if (c.uptime_s) FUZZ_CHECK(info.find("uptime_in_seconds:") != std::string_view::npos);

  // The same bytes as server text on its way to a log line: bounded and printable.
  for (const size_t max : {size_t{0}, size_t{7}, redis::kMaxServerText}) {
    const std::string p = redis::printable(bytes, max);
    FUZZ_CHECK(p.size() <= 4 * max + 3);
    for (const char ch : p) FUZZ_CHECK(ch >= 0x20 && ch < 0x7f);
    if (size <= max) FUZZ_CHECK(p.size() >= size);
  }
  return 0;
}
