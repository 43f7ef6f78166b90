// SPDX-License-Identifier: Apache-2.0
#include "proc/cpu.h"

#include <unistd.h>

#include <algorithm>

#include "proc/fields.h"
#include "proc/proc.h"

namespace thptrace::proc {

std::optional<unsigned> parse_procs_running(std::string_view stat) {
  std::optional<unsigned> out;
  bool seen = false;  // the first such line decides
  detail::for_each_line(stat, false, [&](std::string_view line) {
    const auto f = detail::fields(line, 3);
    if (seen || f.empty() || f[0] != "procs_running") return;
    seen = true;
    unsigned v = 0;
    if (f.size() == 2 && detail::number(f[1], v)) out = v;
  });
  return out;
}

std::optional<unsigned> read_procs_running() {
  const auto t = read_file("/proc/stat", 1 << 20);
  return t ? parse_procs_running(*t) : std::nullopt;
}

std::optional<uint64_t> parse_cpu_pressure_some_us(std::string_view pressure) {
  // "some avg10=0.00 avg60=0.00 avg300=0.00 total=12345"
  std::optional<uint64_t> out;
  bool seen = false;
  detail::for_each_line(pressure, false, [&](std::string_view line) {
    const auto f = detail::fields(line);
    if (seen || f.empty() || f[0] != "some") return;
    seen = true;
    uint64_t v = 0;
    for (const auto field : f)
      if (field.substr(0, 6) == "total=" && detail::number(field.substr(6), v)) out = v;
  });
  return out;
}

std::optional<uint64_t> read_cpu_pressure_some_us() {
  const auto t = read_file("/proc/pressure/cpu", 4096);
  return t ? parse_cpu_pressure_some_us(*t) : std::nullopt;
}

unsigned online_cpus() { return static_cast<unsigned>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN))); }

}  // namespace thptrace::proc
