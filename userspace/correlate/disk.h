// SPDX-License-Identifier: Apache-2.0
#pragma once
// The disk family's records of one process (EV_DISK: an fsync, fdatasync or sync_file_range, or a
// main thread's write() to a file, timed from entry to return) gathered over a window, per kind of thread: what a
// fork's window says of the disk next to its copies.

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "correlate/window.h"
#include "kernel/abi.h"

namespace thptrace::correlate {

struct FsyncLatency {
  uint64_t count = 0;
  double p50_us = 0, p99_us = 0, max_us = 0;
};

// The main thread's write() calls to regular files (Redis's event loop writing its AOF): how long
// they held it in all, and the slowest.
struct FileWrites {
  uint64_t count = 0;
  double blocked_ms = 0, p99_us = 0, max_us = 0;
};

// Each kind of thread (bpf/thptrace.h enum thptrace_thread_kind); unset where it made none.
struct FsyncWindow {
  std::optional<FsyncLatency> main, bio_aof, other;
  std::optional<FileWrites> aof_write;  // unset where the main thread wrote to no file
  uint64_t count() const;               // the syncs, writes left out
};

// "main", "bio_aof" or "other" for an EV_DISK record's value2 (enum thptrace_thread_kind): the names
// the report's keys and the metrics' thread label use.
const char* thread_kind_name(uint64_t kind);

// One call of an EV_DISK record, kept small (24 bytes against the record's few hundred).
struct DiskCall {
  uint64_t start_ns = 0, end_ns = 0;  // end: its return, when the record was made
  uint32_t call = 0;                  // enum thptrace_disk_call
  uint32_t kind = 0;                  // enum thptrace_thread_kind
};
// The call of an EV_DISK record; nullopt for any other record or one that returned before it began.
std::optional<DiskCall> disk_call(const thptrace_event& e);

// The calls of `tgid` that returned in `window`: a call that waited across its start counts where its
// wait ended.
FsyncWindow fsync_window(const std::vector<thptrace_event>& events, uint32_t tgid, const Window& window);

// One process's disk calls as a capture receives them, in bounded memory: the last `capacity` calls.
// A capture summarises each fork's windows from it once they close, and keeps no record of its own;
// how far back it reaches depends on the call rate (a million calls: 350 s of `appendfsync always`
// at 3,000 syncs a second), and a window that began before the oldest call it kept is not summarised.
class DiskLog {
 public:
  explicit DiskLog(size_t capacity) : capacity_(capacity) {}
  // Calls arrive in the order they returned, nearly: the ring buffer's order across CPUs.
  void add(const DiskCall& c);
  // The calls that returned in `window`; nullopt when calls it may have held were let go.
  std::optional<FsyncWindow> window(const Window& window) const;
  uint64_t dropped() const { return dropped_; }

 private:
  size_t capacity_;
  std::deque<DiskCall> calls_;
  uint64_t dropped_ = 0;
  uint64_t complete_from_ns_ = 0;  // every call that returned at or after it is still here
};

}  // namespace thptrace::correlate
