// SPDX-License-Identifier: Apache-2.0
// /proc/PID/smaps_rollup text, and the VmFlags scan of /proc/PID/smaps (the same line format).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_check.h"
#include "proc/proc.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto r = thptrace::proc::parse_smaps_rollup(text);
  // "Rss:" is the one field the parser insists on.
  if (r) FUZZ_CHECK(text.find("Rss:") != std::string_view::npos);
  if (thptrace::proc::parse_smaps_hugepage_advice(text)) FUZZ_CHECK(text.find("VmFlags:") != std::string_view::npos);
  return 0;
}
