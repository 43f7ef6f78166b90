// SPDX-License-Identifier: Apache-2.0
#include "proc/soft_dirty.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <vector>

#include <fmt/core.h>

#include "proc/foreign_file.h"
#include "proc/maps.h"
#include "proc/proc.h"
#include "proc/sampler.h"

namespace thptrace::proc {
namespace {

// pagemap entry bits (Documentation/admin-guide/mm/pagemap.rst).
constexpr uint64_t kSoftDirty = 1ull << 55;
constexpr uint64_t kSwapped = 1ull << 62;
constexpr uint64_t kPresent = 1ull << 63;
// Entries read per pread: 512 KiB of pagemap for 256 MiB of address space.
constexpr size_t kChunkEntries = 64 * 1024;
// /proc/PID/maps of a large process: bounded like every file thptrace reads.
constexpr size_t kMaxMaps = 16 << 20;

bool write_clear_refs(const std::string& path, std::string* why) {
  FileFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    *why = "cannot open " + path + ": " + std::strerror(errno);
    return false;
  }
  if (::write(fd.get(), "4", 1) != 1) {
    *why = "cannot write 4 to " + path + ": " + std::strerror(errno);
    return false;
  }
  return true;
}

std::optional<uint64_t> pagemap_entry(int fd, uint64_t address) {
  uint64_t e = 0;
  const auto page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  if (::pread(fd, &e, sizeof e, static_cast<off_t>(address / page * sizeof e)) != sizeof e) return std::nullopt;
  return e;
}

// A mapping this large that turns soft-dirty whole between two counts, having been under half so, was
// marked as a whole (VM_SOFTDIRTY), not written page by page in a quarter of a second.
constexpr uint64_t kWholeMappingPages = 256;

constexpr uint64_t kFrame = (1ull << 55) - 1;  // bits 0-54: the page frame number of a present page

// Reads pid's pagemap over the parts of [start, end) still mapped in `maps`, chunk by chunk, into
// visit(address of the first entry, entries).
template <typename Visit>
void read_pagemap(int fd, const std::vector<Mapping>& maps, uint64_t start, uint64_t end, Visit&& visit) {
  const auto page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  std::vector<uint64_t> buf(kChunkEntries);
  for (const auto& m : maps) {
    const uint64_t from = std::max(m.start, start), to = std::min(m.end, end);
    for (uint64_t at = from; at < to;) {
      const uint64_t n = std::min<uint64_t>((to - at) / page, kChunkEntries);
      if (n == 0) break;
      const auto got = ::pread(fd, buf.data(), n * sizeof(uint64_t), static_cast<off_t>(at / page * 8));
      if (got <= 0) break;  // the mapping went away meanwhile
      const auto entries = static_cast<size_t>(got) / sizeof(uint64_t);
      visit(at, std::span<const uint64_t>(buf.data(), entries));
      at += entries * page;
    }
  }
}

std::optional<FileFd> open_pagemap(pid_t pid, std::string* why) {
  const std::string path = "/proc/" + std::to_string(pid) + "/pagemap";
  FileFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    *why = "cannot open " + path + ": " + std::strerror(errno);
    return std::nullopt;
  }
  return fd;
}

// The private writable mappings of pid: what a fork copies on write.
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

}  // namespace

uint64_t count_soft_dirty(std::span<const uint64_t> entries) {
  uint64_t n = 0;
  for (const uint64_t e : entries)
    if ((e & kSoftDirty) && (e & (kPresent | kSwapped))) ++n;
  return n;
}

uint32_t page_at_clear(uint64_t e) {
  if (e & kPresent) return static_cast<uint32_t>((e & kFrame) % 0xfffffffeull) + 2;
  return (e & kSwapped) ? 1 : 0;
}

namespace {

// Whether a page backed at the clear is still the same page: backed now, in the same frame (swapped
// at one of the two reads: its frame is not known, the page was kept all along).
bool kept_since_clear(uint32_t at_clear, uint64_t now) {
  if (at_clear == 0 || !(now & (kPresent | kSwapped))) return false;
  if (at_clear == 1 || !(now & kPresent)) return true;
  return page_at_clear(now) == at_clear;
}

}  // namespace

