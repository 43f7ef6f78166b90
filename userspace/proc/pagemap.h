// SPDX-License-Identifier: Apache-2.0
#pragma once
// /proc/PID/pagemap, read by the soft-dirty rehearsal (proc/soft_dirty.h) and the folio walk
// (proc/folios.h): one 64-bit entry per page of the address space (Documentation/admin-guide/mm/
// pagemap.rst). Its frames are shown only to a reader that held CAP_SYS_ADMIN when it opened the
// file; to others they read 0.

#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "proc/foreign_file.h"
#include "proc/maps.h"

namespace thptrace::proc {

inline constexpr uint64_t kPagemapSoftDirty = 1ull << 55;
inline constexpr uint64_t kPagemapSwapped = 1ull << 62;
inline constexpr uint64_t kPagemapPresent = 1ull << 63;
inline constexpr uint64_t kPagemapFrame = (1ull << 55) - 1;  // bits 0-54: a present page's frame number
// Entries read per pread: 512 KiB of pagemap for 256 MiB of address space.
inline constexpr size_t kPagemapChunkEntries = 64 * 1024;

std::optional<FileFd> open_pagemap(pid_t pid, std::string* why);
// The private writable mappings of pid: what a fork copies on write.
std::optional<std::vector<Mapping>> writable_private(pid_t pid, std::string* why);

// Reads pid's pagemap over the parts of [start, end) still mapped in `maps`, chunk by chunk, into
// visit(address of the first entry, entries).
template <typename Visit>
void read_pagemap(int fd, const std::vector<Mapping>& maps, uint64_t start, uint64_t end, Visit&& visit) {
  const auto page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  // No larger than the range asks: a walk reads windows of 512 entries one by one.
  std::vector<uint64_t> buf(std::min<uint64_t>(kPagemapChunkEntries, (end - start) / page + 1));
  for (const auto& m : maps) {
    const uint64_t from = std::max(m.start, start), to = std::min(m.end, end);
    for (uint64_t at = from; at < to;) {
      const uint64_t n = std::min<uint64_t>((to - at) / page, buf.size());
      if (n == 0) break;
      const auto got = ::pread(fd, buf.data(), n * sizeof(uint64_t), static_cast<off_t>(at / page * 8));
      if (got <= 0) break;  // the mapping went away meanwhile
      const auto entries = static_cast<size_t>(got) / sizeof(uint64_t);
      visit(at, std::span<const uint64_t>(buf.data(), entries));
      at += entries * page;
    }
  }
}

}  // namespace thptrace::proc
