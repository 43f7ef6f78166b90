// SPDX-License-Identifier: Apache-2.0
#pragma once
// The tokens of /proc's text tables, shared by their parsers (net.cpp, resolve.cpp, cpu.cpp): lines, fields
// split on blanks, whole numbers in hex or decimal. Every input is hostile: a number must fill its
// field, and nothing reads past the text it is given.

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace thptrace::proc::detail {

// The blank-separated fields of a line, at most `max` of them (the last one ends at its first blank).
inline std::vector<std::string_view> fields(std::string_view line, size_t max = static_cast<size_t>(-1)) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (out.size() < max) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    if (i >= line.size()) break;
    const size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    out.push_back(line.substr(start, i - start));
  }
  return out;
}

// s, all of it, as a number in `base`.
template <typename T>
bool number(std::string_view s, T& out, int base = 10) {
  if (s.empty()) return false;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out, base);
  return ec == std::errc() && p == s.data() + s.size();
}

// Calls f with each line of text, the first left out when skip_header.
template <typename F>
void for_each_line(std::string_view text, bool skip_header, F&& f) {
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t nl = std::min(text.find('\n', pos), text.size());
    const std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    if (!std::exchange(skip_header, false)) f(line);
  }
}

}  // namespace thptrace::proc::detail
