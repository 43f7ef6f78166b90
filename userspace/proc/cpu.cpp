// SPDX-License-Identifier: Apache-2.0
#include "proc/cpu.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>

#include "proc/proc.h"

namespace thptrace::proc {
namespace {

// The unsigned number after `key` at the start of a line of `text`; nullopt when there is none.
template <typename T>
std::optional<T> number_after(std::string_view text, std::string_view key) {
  for (size_t at = 0; at < text.size();) {
    const size_t end = std::min(text.find('\n', at), text.size());
    const std::string_view line = text.substr(at, end - at);
    at = end + 1;
    if (line.substr(0, key.size()) != key) continue;
    const std::string_view rest = line.substr(key.size());
    T v{};
    const auto [p, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), v);
    if (ec != std::errc() || p == rest.data()) return std::nullopt;
    return v;
  }
  return std::nullopt;
}

}  // namespace

std::optional<unsigned> parse_procs_running(std::string_view stat) {
  return number_after<unsigned>(stat, "procs_running ");
}

std::optional<unsigned> read_procs_running() {
  const auto t = read_file("/proc/stat", 1 << 20);
  return t ? parse_procs_running(*t) : std::nullopt;
}

std::optional<uint64_t> parse_cpu_pressure_some_us(std::string_view pressure) {
  // "some avg10=0.00 avg60=0.00 avg300=0.00 total=12345"
  for (size_t at = 0; at < pressure.size();) {
    const size_t end = std::min(pressure.find('\n', at), pressure.size());
    const std::string_view line = pressure.substr(at, end - at);
    at = end + 1;
    if (line.substr(0, 5) != "some ") continue;
    const auto total = line.find(" total=");
    if (total == std::string_view::npos) return std::nullopt;
    return number_after<uint64_t>(line.substr(total + 1), "total=");
  }
  return std::nullopt;
}

std::optional<uint64_t> read_cpu_pressure_some_us() {
  const auto t = read_file("/proc/pressure/cpu", 4096);
  return t ? parse_cpu_pressure_some_us(*t) : std::nullopt;
}

unsigned online_cpus() { return static_cast<unsigned>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN))); }

}  // namespace thptrace::proc
