#pragma once
// Builds ForkEpisodes from the kernel's events and final counters, then labels and annotates them
// with what the samplers saw (Redis state, /proc/vmstat). Pure logic, fed recorded sequences in tests.

#include <map>
#include <optional>
#include <vector>

#include "correlate/episode.h"
#include "proc/sampler.h"
#include "redis/watcher.h"
#include "tracer/abi.h"

namespace thptrace::correlate {

struct Totals {
  uint64_t forks = 0;
  uint64_t cow_faults = 0;
  uint64_t child_cow_faults = 0;
  uint64_t thp_splits = 0;
  uint64_t thp_collapses = 0;
  uint64_t khugepaged_scans = 0;
  uint64_t huge_allocs = 0;
  uint64_t compaction_stalls = 0, reclaim_stalls = 0;
  double compaction_ms = 0, reclaim_ms = 0;
  uint64_t dropped_events = 0;
  uint64_t untracked_forks = 0;
};

class Correlator {
 public:
  explicit Correlator(uint32_t target_tgid) : target_(target_tgid) {}

  // Feeds one ring-buffer record. Records of other targets are ignored.
  void on_event(const thptrace_event& e);
  // Feeds an episode still in the kernel map at the end of the capture (child alive, or its exit
  // record was dropped). Later data wins over earlier.
  void on_final_episode(const thptrace_episode& ep);

  bool target_exited() const { return target_exited_; }
  size_t live_children() const;

  // Labels reasons the kernel could not name from the Redis timeline, fills fallback THP splits
  // and latency windows. `repl_diskless_sync` is Redis's setting ("yes"/"no"/"").
  std::vector<ForkEpisode> finish(const proc::SampleSeries& samples, const std::vector<redis::Snapshot>& redis,
                                  const std::string& repl_diskless_sync, bool kernel_splits) const;

  // Stalls and collapses seen as discrete events.
  uint64_t collapse_events() const { return collapses_; }

 private:
  struct Partial {
    thptrace_episode ep{};
    bool have_fork = false;
    bool have_final = false;
    std::optional<double> fork_duration_us;
  };
  uint32_t target_;
  std::map<uint32_t, Partial> episodes_;  // by child pid, in order of pid is not order of time
  bool target_exited_ = false;
  uint64_t collapses_ = 0;
};

ForkEpisode episode_from_kernel(const thptrace_episode& ep);
// The reason INFO polling implies for a fork at [fork_ts, exit_ts]; Reason::unknown when Redis
// was not seen around it.
Reason reason_from_redis(const std::vector<redis::Snapshot>& timeline, uint64_t fork_ts, uint64_t exit_ts,
                         const std::string& repl_diskless_sync);
// LATENCY HISTOGRAM diff between the snapshots that bracket [from, to].
std::optional<LatencyWindow> latency_between(const std::vector<redis::Snapshot>& timeline, uint64_t from_ns,
                                             uint64_t to_ns);
Totals totals_from_kernel(const thptrace_target& t, uint64_t dropped);

}  // namespace thptrace::correlate
