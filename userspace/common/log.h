// SPDX-License-Identifier: Apache-2.0
#pragma once
// Minimal logging to stderr: warnings always, debug lines only with --verbose. Each line is made
// printable (common/text.h): the values in it come from processes and servers we do not control.

#include <fmt/core.h>

#include <atomic>
#include <cstdio>

#include "common/text.h"

namespace thptrace::log {

inline std::atomic<bool>& verbose_flag() {
  static std::atomic<bool> v{false};
  return v;
}
inline void set_verbose(bool v) { verbose_flag() = v; }
inline bool verbose() { return verbose_flag(); }

template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
  fmt::print(stderr, "thptrace: {}\n", text::printable(fmt::format(f, std::forward<Args>(args)...)));
}

template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... args) {
  if (verbose())
    fmt::print(stderr, "thptrace: debug: {}\n", text::printable(fmt::format(f, std::forward<Args>(args)...)));
}

}  // namespace thptrace::log
