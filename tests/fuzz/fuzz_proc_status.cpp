// SPDX-License-Identifier: Apache-2.0
// /proc/PID/status text (the target's Name is chosen by the target: prctl(PR_SET_NAME)).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_check.h"
#include "proc/proc.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto st = thptrace::proc::parse_status(text);
  if (!st) return 0;
  FUZZ_CHECK(st->name.find('\n') == std::string::npos);
  // Values are trimmed of blanks at both ends.
  constexpr std::string_view blanks = " \t\r";
  if (!st->name.empty()) {
    FUZZ_CHECK(blanks.find(st->name.front()) == std::string_view::npos);
    FUZZ_CHECK(blanks.find(st->name.back()) == std::string_view::npos);
  }
  FUZZ_CHECK(st->name.size() < size);
  return 0;
}
