// SPDX-License-Identifier: Apache-2.0
#pragma once
// The one streaming correlator of a watched process, fed by the capture and the daemon alike: it
// turns the kernel's events into ForkEpisodes and gives each the facts the kernel cannot know — the
// reason named from the Redis INFO timeline when the uprobes did not name it, THP splits from
// /proc/vmstat deltas in the fallback modes, the server-side latency around it. Pure logic: tests feed
// it recorded sequences.

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "correlate/episode.h"
#include "correlate/replicas.h"
#include "kernel/abi.h"
#include "proc/sampler.h"
#include "redis/watcher.h"

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

struct CorrelatorOptions {
  // The kernel counts THP splits per episode (fentry mode); otherwise they are /proc/vmstat deltas
  // over the episode's window, so an episode waits for a sample taken after its child's exit.
  bool kernel_splits = false;
  // Redis is polled: an episode the uprobes did not name waits for a poll after its child's exit.
  bool redis_polled = false;
  // The sched family ran: each closed episode says what held the CPU while the main thread waited.
  bool cpu_waits = false;
  // repl-diskless-sync ("yes"/"no"/"") until a snapshot says otherwise.
  std::string repl_diskless_sync{};
  // A long-running consumer (the daemon): keep the INFO and vmstat history only back to the oldest
  // fork not yet taken, drop latency histograms, and let go of a fork whose exit never came.
  bool bounded_history = false;
};

class Correlator {
 public:
  explicit Correlator(uint32_t target_tgid, CorrelatorOptions options = {});

  // The same target under a new process (a restart): later events are taken from tgid.
  void retarget(uint32_t tgid) { target_ = tgid; }
  void set_repl_diskless_sync(const std::string& value) { options_.repl_diskless_sync = value; }

  // Feeds one ring-buffer record. Records of other processes are ignored.
  void on_event(const thptrace_event& e);
  // Feeds an episode still in the kernel map at the end of a capture (child alive, or its exit
  // record was dropped). Later data wins over earlier.
  void on_final_episode(const thptrace_episode& ep);
  // Feeds one Redis INFO poll and one /proc sample, in time order.
  void on_snapshot(redis::Snapshot s);
  void on_sample(proc::Sample s);

  // The episodes whose every fact is known by now_ns (their child exited; their reason named, or a
  // poll after the exit came, or kSettleWaitNs passed since the exit; their splits counted), each returned once,
  // in fork order.
  std::vector<ForkEpisode> take_settled(uint64_t now_ns);
  // Every episode not yet taken, with what is known: at the end of a capture (children still alive
  // included, without a lifetime) or when the daemon stops (exited children only).
  std::vector<ForkEpisode> take_remaining(bool include_alive);

  // Episodes not yet taken (children alive, or exited and not yet settled).
  size_t untaken() const { return episodes_.size(); }
  // Forks seen starting whose child has not been seen exiting, by child pid.
  std::vector<uint32_t> open_children() const;
  // Lets go of an open fork whose child is gone without an exit record (it died before the exit
  // program saw it, or the episodes map had no room for it): nothing more will come for it. Returns
  // whether there was one.
  bool forget(uint32_t child_pid);

  bool target_exited() const { return target_exited_; }
  size_t live_children() const;
  const proc::SampleSeries& samples() const { return samples_; }
  const std::vector<redis::Snapshot>& timeline() const { return timeline_; }
  // The replicas' syncs that ended since the last call (the daemon's per-replica figures).
  std::vector<ReplicaSync> take_finished_replica_syncs() { return replicas_.take_finished(); }
  // Every replica sync seen (the capture's end).
  std::vector<ReplicaSync> replica_syncs() const { return replicas_.all(); }

  // How long an exited child's episode waits for what it lacks (an INFO poll, a vmstat sample).
  static constexpr uint64_t kSettleWaitNs = 5'000'000'000;

 private:
  struct Partial {
    thptrace_episode ep{};
    bool have_fork = false;
    bool have_final = false;
    std::optional<double> fork_duration_us;
  };
  bool settled(const Partial& p, uint64_t now_ns) const;
  ForkEpisode complete(const Partial& p) const;
  std::vector<ForkEpisode> take_if(const std::function<bool(const Partial&)>& pick);
  void trim_history();

  uint32_t target_;
  CorrelatorOptions options_;
  std::map<uint32_t, Partial> episodes_;  // by child pid: the order of pids is not the order of time
  proc::SampleSeries samples_;
  std::vector<redis::Snapshot> timeline_;
  bool target_exited_ = false;
  ReplicaTracker replicas_;
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
