// SPDX-License-Identifier: Apache-2.0
// The text the server resolver reads besides the socket tables (those are fuzz_proc_net's):
// /proc/PID/fd link targets, /proc/PID/stat (comm is the process's choice), /proc/uptime, NSpid of
// /proc/PID/status, and CLIENT INFO's laddr/addr from the server. The first byte picks the parser.
#include <cstddef>
#include <cstdint>
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
  switch (data[0] % 5) {
    case 0:
      if (const auto e = parse_endpoint(text)) check_endpoint(*e);
      break;
    case 1:
      if (parse_socket_link(text)) FUZZ_CHECK(text.starts_with("socket:[") && text.ends_with(']'));
      break;
    case 2: (void)parse_stat_start_ticks(text); break;
    case 3:
      if (const auto up = parse_uptime(text)) FUZZ_CHECK(*up >= 0);
      break;
    default:
      // Only from an "NSpid:" line.
      if (!parse_nspid(text).empty()) FUZZ_CHECK(text.find("NSpid:") != std::string_view::npos);
  }
  return 0;
}
