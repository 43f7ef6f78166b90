// SPDX-License-Identifier: Apache-2.0
#pragma once
// Soft-dirty page tracking (CONFIG_MEM_SOFT_DIRTY): writing 4 to /proc/PID/clear_refs clears the
// soft-dirty bit of every page of the process and write-protects its page tables; the first write to
// each page after that takes a write-protect fault that copies nothing and sets the bit again, which
// /proc/PID/pagemap shows (bit 55). The pages set after a clear at t0 are exactly the pages a fork at
// t0 would have copied by now if its child still lived: a rehearsal of a fork's copies without the
// fork. Used by `thptrace predict`.
//
// What the clear leaves behind is what a fork's child leaves after its exit: pages write-protected
// until next written, each write then one fault that copies nothing. It changes no data and no
// mapping, and tracks nothing once every page has been written.

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace thptrace::proc {

// Whether this kernel tracks soft-dirty pages, found by trying it on a page of our own (cleared, then
// written, then read back in pagemap); *why says what failed when it does not.
bool soft_dirty_supported(std::string* why);

// Pagemap entries that are soft-dirty and backed by memory (present or swapped).
uint64_t count_soft_dirty(std::span<const uint64_t> pagemap_entries);

// A page as pagemap shows it at the clear, in 32 bits: 0 not backed (never touched, or given back),
// 1 swapped out, else its page frame, folded (the frame is 0 for a reader without CAP_SYS_ADMIN, so
// every present page then looks the same).
uint32_t page_at_clear(uint64_t pagemap_entry);
// Whether a page, backed at the clear as `at_clear` says and as pagemap shows it now, is one a fork
// made at the clear would have copied by now: soft-dirty, backed then and now, and in the same frame.
// A page first touched after the clear, or given back and touched again (an allocator's MADV_DONTNEED,
// then a new key), is soft-dirty too, but a fork would have had nothing to share there: a fresh page
// after a fork copies nothing.
bool copied_since_clear(uint32_t at_clear, uint64_t pagemap_entry_now);

// Clears the soft-dirty bits of pid's pages (writes 4 to its clear_refs): the kernel walks all of its
// page tables while holding its mmap lock. Returns how long the write took, in ns; nullopt and *why
// when it failed.
std::optional<uint64_t> clear_soft_dirty(pid_t pid, std::string* why);

// Counts, again and again, the pages of one process written since a clear: the pages of its private
// writable mappings as they were at the clear (memory mapped later is new, and a fork made at the
// clear would not share it) that were backed then, in the same frame now, and whose soft-dirty bit is
// set (copied_since_clear). The frames at the clear are kept for the backed pages only: 12 bytes a
// resident page, 0.3% of the process's RSS. The kernel also reports every page of a
// mapping soft-dirty when the mapping itself was marked (VM_SOFTDIRTY: it was created, or grew or
// merged, after the clear); such a mapping jumps to all of its pages at once between two counts, and
// from then on its count is held at the last one before the jump (`held` says which).
class SoftDirtyCounter {
 public:
  // Reads the mappings right after the clear; nullopt and *why when they cannot be read.
  static std::optional<SoftDirtyCounter> after_clear(pid_t pid, std::string* why);
  // Pages written since the clear; nullopt and *why when the process or its pagemap cannot be read.
  std::optional<uint64_t> count(std::string* why);
  // "" or the mappings whose counts are held, in a few words.
  const std::string& held() const { return held_; }

 private:
  struct Range {
    uint64_t start = 0, end = 0;
    uint64_t last = 0;  // its count at the last read
    bool held = false;
  };
  SoftDirtyCounter(pid_t pid, std::vector<Range> ranges) : pid_(pid), ranges_(std::move(ranges)) {}
  pid_t pid_;
  std::vector<Range> ranges_;
  // The pages backed at the clear (by address, ascending) and what each was then (page_at_clear).
  std::vector<uint64_t> backed_pages_;
  std::vector<uint32_t> backed_at_clear_;
  std::string held_;
};

}  // namespace thptrace::proc
