// SPDX-License-Identifier: Apache-2.0
#include "proc/pagemap.h"

#include <fcntl.h>

#include <cerrno>
#include <cstring>

#include "proc/proc.h"

namespace thptrace::proc {
namespace {

// /proc/PID/maps of a large process: bounded like every file thptrace reads.
constexpr size_t kMaxMaps = 16 << 20;

}  // namespace

std::optional<FileFd> open_pagemap(pid_t pid, std::string* why) {
  const std::string path = "/proc/" + std::to_string(pid) + "/pagemap";
  FileFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    *why = "cannot open " + path + ": " + std::strerror(errno);
    return std::nullopt;
  }
  return fd;
}

std::optional<std::vector<Mapping>> writable_private(pid_t pid, std::string* why) {
  const std::string path = "/proc/" + std::to_string(pid) + "/maps";
  const auto maps = read_file(path, kMaxMaps);
  if (!maps) {
    *why = "cannot read " + path;
    return std::nullopt;
  }
  std::vector<Mapping> out;
  for (auto& m : parse_maps(*maps))
    if (m.perms.size() >= 4 && m.perms[1] == 'w' && m.perms[3] == 'p' && m.end > m.start) out.push_back(std::move(m));
  return out;
}

}  // namespace thptrace::proc
