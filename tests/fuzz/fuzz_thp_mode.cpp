// SPDX-License-Identifier: Apache-2.0
// The THP sysfs mode files (/sys/kernel/mm/transparent_hugepage/{enabled,defrag}): parse_bracketed_mode.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_check.h"
#include "proc/proc.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::string mode = thptrace::proc::parse_bracketed_mode(text);
  // The word between the first '[' and the first ']' after it, so never a ']' inside.
  FUZZ_CHECK(mode.find(']') == std::string::npos);
  if (!mode.empty()) FUZZ_CHECK(text.find("[" + mode + "]") != std::string_view::npos);
  return 0;
}
