// SPDX-License-Identifier: Apache-2.0
// /proc/vmstat text.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_check.h"
#include "proc/proc.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto counters = thptrace::proc::parse_vmstat(text);
  for (const auto& [name, value] : counters) {
    (void)value;
    // A name is the first word of one line.
    FUZZ_CHECK(!name.empty());
    FUZZ_CHECK(name.find_first_of(" \n") == std::string::npos);
    FUZZ_CHECK(text.find(name) != std::string_view::npos);
  }
  return 0;
}
