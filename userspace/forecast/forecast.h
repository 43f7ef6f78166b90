// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the next fork of a Redis will cost, before it happens (`thptrace predict`): its freeze, its
// child's lifetime, the pages the parent will copy over that life, the replicas' output buffers, the
// memory all of it needs at its peak, and whether each limit holds. Pure: the measurements come in
// (forecast::Inputs), the prediction goes out, so every rule is unit-tested.
//
// Each figure is a value with a range and the method it came from:
//   soft_dirty  the pages the process wrote after its soft-dirty bits were cleared, counted over time
//               (proc/soft_dirty.h): the copies a fork made at that moment would have taken;
//   history     the last fork of the same process, as thptrace traced it (the daemon) or as the server
//               tells it (INFO latest_fork_usec, rdb_last_cow_size, rdb_last_bgsave_time_sec): the
//               next fork of the same process under the same load;
//   model       a rate measured on hosts of this kind, applied to this process's size, with a wide
//               range: what is left when neither of the others is known.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "correlate/episode.h"

namespace thptrace::forecast {

enum class Method { soft_dirty, history, model };
const char* method_name(Method m);

struct Figure {
  double value = 0, low = 0, high = 0;
  Method method = Method::model;
  std::string basis;  // what it rests on, in a few words
};

struct Inputs {
  uint64_t rss_bytes = 0;
  uint64_t anon_bytes = 0;  // what a fork can copy at most
  // Of it, in PMD-sized pages (AnonHugePages): fork copies one entry for 2 MiB of them, not 512.
  uint64_t anon_huge_bytes = 0;
  uint64_t page_table_bytes = 0;
  bool server_answered = false;  // Redis answered INFO (--redis)
  // The last fork thptrace itself traced of the reason predicted (the daemon sees every fork): exact
  // where INFO rounds (the child's life in ms, the copies counted in the kernel, the child's own
  // included). When set, its figures take the place of INFO's below.
  struct Traced {
    double fork_us = 0;
    double child_seconds = 0;
    uint64_t copied_bytes = 0;
    uint64_t rss_bytes = 0;  // the parent's RSS at the fork, or as it settled (the daemon); 0 unknown
  };
  std::optional<Traced> traced;
  // The server's last fork (INFO): nullopt when it has not forked, or the figure is not known.
  std::optional<double> last_fork_usec;
  std::optional<uint64_t> last_rdb_cow_bytes;
  std::optional<double> last_rdb_seconds;  // rdb_last_bgsave_time_sec: whole seconds
  // The same save's life to the millisecond where its RDB file says it: the child creates the file
  // when it starts and renames it when done (its birth and change times, statx). Used when it agrees
  // with the whole seconds above, which tells it is the file of that save.
  std::optional<double> last_rdb_file_seconds;
  // Redis's used_memory now (INFO), and as the last save began (its RDB file's used-mem field, read
  // only from the file that save wrote): with the RSS at a traced fork, what tells a dataset grown
  // since the fork the history comes from (growth_since_history).
  std::optional<uint64_t> used_memory_now, last_save_used_memory;
  // Bytes a second written into the replication stream over the measurement (master_repl_offset).
  double repl_bytes_per_s = 0;
  std::string repl_rate_basis = "unknown";  // the INFO field it came from
  // client-output-buffer-limit replica; 0 = no such limit.
  uint64_t replica_hard_bytes = 0, replica_soft_bytes = 0, replica_soft_seconds = 0;
  // Redis >= 7.0 keeps one replication buffer that all replicas share; before, one per replica.
  bool shared_replication_buffer = true;
  std::optional<uint64_t> cgroup_limit_bytes;  // the memory cgroup's limit
  std::optional<uint64_t> cgroup_usage_bytes;  // its usage now (page cache included)
  std::optional<uint64_t> mem_available_bytes;
  // The soft-dirty rehearsal: pages written since the clear, at seconds after it (in time order).
  std::vector<std::pair<double, uint64_t>> dirty_curve;
  unsigned replicas = 1;
  // The host's CPUs over the measurement: the threads running or waiting for a CPU (procs_running,
  // thptrace's own read left out) averaged over its samples, the CPUs online, and the share of the
  // time some thread waited for one (PSI cpu "some", where the kernel has it). Unset: not measured.
  struct CpuLoad {
    double runnable = 0;
    unsigned cpus = 1;
    std::optional<double> pressure_some;
  };
  std::optional<CpuLoad> cpu_load;
};

// How much larger the dataset is now than at the fork the history figures come from: the RSS now
// against at the last traced fork, else used_memory now against at the last save. A dataset grown
// since saves longer and copies more over the longer life (and its page tables take longer to copy):
// the history figures are scaled by it, their ranges stretched to hold both the last fork's figure
// and the scaled one. nullopt when not known, or within kGrowthNoise of 1.
struct Growth {
  double factor = 1;
  std::string basis;  // "used_memory 151.2 MiB now, 114.6 MiB at the last save"
};
inline constexpr double kGrowthNoise = 0.05;
std::optional<Growth> growth_since_history(const Inputs& in);

enum class Verdict { fits, tight, will_exceed };
const char* verdict_name(Verdict v);

// The names of the memory limits in LimitCheck::name.
inline constexpr const char* kCgroupLimit = "memory cgroup limit";
inline constexpr const char* kMemAvailable = "host MemAvailable";

struct LimitCheck {
  std::string name;  // "cgroup memory.limit", "host MemAvailable", "client-output-buffer-limit replica (hard)", ...
  uint64_t limit_bytes = 0;
  Figure need;  // what the fork asks of it
  Verdict verdict = Verdict::fits;
};

// Below this share of a CPU the child is said to compete for one.
inline constexpr double kChildCompetes = 0.95;

struct Prediction {
  correlate::Reason reason = correlate::Reason::bgsave;
  Figure fork_freeze_ms, child_lifetime_s;
  // The share of one CPU the fork's child (one more CPU-bound thread) can expect with the host's load
  // as measured: cpus / (runnable + 1), at most 1. Below kChildCompetes, its life, and the parent's
  // copies over it, may stretch by its inverse: the high ends of their ranges say so (a figure from
  // the last save was made under that save's load, which no one recorded). Unset: not measured.
  std::optional<double> child_cpu_share;
  std::optional<Growth> growth;                     // applied to the figures from history
  std::optional<Figure> copied_bytes;               // nullopt: neither rehearsed nor in the history
  std::string copied_unknown_why;                   // when copied_bytes is nullopt
  std::optional<Figure> replica_buffer_peak_bytes;  // full syncs only, per replica
  std::optional<Figure> peak_extra_memory_bytes;    // copies plus replication buffers
  std::vector<LimitCheck> limits;
  Verdict verdict = Verdict::fits;
  std::string first_limit;  // the limit that breaks (or is tightest); "" if none
  // The most replicas syncing at once that the memory limits allow; nullopt when their number does not
  // change the need (a shared replication buffer, or a BGSAVE).
  std::optional<unsigned> max_replicas;
  Method method = Method::model;  // the method of the copies, the figure the verdict rests on most
};

// The figures of the next fork of that reason (bgsave, full_sync_disk, full_sync_diskless).
Prediction predict(const Inputs& in, correlate::Reason reason);

// The rehearsal's curve read at t seconds: interpolated inside it, extended past its end at the rate
// of its last half (never beyond anon_bytes / 4096 pages). Pages.
double dirty_pages_at(const std::vector<std::pair<double, uint64_t>>& curve, double t, uint64_t max_pages);

}  // namespace thptrace::forecast
