// SPDX-License-Identifier: Apache-2.0
#pragma once
// A process's anonymous memory by the size of the folio that holds each page: 4 KiB pages, and on
// kernels with multi-size THP (Linux 6.8+) folios of 16 KiB to 2 MiB. No /proc file counts it per
// process by size: smaps's AnonHugePages counts PMD-mapped pages only (a 64 KiB folio, or a 2 MiB one
// whose PMD a write after fork split, is not in it), and smaps has no per-size field as of 6.18. So
// it is read page by page: each resident page's frame from /proc/PID/pagemap, that frame's flags from
// /proc/kpageflags (a large folio's first frame is its head, the others tails; an anonymous THP folio
// is naturally aligned and at most a PMD's size, so its head is in the PMD-aligned block of frames
// around any of its pages).
//
// Cost: one pread of pagemap per 256 MiB of address space, one 8-byte pread of kpageflags per page
// not in a large folio, and one of a block of frames' flags per large folio met (4 KiB of flags for
// 2 MiB of frames); the walk takes no lock of the process (pagemap takes its mmap lock for reading,
// chunk by chunk, as a fault does).

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "proc/foreign_file.h"

namespace thptrace::proc {

struct FolioShares {
  // The process's anonymous memory in its private writable mappings, by the size in KiB of the
  // folio holding each page (4: a page of its own), in KiB.
  std::map<uint32_t, uint64_t> kb;
  uint64_t pages = 0;  // resident pages in those mappings, anonymous or not (estimated when every > 1)
  // 1 when every resident page's folio was looked up; N when the pages of one PMD-sized window of
  // address space in N were, evenly spread, and each counts for N (a process larger than the walk's
  // budget of lookups: kFolioWalkLookups in a capture). The windows left out are not read at all.
  uint64_t every = 1;
  uint64_t walk_ns = 0;  // how long the walk took

  // The anonymous memory the walk found, in KiB: every size's.
  uint64_t total_kb() const {
    uint64_t total = 0;
    for (const auto& [size, held] : kb) total += held;
    return total;
  }
};

// A capture's walk looks up the folios of at most about this many pages (8 GiB of 4 KiB pages; 0.1
// to 0.2 s a GiB on the machine type of docs/development/measurements.md); in a process whose RSS is
// larger, those of one PMD-sized window of address space in N.
inline constexpr uint64_t kFolioWalkLookups = uint64_t{1} << 21;

// kpageflags bits (Documentation/admin-guide/mm/pagemap.rst).
inline constexpr uint64_t kKpfAnon = 1ull << 12;
inline constexpr uint64_t kKpfCompoundHead = 1ull << 15;
inline constexpr uint64_t kKpfCompoundTail = 1ull << 16;
inline constexpr uint64_t kKpfHuge = 1ull << 17;  // hugetlbfs, not THP

// The folio holding frame `index` of `block`, the flags of an aligned block of frames: its head's
// index and its size in pages as far as the block shows it (a folio that reaches the block's end may
// go on past it); {index, 1} for a frame of its own; pages 0 when the block does not hold the
// folio's head.
struct FolioSpan {
  size_t head = 0;
  uint32_t pages = 0;
};
FolioSpan folio_at(std::span<const uint64_t> block, size_t index);

class FolioWalker {
 public:
  // Opens pid's pagemap and /proc/kpageflags now, so that a caller which drops its capabilities
  // later can still walk: pagemap shows frames to whoever held CAP_SYS_ADMIN at its open, and
  // kpageflags is root's alone. nullopt and *why when either cannot be opened.
  static std::optional<FolioWalker> open(pid_t pid, std::string* why);
  // Walks the process's private writable mappings now, looking up about `lookups` pages at most
  // (every > 1 beyond); nullopt and *why when its maps cannot be read or pagemap shows no frames
  // (the process has exited, or the opener lacked CAP_SYS_ADMIN).
  std::optional<FolioShares> walk(std::string* why, uint64_t lookups = kFolioWalkLookups);

 private:
  FolioWalker(pid_t pid, FileFd pagemap, FileFd kpageflags);
  // The size in pages of the anonymous folio holding `frame`; 0 when the frame is not anonymous
  // memory, a hugetlbfs page, or its flags cannot be read.
  uint32_t anon_folio_pages(uint64_t frame);
  bool read_flags(uint64_t first, std::span<uint64_t> out) const;

  pid_t pid_;
  FileFd pagemap_, kpageflags_;
  uint64_t page_kb_, block_frames_;
  // The flags of the last block of frames read whole, from block_first_; the size in frames of the
  // last large folio found.
  std::vector<uint64_t> block_;
  uint64_t block_first_ = 0;
  uint64_t last_folio_ = 0;
};

}  // namespace thptrace::proc
