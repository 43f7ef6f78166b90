// SPDX-License-Identifier: Apache-2.0
// /proc/PID/maps as the symbolizer and the tracer read it (proc::parse_maps): the paths in it are
// names the traced process chose, any byte but '\n'.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_check.h"
#include "proc/maps.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  size_t lines = 1;
  for (const char c : text) lines += c == '\n';
  const auto maps = thptrace::proc::parse_maps(text);
  FUZZ_CHECK(maps.size() <= lines);
  for (const auto& m : maps) {
    FUZZ_CHECK(!m.perms.empty() && m.perms.size() <= 7);
    FUZZ_CHECK(m.path.find('\n') == std::string::npos);
    FUZZ_CHECK(m.path.empty() || m.path.front() != ' ');
    FUZZ_CHECK(m.perms.find(' ') == std::string::npos);
    FUZZ_CHECK(m.range().start == m.start && m.range().end == m.end);
  }
  return 0;
}
