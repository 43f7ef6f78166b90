// SPDX-License-Identifier: Apache-2.0
#pragma once
// Every metric the daemon exports, described once: Metrics registers each from this table, makes the
// series it names at zero, and removes a target's from it. docs/reference/metrics.md is the same list
// for people (a unit test holds the two together). A new metric is a row here and the line that sets
// its value.

#include <array>
#include <cstddef>
#include <optional>
#include <span>
#include <string_view>

#include "correlate/episode.h"

namespace thptrace::daemon {

enum class MetricType { counter, gauge, histogram };

// Whose series a family holds: the host's (no target label), or targets' (each labelled with its
// target, all removed with it).
enum class Owner { host, target };

// Series made at zero with their owner (at the daemon's start, or in add_target), so that rate() and
// increase() see the first event: one per value of `label`, or one without it when label is empty.
// A family without them makes a series when it is first set.
struct ZeroSeries {
  std::string_view label;
  std::span<const std::string_view> values;
};
inline constexpr ZeroSeries kOneSeries{};

struct MetricSpec {
  std::string_view name;
  MetricType type = MetricType::counter;
  Owner owner = Owner::target;
  std::string_view help;
  std::span<const double> buckets = {};  // a histogram's upper bounds
  std::optional<ZeroSeries> at_zero = std::nullopt;
  // Redis's own figures, which RedisMirror serves as Redis reports them: a prometheus-cpp counter
  // can only be incremented. Not registered; removed with RedisMirror::forget.
  bool mirrored = false;
};

namespace metric_buckets {

inline constexpr double kForkSeconds[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                          0.025,  0.05,    0.1,    0.25,  0.5,    1,     2.5};
inline constexpr double kLifetimeSeconds[] = {0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800};
// Powers of four, one fault to 16 Mi.
inline constexpr double kCowFaults[] = {1,     4,     16,     64,      256,     1024,    4096,
                                        16384, 65536, 262144, 1048576, 4194304, 16777216};
inline constexpr double kReplicas[] = {0, 1, 2, 3, 4, 6, 8, 16, 32};
inline constexpr double kSyncSeconds[] = {0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800};
inline constexpr double kStallSeconds[] = {0.00001, 0.0001, 0.001, 0.01, 0.1, 1, 10};
// The latency probe's requests (redis/latency_probe.h): 1-2-5 steps from 25 µs to 5 s, plus the 300 µs
// the THP study counts a request over as a timeout.
inline constexpr double kClientSeconds[] = {0.000025, 0.00005, 0.0001, 0.0002, 0.0003, 0.0005, 0.001, 0.002, 0.005,
                                            0.01,     0.02,    0.05,   0.1,    0.2,    0.5,    1,     2,     5};
// An fsync: 10 µs (a file with nothing dirty) to 10 s (a saturated disk), in 1-2-5 steps.
inline constexpr double kFsyncSeconds[] = {0.00001, 0.00002, 0.00005, 0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01,
                                           0.02,    0.05,    0.1,     0.2,    0.5,    1,      2,     5,     10};

}  // namespace metric_buckets

namespace metric_labels {

inline constexpr auto kReasonNames = [] {
  std::array<std::string_view, std::size(correlate::kAllReasons)> names{};
  for (size_t i = 0; i < names.size(); ++i) names[i] = correlate::reason_name(correlate::kAllReasons[i]);
  return names;
}();
inline constexpr std::string_view kStallKinds[] = {"compaction", "reclaim"};
inline constexpr std::string_view kSyncOutcomes[] = {"online", "dropped"};
inline constexpr std::string_view kReapOutcomes[] = {"lost_exit", "dead"};

}  // namespace metric_labels

// In the order of registration, which is the order of the exposition within each type.
inline constexpr auto kMetrics = [] {
  using namespace metric_buckets;
  using namespace metric_labels;
  return std::to_array<MetricSpec>({
      {.name = "thptrace_forks_total",
       .type = MetricType::counter,
       .owner = Owner::target,
       .help = "Forks of a watched process, by reason.",
       .at_zero = ZeroSeries{"reason", kReasonNames}},
      {.name = "thptrace_fork_duration_seconds",
       .type = MetricType::histogram,
       .owner = Owner::target,
       .help = "Time the parent spent in fork() (libc call, else the clone syscall).",
       .buckets = kForkSeconds},
      {.name = "thptrace_fork_child_lifetime_seconds",
       .type = MetricType::histogram,
       .owner = Owner::target,
       .help = "Time from fork to the child's exit.",
       .buckets = kLifetimeSeconds},
      {.name = "thptrace_fork_cow_faults",
       .type = MetricType::histogram,
       .owner = Owner::target,
       .help = "Copy-on-write faults the parent took while one fork child lived.",
       .buckets = kCowFaults},
      {.name = "thptrace_fork_replicas",
       .type = MetricType::histogram,
       .owner = Owner::target,
       .help = "Replicas one full-sync fork served (INFO replication), by fork.",
       .buckets = kReplicas,
       .at_zero = kOneSeries},
      {.name = "thptrace_replica_sync_duration_seconds",
       .type = MetricType::histogram,
       .owner = Owner::target,
       .help = "A replica's full sync from its request (first listed) to online.",
       .buckets = kSyncSeconds,
       .at_zero = kOneSeries},
      {.name = "thptrace_replica_syncs_total",
       .type = MetricType::counter,
       .owner = Owner::target,
       .help = "Replicas' full syncs that ended, by outcome (online, or dropped before online).",
       .at_zero = ZeroSeries{"outcome", kSyncOutcomes}},
      {.name = "thptrace_full_sync_loop_repeats_total",
       .type = MetricType::counter,
       .owner = Owner::target,
       .help = "Full syncs of a replica that had already full-synced in the hour before (it was dropped, before "
               "or after online): a full-sync loop going round.",
       .at_zero = kOneSeries},
      {.name = "thptrace_cow_faults_total",
       .type = MetricType::counter,
       .owner = Owner::target,
       .help = "Write faults on present pages taken by the watched process: copies while a fork "
               "child lives and reuse of pages no longer shared alike.",
       .at_zero = kOneSeries},
      {.name = "thptrace_child_cow_faults_total",
       .type = MetricType::counter,
       .owner = Owner::target,
       .help = "Write faults on present pages taken by the watched process's fork children.",
       .at_zero = kOneSeries},
      {.name = "thptrace_copies_total",
       .type = MetricType::counter,
       .owner = Owner::target,
       .help = "Pages the watched process copied on write while a fork child of it lived, added when the "
               "fork's child has exited.",
       .at_zero = kOneSeries},
      {.name = "thptrace_parent_copied_bytes_total",
       .type = MetricType::counter,
       .owner = Owner::target,
       .help = "Bytes the watched process's copies took (the parent's alone, not its fork children's): copies "
               "times the base page size.",
       .at_zero = kOneSeries},
      {.name = "thptrace_reuse_faults_total",
       .type = MetricType::counter,
       .owner = Owner::target,
       .help = "Write faults on present pages while no fork child of the watched process lived: pages "
               "no longer shared, taken over without a copy.",
       .at_zero = kOneSeries},
      {.name = "thptrace_thp_splits_total",
       .type = MetricType::counter,
       .owner = Owner::target,
       .help = "Huge PMDs split by copy-on-write in the watched process (fentry mode) or system-wide "
               "during its fork windows (/proc/vmstat thp_split_pmd).",
       .at_zero = kOneSeries},
      {.name = "thptrace_thp_collapses_total",
       .type = MetricType::counter,
       .owner = Owner::target,
       .help = "khugepaged collapses of the watched process's memory.",
       .at_zero = kOneSeries},
      {.name = "thptrace_stall_seconds",
       .type = MetricType::histogram,
       .owner = Owner::target,
       .help = "Direct compaction and direct reclaim stalls of the watched process, by kind.",
       .buckets = kStallSeconds,
       .at_zero = ZeroSeries{"kind", kStallKinds}},
      {.name = "thptrace_redis_client_latency_seconds",
       .type = MetricType::histogram,
       .owner = Owner::target,
       .help = "The latency probe's PINGs, each timed from its due time, by phase: fork while a "
               "fork child of the server lived, idle otherwise.",
       .buckets = kClientSeconds},
      {.name = "thptrace_fsync_seconds",
       .type = MetricType::histogram,
       .owner = Owner::target,
       .help = "fsync, fdatasync and sync_file_range calls of the watched process, timed in the kernel from "
               "entry to return, by thread (main: the event loop; bio_aof: Redis's AOF fsync thread; other) "
               "and phase (fork while a fork child of it lived, idle otherwise).",
       .buckets = kFsyncSeconds},
      {.name = "thptrace_main_thread_seconds_total",
       .type = MetricType::counter,
       .owner = Owner::target,
       .help = "Time of the watched process's main thread (Redis's event loop) by state (on_cpu: running; "
               "runqueue: runnable, waiting for a CPU) and phase (fork while a fork child of it lived, idle "
               "otherwise), from its scheduler clocks (/proc/PID/task/PID/schedstat) at each reading."},
      {.name = "thptrace_main_thread_cpu_wait_seconds_total",
       .type = MetricType::counter,
       .owner = Owner::target,
       .help = "Time the watched process's main thread was runnable and waited for a CPU, by what held the CPU "
               "whose run queue it waited in (fork_child, own_threads, other_processes, idle_cpu: the wake-up's "
               "own latency), counted in the kernel at each context switch (the sched family) while a fork child "
               "of it lives."},
      {.name = "thptrace_fork_child_cpu_seconds_total",
       .type = MetricType::counter,
       .owner = Owner::target,
       .help = "Time of the watched process's fork children by state (on_cpu: running; runqueue: runnable, "
               "waiting for a CPU), from each child's scheduler clocks read by the kernel as it exits: beside "
               "thptrace_main_thread_seconds_total{phase=\"fork\"}, who had the CPUs while forks lived."},
      {.name = "thptrace_aof_write_seconds",
       .type = MetricType::histogram,
       .owner = Owner::target,
       .help = "write() calls of the watched process's main thread to regular files (Redis's event loop "
               "writing its AOF), timed in the kernel from entry to return, by phase (fork while a fork "
               "child of it lived, idle otherwise).",
       .buckets = kFsyncSeconds},
      {.name = "thptrace_last_fork_timestamp_seconds",
       .type = MetricType::gauge,
       .owner = Owner::target,
       .help = "Unix time the last fork of the watched process of each reason started, set when its "
               "child has exited."},
      {.name = "thptrace_last_fork_duration_seconds",
       .type = MetricType::gauge,
       .owner = Owner::target,
       .help = "How long the last fork froze the watched process (its libc fork() call), set "
               "when its child has exited."},
      {.name = "thptrace_last_fork_parent_copied_bytes",
       .type = MetricType::gauge,
       .owner = Owner::target,
       .help = "Bytes the watched process copied on write while the child of its last fork lived (the "
               "parent's copies alone)."},
      {.name = "thptrace_fork_in_progress",
       .type = MetricType::gauge,
       .owner = Owner::target,
       .help = "Fork children of the watched process alive now.",
       .at_zero = kOneSeries},
      {.name = "thptrace_anon_huge_pages_bytes",
       .type = MetricType::gauge,
       .owner = Owner::target,
       .help = "AnonHugePages of the watched process (smaps_rollup)."},
      {.name = "thptrace_rss_bytes",
       .type = MetricType::gauge,
       .owner = Owner::target,
       .help = "Resident set of the watched process."},
      {.name = "thptrace_memory_cgroup_usage_bytes",
       .type = MetricType::gauge,
       .owner = Owner::target,
       .help = "Usage of the memory cgroup the watched process is charged to (v1 memory.usage_in_bytes, "
               "v2 memory.current)."},
      {.name = "thptrace_memory_cgroup_limit_bytes",
       .type = MetricType::gauge,
       .owner = Owner::target,
       .help = "Limit of that memory cgroup (v1 memory.limit_in_bytes, v2 memory.max); absent when it has none."},
      {.name = "thptrace_thp_enabled_info",
       .type = MetricType::gauge,
       .owner = Owner::host,
       .help = "The system's THP modes (/sys/kernel/mm/transparent_hugepage)."},
      {.name = "thptrace_anon_folio_bytes",
       .type = MetricType::gauge,
       .owner = Owner::host,
       .help = "Anonymous memory of the host in folios of each size, by size in KiB "
               "(hugepages-<N>kB/stats/nr_anon times N; Linux 6.13+), read every 5 s."},
      {.name = "thptrace_target_anon_folio_bytes",
       .type = MetricType::gauge,
       .owner = Owner::target,
       .help = "Anonymous memory of the watched process in folios of each size, by size in KiB (4: pages of "
               "their own), from its pagemap and /proc/kpageflags: walked every 5 minutes while no fork child "
               "lives, one PMD-sized window of its address space in N where it is larger than 128 MiB of pages "
               "(an estimate then)."},
      {.name = "thptrace_thp_process_enabled",
       .type = MetricType::gauge,
       .owner = Owner::target,
       .help = "1 unless the watched process opted out of THP (THP_enabled: 0, e.g. Redis disable-thp)."},
      {.name = "thptrace_events_dropped_total",
       .type = MetricType::counter,
       .owner = Owner::host,
       .help = "Kernel events lost because the ring buffer was full.",
       .at_zero = kOneSeries},
      {.name = "thptrace_probe_info",
       .type = MetricType::gauge,
       .owner = Owner::host,
       .help = "Attach mode of each probe family on this kernel."},
      {.name = "thptrace_redis_up",
       .type = MetricType::gauge,
       .owner = Owner::target,
       .help = "1 when Redis answered the last poll.",
       .at_zero = kOneSeries},
      {.name = "thptrace_redis_current_cow_size_bytes",
       .type = MetricType::gauge,
       .owner = Owner::target,
       .help = "Redis INFO current_cow_size of the live fork child."},
      {.name = "thptrace_redis_current_fork_ratio",
       .type = MetricType::gauge,
       .owner = Owner::target,
       .help = "Redis INFO current_fork_perc / 100: progress of the live fork child."},
      {.name = "thptrace_redis_current_save_keys_processed",
       .type = MetricType::gauge,
       .owner = Owner::target,
       .help = "Redis INFO current_save_keys_processed."},
      {.name = "thptrace_redis_latest_fork_seconds",
       .type = MetricType::gauge,
       .owner = Owner::target,
       .help = "Redis INFO latest_fork_usec, in seconds."},
      {.name = "thptrace_predicted_fork_freeze_seconds",
       .type = MetricType::gauge,
       .owner = Owner::target,
       .help = "The next fork's freeze of every client, predicted from the last fork traced."},
      {.name = "thptrace_predicted_child_lifetime_seconds",
       .type = MetricType::gauge,
       .owner = Owner::target,
       .help = "The next fork's child lifetime by reason, from the last fork traced of that "
               "reason (else of any)."},
      {.name = "thptrace_predicted_copy_bytes",
       .type = MetricType::gauge,
       .owner = Owner::target,
       .help = "Bytes the next fork of that reason will copy on write over its child's life "
               "(parent and child), from the last fork traced."},
      {.name = "thptrace_predicted_fork_memory_bytes",
       .type = MetricType::gauge,
       .owner = Owner::target,
       .help = "Memory the next fork of that reason needs beyond RSS: its copies, and for a "
               "full sync the replication buffer the stream fills meanwhile."},
      {.name = "thptrace_predicted_headroom_bytes",
       .type = MetricType::gauge,
       .owner = Owner::target,
       .help = "Bytes left under a memory limit (cgroup: the memory cgroup's limit against RSS "
               "and the fork's need; mem_available: the host's MemAvailable against the need) "
               "at the next fork of that reason; below 0 it would not fit."},
      {.name = "thptrace_build_info", .type = MetricType::gauge, .owner = Owner::host, .help = "thptrace's version."},
      {.name = "thptrace_untracked_forks_total",
       .type = MetricType::counter,
       .owner = Owner::target,
       .help = "Forks of a watched process whose child could not be tracked (every active slot or "
               "the episodes map full): no COW faults are attributed to them.",
       .at_zero = kOneSeries},
      {.name = "thptrace_target_untraced",
       .type = MetricType::gauge,
       .owner = Owner::target,
       .help = "1 while a target's process is not traced because the targets map is full.",
       .at_zero = kOneSeries},
      {.name = "thptrace_target_watch_failures_total",
       .type = MetricType::counter,
       .owner = Owner::host,
       .help = "Processes the daemon could not add to the in-kernel targets map (map full).",
       .at_zero = kOneSeries},
      {.name = "thptrace_episodes_reaped_total",
       .type = MetricType::counter,
       .owner = Owner::host,
       .help = "Episodes removed from the in-kernel map by the daemon: lost_exit (closed, its record "
               "lost and collected), dead (its child gone without an exit seen).",
       .at_zero = ZeroSeries{"outcome", kReapOutcomes}},
      {.name = "thptrace_bpf_map_entries",
       .type = MetricType::gauge,
       .owner = Owner::host,
       .help = "Entries of an in-kernel map (targets, episodes)."},
      {.name = "thptrace_bpf_map_max_entries",
       .type = MetricType::gauge,
       .owner = Owner::host,
       .help = "Capacity of an in-kernel map (targets, episodes)."},
      {.name = "thptrace_bpf_program_run_count_total",
       .type = MetricType::counter,
       .owner = Owner::host,
       .help = "Runs of each of thptrace's BPF programs (moves only while kernel.bpf_stats_enabled=1)."},
      {.name = "thptrace_bpf_program_run_time_seconds_total",
       .type = MetricType::counter,
       .owner = Owner::host,
       .help = "Time spent in each of thptrace's BPF programs (moves only while "
               "kernel.bpf_stats_enabled=1)."},
      {.name = "thptrace_bpf_stats_enabled",
       .type = MetricType::gauge,
       .owner = Owner::host,
       .help = "1 when kernel.bpf_stats_enabled is on, so BPF program run counts and times move.",
       .at_zero = kOneSeries},
      // Redis's own figures, served as Redis reports them (RedisMirror).
      {.name = "thptrace_redis_forks_total",
       .type = MetricType::counter,
       .owner = Owner::target,
       .help = "Forks Redis has made since it started (INFO total_forks).",
       .mirrored = true},
      {.name = "thptrace_redis_sync_full_total",
       .type = MetricType::counter,
       .owner = Owner::target,
       .help = "Full resynchronizations Redis has served (INFO sync_full).",
       .mirrored = true},
      {.name = "thptrace_redis_command_latency_seconds",
       .type = MetricType::histogram,
       .owner = Owner::target,
       .help = "Redis's server-side command latency (LATENCY HISTOGRAM summed over commands; power-of-two "
               "microsecond buckets; _sum is NaN: Redis gives no sum).",
       .mirrored = true},
      {.name = "thptrace_redis_poll_failures_total",
       .type = MetricType::counter,
       .owner = Owner::target,
       .help = "Polls of Redis that failed (connect, AUTH, INFO refused or unanswered); each makes the next "
               "wait longer, up to 30 s.",
       .mirrored = true},
  });
}();

// The index in kMetrics of the metric called `name`, of type `type`: a name not in the table, or of
// another type, does not compile.
consteval size_t metric_index(std::string_view name, MetricType type) {
  for (size_t i = 0; i < kMetrics.size(); ++i) {
    if (kMetrics[i].name != name) continue;
    if (kMetrics[i].type != type) throw "the metric is of another type";
    return i;
  }
  throw "no metric of that name in kMetrics";
}

}  // namespace thptrace::daemon
