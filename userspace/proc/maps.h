// SPDX-License-Identifier: Apache-2.0
#pragma once
// /proc/PID/maps: the mappings of a process, read by the symbolizer (which file an address is in)
// and the tracer (which libc to put a uprobe in). The text is the kernel's, but the paths in it are
// names the process chose: any byte but '\n'.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "proc/foreign_file.h"

namespace thptrace::proc {

// One line of /proc/PID/maps.
struct Mapping {
  uint64_t start = 0, end = 0;
  std::string perms;  // "rw-p"
  uint64_t offset = 0;
  std::string path;  // "" for an anonymous mapping
  MappedRange range() const { return {start, end}; }
};

// Every well-formed line, in order; lines that are not are skipped.
std::vector<Mapping> parse_maps(std::string_view text);

}  // namespace thptrace::proc
