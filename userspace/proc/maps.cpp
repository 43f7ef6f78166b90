// SPDX-License-Identifier: Apache-2.0
#include "proc/maps.h"

#include <charconv>

namespace thptrace::proc {
namespace {

// Takes the next field (up to a space) off the front of `line`, skipping the spaces before it.
std::string_view next_field(std::string_view& line) {
  const auto first = line.find_first_not_of(' ');
  if (first == std::string_view::npos) {
    line = {};
    return {};
  }
  line.remove_prefix(first);
  const auto end = line.find(' ');
  const auto field = line.substr(0, end);
  line.remove_prefix(end == std::string_view::npos ? line.size() : end);
  return field;
}

bool hex_field(std::string_view s, uint64_t& out) {
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out, 16);
  return ec == std::errc() && ptr == s.data() + s.size() && !s.empty();
}

// "START-END PERMS OFFSET DEV INODE [PATH]"
std::optional<Mapping> parse_line(std::string_view line) {
  Mapping m;
  const auto range = next_field(line);
  const auto dash = range.find('-');
  if (dash == std::string_view::npos || !hex_field(range.substr(0, dash), m.start) ||
      !hex_field(range.substr(dash + 1), m.end))
    return std::nullopt;
  const auto perms = next_field(line);
  if (perms.empty() || perms.size() > 7) return std::nullopt;
  m.perms = std::string(perms);
  if (!hex_field(next_field(line), m.offset)) return std::nullopt;
  if (next_field(line).empty() || next_field(line).empty()) return std::nullopt;  // device, inode
  // The path is the rest after the padding, spaces in it kept.
  const auto first = line.find_first_not_of(' ');
  if (first != std::string_view::npos) m.path = std::string(line.substr(first));
  return m;
}

}  // namespace

std::vector<Mapping> parse_maps(std::string_view text) {
  std::vector<Mapping> out;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    const auto line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (auto m = parse_line(line)) out.push_back(std::move(*m));
  }
  return out;
}

}  // namespace thptrace::proc
