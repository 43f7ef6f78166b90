// SPDX-License-Identifier: Apache-2.0
#include "proc/folios.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "proc/pagemap.h"
#include "proc/proc.h"
#include "proc/sampler.h"

namespace thptrace::proc {
namespace {

// Whether a frame's flags are those of anonymous memory the walk counts: not hugetlbfs's.
bool counted(uint64_t flags) { return (flags & kKpfAnon) && !(flags & kKpfHuge); }

}  // namespace

FolioSpan folio_at(std::span<const uint64_t> block, size_t index) {
  if (index >= block.size()) return {};
  if (!(block[index] & (kKpfCompoundHead | kKpfCompoundTail))) return {index, 1};
  size_t head = index;
  while (!(block[head] & kKpfCompoundHead)) {
    if (head == 0 || !(block[head] & kKpfCompoundTail)) return {};
    --head;
  }
  size_t n = 1;
  while (head + n < block.size() && (block[head + n] & kKpfCompoundTail) && !(block[head + n] & kKpfCompoundHead)) ++n;
  return {head, static_cast<uint32_t>(n)};
}

FolioWalker::FolioWalker(pid_t pid, FileFd pagemap, FileFd kpageflags)
    : pid_(pid), pagemap_(std::move(pagemap)), kpageflags_(std::move(kpageflags)) {
  const auto page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  page_kb_ = page / 1024;
  // A page table page holds page/8 entries: the frames a PMD maps, the largest THP folio's.
  block_frames_ = page / 8;
}

std::optional<FolioWalker> FolioWalker::open(pid_t pid, std::string* why) {
  auto pagemap = open_pagemap(pid, why);
  if (!pagemap) return std::nullopt;
  FileFd kpageflags(::open("/proc/kpageflags", O_RDONLY | O_CLOEXEC));
  if (!kpageflags) {
    *why = std::string("cannot open /proc/kpageflags: ") + std::strerror(errno);
    return std::nullopt;
  }
  return FolioWalker(pid, std::move(*pagemap), std::move(kpageflags));
}

bool FolioWalker::read_flags(uint64_t first, std::span<uint64_t> out) const {
  const auto bytes = static_cast<ssize_t>(out.size_bytes());
  return ::pread(kpageflags_.get(), out.data(), out.size_bytes(), static_cast<off_t>(first * sizeof(uint64_t))) ==
         bytes;
}

uint32_t FolioWalker::anon_folio_pages(uint64_t frame) {
  if (frame < block_first_ || frame - block_first_ >= block_.size()) {
    uint64_t flags = 0;
    if (!read_flags(frame, {&flags, 1})) return 0;
    if (!counted(flags)) return 0;
    if (!(flags & (kKpfCompoundHead | kKpfCompoundTail))) return 1;
    // A large folio: read the aligned block of frames around it, twice the size of the last folio
    // found to start with, and twice larger again until the folio's head and end are both inside it
    // (or the block is a PMD's, the largest folio's).
    for (uint64_t n = std::min(std::max<uint64_t>(last_folio_ * 2, 4), block_frames_);;
         n = std::min(n * 2, block_frames_)) {
      block_.resize(n);
      block_first_ = frame / n * n;
      if (!read_flags(block_first_, block_)) {
        block_.clear();
        return 0;
      }
      const FolioSpan f = folio_at(block_, frame - block_first_);
      if ((f.pages > 0 && f.head + f.pages < n) || n == block_frames_) break;
    }
  }
  if (!counted(block_[frame - block_first_])) return 0;
  const uint32_t pages = folio_at(block_, frame - block_first_).pages;
  if (pages > 1) last_folio_ = pages;
  return pages;
}

std::optional<FolioShares> FolioWalker::walk(std::string* why, uint64_t lookups) {
  const uint64_t start = monotonic_ns();
  const auto maps = writable_private(pid_, why);
  if (!maps) return std::nullopt;
  FolioShares s;
  lookups = std::max<uint64_t>(lookups, 1);
  if (const auto rss_kb = read_statm_rss_kb(pid_))
    s.every = std::max<uint64_t>(1, (*rss_kb / page_kb_ + lookups - 1) / lookups);
  block_.clear();  // frames are reused between walks
  bool frames_shown = false;
  const auto visit = [&](uint64_t, std::span<const uint64_t> entries) {
    for (const uint64_t e : entries) {
      if (!(e & kPagemapPresent)) continue;
      s.pages += s.every;
      const uint64_t frame = e & kPagemapFrame;
      frames_shown = frames_shown || frame != 0;
      if (frame == 0) continue;
      if (const uint32_t n = anon_folio_pages(frame)) s.kb[static_cast<uint32_t>(n * page_kb_)] += page_kb_ * s.every;
    }
  };
  if (s.every == 1) {
    read_pagemap(pagemap_.get(), *maps, 0, UINT64_MAX, visit);
  } else {
    // One PMD-sized window of address space in `every`, counted across the mappings: a window's pages
    // share their large folios, so a window is looked up whole or not at all.
    const uint64_t window = block_frames_ * page_kb_ * 1024;
    uint64_t index = 0;
    for (const auto& m : *maps)
      for (uint64_t at = m.start / window * window; at < m.end; at += window)
        if (index++ % s.every == 0) read_pagemap(pagemap_.get(), {m}, at, at + window, visit);
  }
  if (s.pages > 0 && !frames_shown) {
    *why = "pagemap shows no page frames to this reader (it needs CAP_SYS_ADMIN when it opens the file)";
    return std::nullopt;
  }
  s.walk_ns = monotonic_ns() - start;
  return s;
}

}  // namespace thptrace::proc
