// SPDX-License-Identifier: Apache-2.0
// /proc/vmstat text, and the other "name value" files of the host's counters: /proc/stat's
// procs_running and /proc/pressure/cpu's "some" total (proc/cpu.h).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_check.h"
#include "proc/cpu.h"
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
  // A figure only where its key begins a line of the text.
  if (thptrace::proc::parse_procs_running(text)) FUZZ_CHECK(text.find("procs_running ") != std::string_view::npos);
  if (thptrace::proc::parse_cpu_pressure_some_us(text)) FUZZ_CHECK(text.find("some ") != std::string_view::npos);
  return 0;
}
