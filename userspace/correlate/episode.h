// SPDX-License-Identifier: Apache-2.0
#pragma once
// The central record: one fork of a watched process, from the clone call to the child's exit.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "correlate/copies.h"
#include "correlate/disk.h"
#include "correlate/replicas.h"
#include "correlate/window.h"
#include "redis/latency_probe.h"

namespace thptrace::correlate {

// full_sync_rdb_channel: a full sync whose RDB the child writes to the replica's own RDB connection,
// one fork per replica (Redis 8 repl-rdb-channel, Valkey 8 dual-channel-replication).
enum class Reason { unknown, bgsave, full_sync_disk, full_sync_diskless, aof_rewrite, module, full_sync_rdb_channel };
constexpr const char* reason_name(Reason r) {
  switch (r) {
    case Reason::bgsave: return "bgsave";
    case Reason::full_sync_disk: return "full_sync_disk";
    case Reason::full_sync_diskless: return "full_sync_diskless";
    case Reason::aof_rewrite: return "aof_rewrite";
    case Reason::module: return "module";
    case Reason::full_sync_rdb_channel: return "full_sync_rdb_channel";
    case Reason::unknown: return "unknown";
  }
  return "unknown";
}
Reason reason_from_kernel(uint32_t code);
inline constexpr Reason kAllReasons[] = {Reason::bgsave,      Reason::full_sync_disk,        Reason::full_sync_diskless,
                                         Reason::aof_rewrite, Reason::full_sync_rdb_channel, Reason::module,
                                         Reason::unknown};

// Server-side latency of one window, from LATENCY HISTOGRAM diffs (power-of-two µs buckets: each
// figure is the upper bound of its bucket).
struct LatencyWindow {
  uint64_t calls = 0;
  double p50_us = 0, p99_us = 0, p999_us = 0, max_us = 0;
};

// A thread's time over a window, from its scheduler clocks (proc::SchedStat) at the /proc samples
// nearest the window's ends (report/assemble.cpp main_thread_time): span_ms is the time between those
// two samples, split into on a CPU, runnable but waiting for one (the run queue), and the rest, asleep
// or blocked (off_cpu_ms). The three add up to span_ms.
struct ThreadTime {
  double span_ms = 0, on_cpu_ms = 0, runqueue_ms = 0, off_cpu_ms = 0;
};

struct ForkEpisode {
  uint32_t parent_tgid = 0;
  uint32_t child_pid = 0;
  Reason reason = Reason::unknown;
  std::string reason_source;  // "uprobe", "info", or "none"
  uint64_t fork_ts_ns = 0;    // the child's creation
  uint64_t exit_ts_ns = 0;     // 0 while the child lives
  std::optional<double> fork_duration_us;  // libc fork() in the parent, else the clone syscall
  std::optional<double> clone_syscall_us;  // the clone syscall alone
  std::optional<double> child_lifetime_ms; // null when the child outlived the capture
  uint64_t cow_faults = 0;
  uint64_t child_cow_faults = 0;
  // What the child wrote over its life (the kernel's I/O accounting at its exit): bytes passed to
  // write calls (an RDB or AOF file, or a replica's socket for a diskless sync), and bytes of page cache
  // it dirtied toward storage. Unset while the child lives.
  struct ChildIo {
    uint64_t written_bytes = 0, storage_bytes = 0;
  };
  std::optional<ChildIo> child_io;
  // The parent's RSS at the fork (the last /proc sample before it), kB; unset without a sample.
  std::optional<uint64_t> rss_kb_at_fork;
  uint64_t huge_cow_faults = 0;   // fentry mode only
  uint64_t thp_splits = 0;        // fentry: in this process; fallback: /proc/vmstat thp_split_pmd delta
  std::string thp_splits_source;  // "kernel" or "vmstat" (system-wide)
  uint64_t huge_allocs = 0;
  std::optional<double> fault_avg_ns;  // fentry mode only
  // How long the parent's threads were stopped in copy-on-write faults while the child lived, ms:
  // the kernel's own timing of the faults ("kernel", fentry), else the copies times a copy's cost
  // measured at start-up ("estimate"); unset when neither is known.
  std::optional<double> copy_stall_ms;
  std::string copy_stall_source;
  std::vector<uint64_t> fault_latency_log2;  // fentry mode only: bucket i = [2^i, 2^(i+1)) ns
  uint64_t compaction_stalls = 0, reclaim_stalls = 0;
  double compaction_ms = 0, reclaim_ms = 0;
  std::optional<LatencyWindow> latency_during, latency_before;
  // What a client felt (redis/latency_probe.h): the probe's requests answered in the fork's window
  // (its freeze included) and in the window before. Unset when the probe did not run or nothing was
  // answered in the window.
  std::optional<redis::ClientLatency> client_latency_during, client_latency_before;
  // The process's fsync, fdatasync and sync_file_range calls by thread kind (the disk family),
  // returned in the fork's window and in the window before; unset when the family did not run (or,
  // before, when the capture started inside that window).
  std::optional<FsyncWindow> fsync_during, fsync_before;
  // The process's main thread (Redis's event loop) over the fork's window and the window before;
  // unset without the samples around it.
  std::optional<ThreadTime> main_thread_during, main_thread_before;
  // What held the CPU whose run queue the main thread waited in, over the child's life exactly (the
  // sched family, bpf/sched.bpf.c), ms: the fork's child, the server's other threads, other
  // processes, nothing (an idle CPU waking up to run it). Unset without that family.
  struct CpuWait {
    double child_ms = 0, threads_ms = 0, others_ms = 0, idle_ms = 0;
    double total_ms() const { return child_ms + threads_ms + others_ms + idle_ms; }
  };
  std::optional<CpuWait> main_wait;
  // The fork child's own scheduler clocks at its exit (the kernel's, read as it exits): its time on a
  // CPU and its time runnable, waiting for one. On a host with few CPUs the child, serialising the
  // dataset, competes with the main thread for them. Unset while it lives.
  struct ChildCpu {
    double on_cpu_ms = 0, runqueue_ms = 0;
  };
  std::optional<ChildCpu> child_cpu;
  // The host's anonymous folio counters by size (proc::kFolioCounters) from the first reading at or
  // after the fork to the first at or after the child's exit (the last reading for a child that
  // outlived the capture): by size in kB, each counter that changed (a gauge's change may be
  // negative). Unset where the kernel has no per-size counters, or no readings bracket the window.
  std::optional<std::map<uint32_t, std::map<std::string, int64_t>>> folios;
  // INFO's aof_delayed_fsync from the last poll before the fork to the first after the child's exit.
  std::optional<int64_t> aof_delayed_fsync;
  // The replicas' full syncs this fork served (INFO replication), in the order they appeared.
  std::vector<ReplicaSync> replicas;
  // Where the parent's copies came from (sampled, --sample-copies); nullopt when sampling was off.
  std::optional<CopyAttribution> copies;
  bool complete() const { return exit_ts_ns != 0; }
  // Its window (correlate/window.h); end_ns closes it for a child that outlived what was seen.
  Window window(uint64_t end_ns = Window::kOpen) const { return {fork_ts_ns, exit_ts_ns ? exit_ts_ns : end_ns}; }
};

}  // namespace thptrace::correlate
