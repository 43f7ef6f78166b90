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
#include "proc/pagemap.h"
#include "proc/proc.h"
#include "proc/sampler.h"

namespace thptrace::proc {
namespace {

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

}  // namespace

uint64_t count_soft_dirty(std::span<const uint64_t> entries) {
  uint64_t n = 0;
  for (const uint64_t e : entries)
    if ((e & kPagemapSoftDirty) && (e & (kPagemapPresent | kPagemapSwapped))) ++n;
  return n;
}

uint32_t page_at_clear(uint64_t e) {
  if (e & kPagemapPresent) return static_cast<uint32_t>((e & kPagemapFrame) % 0xfffffffeull) + 2;
  return (e & kPagemapSwapped) ? 1 : 0;
}

namespace {

// Whether a page backed at the clear is still the same page: backed now, in the same frame (swapped
// at one of the two reads: its frame is not known, the page was kept all along).
bool kept_since_clear(uint32_t at_clear, uint64_t now) {
  if (at_clear == 0 || !(now & (kPagemapPresent | kPagemapSwapped))) return false;
  if (at_clear == 1 || !(now & kPagemapPresent)) return true;
  return page_at_clear(now) == at_clear;
}

}  // namespace

bool copied_since_clear(uint32_t at_clear, uint64_t now) {
  return (now & kPagemapSoftDirty) && kept_since_clear(at_clear, now);
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
    else if (*cleared & kPagemapSoftDirty)
      *why = "clear_refs did not clear the soft-dirty bit";
    else if (!(*written & kPagemapSoftDirty))
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
          if (now & kPagemapSoftDirty) ++dirty;
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
