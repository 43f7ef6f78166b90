// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the daemon makes of its targets' kernel events, Redis polls and /proc readings: one streaming
// correlate::Correlator per target (the capture's, so a fork is the same fork in both) and the
// metrics. No I/O: the daemon reads, this decides, so a recorded run can be replayed in a test.

#include <sys/types.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "correlate/correlator.h"
#include "daemon/metrics.h"
#include "forecast/forecast.h"
#include "kernel/abi.h"
#include "proc/container.h"
#include "proc/proc.h"
#include "proc/sampler.h"
#include "redis/latency_probe.h"
#include "redis/watcher.h"
#include "tracer/probe.h"

namespace thptrace::daemon {

class Exporter {
 public:
  using TargetId = size_t;

  // What the daemon reads once a second.
  struct Readings {
    uint64_t now_ns = 0;
    proc::SystemInfo system;
    std::optional<uint64_t> thp_split_pmd;  // /proc/vmstat
    struct Reading {
      TargetId target = 0;
      std::optional<thptrace_target> counters;  // the kernel's, while the target is watched
      proc::Sample sample;
    };
    std::vector<Reading> targets;  // the targets that have a process
    uint64_t dropped = 0;          // ring-buffer records lost since the start
  };

  Exporter(Metrics& metrics, const tracer::AttachModes& modes);
  // Writes every input from now on to record_path, one JSON document a line (THPTRACE_RECORD_INPUTS),
  // for tests/unit/golden_test.cpp to replay.
  void record_to(const std::string& record_path);
  // CLOCK_REALTIME minus CLOCK_MONOTONIC (the kernel records' clock), measured at construction and
  // recorded; a replay sets the recorded one.
  void set_realtime_offset(int64_t ns) { realtime_offset_ns_ = ns; }

  TargetId add_target(const std::string& label, bool redis_polled);
  // Forgets the target (its correlator, its episodes not yet exported) and removes its series; its
  // id is never given again.
  void remove_target(TargetId t);
  // The target is now process pid (0: none); its kernel counters start again from zero. A process
  // brings its container's names (proc::container_names); none keeps the names it had.
  void follow(TargetId t, pid_t pid, const proc::ContainerNames& names = {});
  void on_event(TargetId t, const thptrace_event& e);
  void on_snapshot(TargetId t, const redis::Snapshot& s);
  void on_readings(const Readings& h);
  // An episode reaped from the kernel map whose exit record was lost (ring buffer full): complete,
  // it closes its fork as the record would have.
  void on_lost_exit(TargetId t, const thptrace_episode& ep);
  // The latency probe's requests since the last call: each observed in the fork phase when a fork
  // child of the target lived when its reply came (its window: correlate/window.h).
  void on_probe_samples(TargetId t, const std::vector<redis::ProbeSample>& samples);
  // Forks of the target whose child has not been seen exiting.
  std::vector<uint32_t> open_children(TargetId t) const { return targets_.at(t).correlator.open_children(); }
  // Lets go of every open fork, of every target, whose child `alive` says is gone (the daemon asks
  // /proc), so that it pins no history and no fork stays in progress. Each is recorded as a forget.
  void forget_gone(const std::function<bool(uint32_t child_pid)>& alive);
  void forget(TargetId t, uint32_t child_pid);
  // Exports the episodes whose facts are all known by now_ns.
  void export_settled(uint64_t now_ns);
  // Exports every episode whose child exited, whatever it still lacks (the daemon stops).
  void export_remaining();

 private:
  struct Target {
    std::string label;
    correlate::Correlator correlator;
    thptrace_target last{};  // kernel counters already exported
    // Copies of the forks exported so far, and the faults counted as reuse: the kernel's total is
    // their sum whenever no episode is open (see on_readings).
    uint64_t copies = 0, reuse = 0;
    // The last full sync of each replica, by address, with when: a later one is a repeat.
    std::map<std::string, uint64_t> dropped_at{};
    // The recent forks' windows (correlate/window.h), by child. Kept for kForkWindowKeepNs after the
    // exit, for probe samples that arrive late.
    std::map<uint32_t, correlate::Window> fork_windows{};
    // What the forecast reads: the last fork traced of each reason and of any, the process's memory
    // at the last reading, the replication stream's offset over the last minute (INFO's
    // master_repl_offset, by poll) and the replicas the last poll listed.
    struct History {
      std::map<correlate::Reason, forecast::Inputs::Traced> traced{};
      std::optional<forecast::Inputs::Traced> last_traced{};
      struct Memory {
        bool known = false;
        uint64_t rss_bytes = 0;
        std::optional<uint64_t> cgroup_usage_bytes, cgroup_limit_bytes, mem_available_bytes;
      } memory{};
      std::deque<std::pair<uint64_t, int64_t>> repl_offsets{};
      size_t replicas = 0;
    } history{};
    std::optional<proc::SchedStat> main_thread{};  // the main thread's clocks at the last reading
    uint64_t main_thread_ns = 0;                   // and when it was taken
    // The share of [from_ns, to_ns) that fork windows cover (overlapping windows counted once).
    double fork_share(uint64_t from_ns, uint64_t to_ns) const {
      uint64_t covered = 0, at = from_ns;  // windows by start: a sweep over [at, to_ns)
      std::vector<correlate::Window> ws;
      for (const auto& [child, w] : fork_windows) ws.push_back(w);
      std::sort(ws.begin(), ws.end(), [](const auto& a, const auto& b) { return a.from_ns < b.from_ns; });
      for (const auto& w : ws) {
        const uint64_t a = std::max(at, w.from_ns), b = std::min(to_ns, w.to_ns);
        if (b > a) {
          covered += b - a;
          at = b;
        }
      }
      return to_ns > from_ns ? static_cast<double>(covered) / static_cast<double>(to_ns - from_ns) : 0;
    }
    // Whether a fork child of the target lived at ts_ns (a fork window holds it).
    bool in_fork_window(uint64_t ts_ns) const {
      return std::any_of(fork_windows.begin(), fork_windows.end(),
                         [ts_ns](const auto& kv) { return kv.second.holds(ts_ns); });
    }
  };
  static constexpr uint64_t kForkWindowKeepNs = 10'000'000'000;
  static constexpr size_t kMaxForkWindows = 256;
  // The readings as the recording (THPTRACE_RECORD_INPUTS) writes them.
  void record_readings(const Readings& h);
  // The kernel's counters of t since the last reading: its faults, splits, collapses and untracked
  // forks, and the reuse faults.
  void export_counters(Target& t, const thptrace_target& k);
  // The main thread's scheduler clocks of t since the last reading, by phase.
  void export_main_thread(Target& t, const std::optional<proc::SchedStat>& now, uint64_t now_ns);
  void export_replica_syncs(Target& t);
  void export_episode(Target& t, const correlate::ForkEpisode& e);
  // The next fork's figures from the target's history, for each reason a replica or a BGSAVE makes
  // (nothing before its first fork traced).
  void update_forecast(Target& t);
  void record(const nlohmann::ordered_json& step);

  Metrics& metrics_;
  tracer::AttachModes modes_;
  bool kernel_splits_;
  int64_t realtime_offset_ns_ = 0;
  std::map<TargetId, Target> targets_;
  TargetId next_id_ = 0;
  uint64_t last_dropped_ = 0;
  std::unique_ptr<std::ofstream> record_;
};

}  // namespace thptrace::daemon
