// SPDX-License-Identifier: Apache-2.0
#pragma once
// The disk family's records of one process (EV_DISK: an fsync, fdatasync or sync_file_range, or a
// main thread's write() to a file, timed from entry to return) gathered over a window, per kind of thread: what a
// fork's window says of the disk next to its copies.

#include <cstdint>
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

// The calls of `tgid` that returned in `window`: a call that waited across its start counts where its
// wait ended.
FsyncWindow fsync_window(const std::vector<thptrace_event>& events, uint32_t tgid, const Window& window);

}  // namespace thptrace::correlate
