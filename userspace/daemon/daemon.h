// SPDX-License-Identifier: Apache-2.0
#pragma once
// `thptrace daemon`: the always-on exporter. Watches the Redis instances it is given (and, with
// --discover, every local redis-server), follows their pids across restarts, keeps the kernel side
// running while Redis is down, and serves Prometheus metrics. What a fork was is decided by the
// Exporter's correlators, the same as a capture's.

#include <sys/types.h>

#include <array>
#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "daemon/exporter.h"
#include "daemon/locator.h"
#include "daemon/main.h"
#include "daemon/metrics.h"
#include "daemon/options.h"
#include "proc/sampler.h"
#include "redis/credentials.h"
#include "redis/latency_probe.h"
#include "redis/watcher.h"
#include "tracer/tracer.h"

namespace thptrace::daemon {

class Daemon {
 public:
  explicit Daemon(DaemonOptions options);
  ~Daemon();
  // Runs until SIGINT/SIGTERM. Returns the exit code.
  int run();

 private:
  // While no fork is in progress: how often a poll also asks LATENCY HISTOGRAM and CONFIG GET, and
  // how often the /proc reads that cost (smaps_rollup walks every page table of the process, status,
  // the memory cgroup's files) are made; RSS is read each second (statm). During a fork and its tail,
  // every poll and every round reads everything. docs/reference/metrics.md says how fresh each series is.
  static constexpr std::chrono::milliseconds kIdleExtrasEvery{10'000};
  // A target's server is searched for at most this often, whatever its process_id says.
  static constexpr std::chrono::milliseconds kLocateEvery{5'000};
  // A target's anonymous memory by folio size is walked this often, while no fork child of it lives,
  // looking up at most this many pages (one PMD-sized window in N of a larger process): some 30 ms
  // of a core a walk here, whatever the server's size.
  static constexpr std::chrono::milliseconds kFolioWalkEvery{300'000};
  static constexpr uint64_t kFolioWalkLookups = 32768;

  // Who a target is and how its Redis is reached: fixed when it is added.
  struct Identity {
    std::string label;
    Exporter::TargetId id = 0;
    bool discovered = false;
    std::optional<redis::Address> address{};  // its first route's
    std::vector<redis::Route> routes{};       // how its Redis is reached, in order (none: no Redis side)
    int auth_rule = -1;                       // the --redis-auth rule of its login; -1: the daemon's own
    pid_t netns_pid = 0;                      // see Watcher::Options
  };

  // Polls handed from the watchers' threads to the main loop, with their target's id.
  class Inbox {
   public:
    void post(Exporter::TargetId id, const redis::Snapshot& s) {
      std::lock_guard lock(mu_);
      polls_.emplace_back(id, s);
    }
    std::vector<std::pair<Exporter::TargetId, redis::Snapshot>> take() {
      std::lock_guard lock(mu_);
      return std::exchange(polls_, {});
    }

   private:
    std::mutex mu_;
    std::vector<std::pair<Exporter::TargetId, redis::Snapshot>> polls_;
  };

  // One watched server: who it is, its process now, the search for its next one, its Redis side
  // (polls and latency probe) and its last /proc sample.
  struct Target {
    Identity who;
    pid_t pid = 0;          // 0 while it has no process (added by address, or its process exited)
    bool exited = false;    // discovered, and its process is gone: removed by remove_exited()
    bool untraced = false;  // pid set, but the targets map had no room for it
    TargetLocate locate{kLocateEvery};
    std::unique_ptr<redis::Watcher> watcher;
    std::unique_ptr<redis::LatencyProbe> probe;  // with routes and --latency-probe
    std::string reported_error;                  // the unreachable reason last logged, "" while reachable
    // The last full /proc sample of pid, refreshed cheaply in the rounds between full ones.
    proc::Sample sample;
    proc::SampleCadence sample_cadence{kIdleExtrasEvery};
    std::chrono::steady_clock::time_point next_folio_walk{};
  };

  // Watches who (its id and address are set here), following pid (0: none known yet).
  Target& add_target(Identity who, pid_t pid);
  // Its INFO polls and, with --latency-probe, its latency probe (t has routes).
  void start_redis_side(Target& t);
  // SIGHUP: reads the password, --redis-auth and TLS files again and hands them to every watcher.
  void reload_credentials();
  // Logs a Redis that became unreachable (with why) or reachable again.
  void report_reachability(Target& t);
  // t's anonymous memory by folio size, exported (thptrace_target_anon_folio_bytes).
  void walk_folios(Target& t, std::chrono::steady_clock::time_point now);
  void follow_pid(Target& t, pid_t pid);
  // t's process is gone: an operator's target waits for its next one, a discovered one is removed.
  void lose_process(Target& t);
  // Removes the discovered targets whose process exited: their watcher stopped (on a thread of its
  // own, so a connect in flight does not hold the main loop), their series and correlator gone,
  // their kernel side already released by follow_pid(t, 0). Outside any loop over targets_.
  void remove_exited();
  // Asks the Locator for the host pid of the server behind t (paced per target); on_located()
  // follows it when it comes. A discovered target keeps the pid discovery saw: a different one
  // found behind its routes is logged, not followed.
  void resolve(Target& t, int64_t process_id);
  void on_located(const Locator::Result& r);
  void follow_located(Target& t, const Locator::Result& r);
  // Exports polls of t, in order (those its locate held).
  void export_polls(const Target& t, const std::vector<redis::Snapshot>& polls);
  // After a poll that answered: starts a search for t's process when it has none or INFO names
  // another one.
  void consider_locating(Target& t, const redis::Snapshot& s);
  void drain_snapshots();
  // Each second: every target's reachability, latency probe samples, /proc sample and kernel
  // counters, given to the exporter as one reading; then the kernel maps when they are due.
  void read_targets();
  void discover();
  void on_event(const thptrace_event& e);
  Target* target_of(pid_t tgid);
  Target* target_by_id(Exporter::TargetId id);
  // The kernel side of one target (daemon/kernel_maps.cpp): follows t.pid (Tracer::follow), or
  // marks it untraced (counted, logged once, exported) when the targets map is full.
  bool trace_pid(Target& t);
  // Every few seconds (daemon/kernel_maps.cpp): reaps the episodes map, retries untraced targets,
  // exports map occupancy and the BPF programs' own cost.
  void reap_kernel_maps();
  // After a fork or a child's exit reached the exporter: a poll at once, and the busy pace while a
  // child of the target lives (the correlator's open children say).
  void pace_poller(Target& t);

  DaemonOptions options_;
  Logins logins_;  // what each target's Redis is sent (routes marked withheld are sent neither)
  tracer::AttachModes modes_;
  std::unique_ptr<tracer::Tracer> tracer_;
  Metrics metrics_;
  std::unique_ptr<Exporter> exporter_;
  // The latency probes' threads, each made with its first target: [0] the targets in our network
  // namespace, [1] those in a container's.
  std::array<std::shared_ptr<redis::ProbeLoop>, 2> probe_loops_;
  std::vector<std::unique_ptr<Target>> targets_;
  // The watchers' polls, by target id (a poll of a target removed since is dropped).
  Inbox inbox_;
  Locator locator_;
  std::vector<std::future<void>> retiring_;  // watchers and probes of removed targets, stopping
  std::set<pid_t> declined_;                 // servers --max-discovered left out (logged once each)
  // The kernel maps' upkeep (daemon/kernel_maps.cpp): when they are reaped next, and each BPF
  // program's cost exported so far, by name (runs, ns).
  struct {
    std::chrono::steady_clock::time_point next_reap{};
    std::map<std::string, std::pair<uint64_t, uint64_t>> program_cost;
  } kernel_maps_;
};

}  // namespace thptrace::daemon