bool copied_since_clear(uint32_t at_clear, uint64_t now) {
  return (now & kSoftDirty) && kept_since_clear(at_clear, now);
}

bool soft_dirty_supported(std::string* why) {
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  void* m = ::mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    *why = std::string("cannot map a test page: ") + std::strerror(errno);
    return false;
  }
  auto* byte = static_cast<volatile char*>(m);
  const auto address = reinterpret_cast<uint64_t>(m);
  bool ok = false;
  *byte = 1;
  FileFd pagemap(::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC));
  if (pagemap.get() < 0) {
    *why = std::string("cannot open /proc/self/pagemap: ") + std::strerror(errno);
  } else if (write_clear_refs("/proc/self/clear_refs", why)) {
    const auto cleared = pagemap_entry(pagemap.get(), address);
    *byte = 2;
    const auto written = pagemap_entry(pagemap.get(), address);
    if (!cleared || !written)
      *why = "cannot read /proc/self/pagemap";
    else if (*cleared & kSoftDirty)
      *why = "clear_refs did not clear the soft-dirty bit";
    else if (!(*written & kSoftDirty))
      *why = "this kernel does not track soft-dirty pages (no CONFIG_MEM_SOFT_DIRTY)";
    else
      ok = true;
  }
  ::munmap(m, page);
  return ok;
}

std::optional<uint64_t> clear_soft_dirty(pid_t pid, std::string* why) {
  const uint64_t start = monotonic_ns();
  if (!write_clear_refs("/proc/" + std::to_string(pid) + "/clear_refs", why)) return std::nullopt;
  return monotonic_ns() - start;
}

std::optional<SoftDirtyCounter> SoftDirtyCounter::after_clear(pid_t pid, std::string* why) {
  const auto maps = writable_private(pid, why);
  if (!maps) return std::nullopt;
  auto fd = open_pagemap(pid, why);
  if (!fd) return std::nullopt;
  std::vector<Range> ranges;
  for (const auto& m : *maps) ranges.push_back({m.start, m.end, 0, false});
  SoftDirtyCounter c(pid, std::move(ranges));
  const auto page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  read_pagemap(fd->get(), *maps, 0, UINT64_MAX, [&](uint64_t at, std::span<const uint64_t> entries) {
    for (size_t i = 0; i < entries.size(); ++i)
      if (const uint32_t p = page_at_clear(entries[i])) {
        c.backed_pages_.push_back(at + i * page);
        c.backed_at_clear_.push_back(p);
      }
  });
  return c;
}

std::optional<uint64_t> SoftDirtyCounter::count(std::string* why) {
  const auto maps = writable_private(pid_, why);
  if (!maps) return std::nullopt;
  auto fd = open_pagemap(pid_, why);
  if (!fd) return std::nullopt;
  const auto page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  uint64_t total = 0;
  for (auto& r : ranges_) {
    // Of the pages backed at the clear in this range and still in their frame: how many are
    // soft-dirty. A mapping marked soft-dirty as a whole shows them all at once.
    uint64_t dirty = 0, kept = 0;
    read_pagemap(fd->get(), *maps, r.start, r.end, [&](uint64_t at, std::span<const uint64_t> entries) {
      auto it = std::lower_bound(backed_pages_.begin(), backed_pages_.end(), at);
      const uint64_t end = at + entries.size() * page;
      for (; it != backed_pages_.end() && *it < end; ++it) {
        const uint64_t now = entries[(*it - at) / page];
        const uint32_t then = backed_at_clear_[static_cast<size_t>(it - backed_pages_.begin())];
        if (kept_since_clear(then, now)) {
          ++kept;
          if (now & kSoftDirty) ++dirty;
        }
      }
    });
    if (!r.held && kept >= kWholeMappingPages && dirty == kept && r.last * 2 < kept) {
      r.held = true;
      held_ += fmt::format("{}{:x}-{:x} ({} pages)", held_.empty() ? "" : ", ", r.start, r.end, kept);
    }
    if (!r.held) r.last = dirty;
    total += r.last;
  }
  return total;
}

}  // namespace thptrace::proc
