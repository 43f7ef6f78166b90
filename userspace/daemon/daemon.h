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

// A redis-server's listening address from its process title ("redis-server 127.0.0.1:6379"), as
// HOST:PORT with a wildcard host replaced by 127.0.0.1; "" when the title has none.
std::string address_from_title(const std::string& cmdline);

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
  static constexpr size_t kMaxHeld = 64;

  struct Target {
    std::string label;
    std::optional<redis::Address> address;
    pid_t pid = 0;
    bool discovered = false;
    bool exited = false;  // discovered, and its process is gone: removed by remove_exited()
    Exporter::TargetId id = 0;
    std::vector<redis::Route> routes;  // how its Redis is reached, in order (none: no Redis side)
    int auth_rule = -1;                // the --redis-auth rule of its login; -1: the daemon's own
    pid_t netns_pid = 0;               // see Watcher::Options
    // The process_id INFO gave when pid was found (from the kernel's socket tables, or /proc for a
    // discovered server), and the pace of the searches for it (Locator, off the main loop).
    int64_t resolved_process_id = 0;
    LocatePacing locate_pacing{kLocateEvery};
    std::string last_resolve_error;
    bool resolve_error_logged = false;
    // No process yet (added by address, or its process exited): its polls are held until the first
    // search for it has its result (at most kMaxHeld of them).
    bool first_locate_pending = false;
    std::vector<redis::Snapshot> held;
    uint64_t lost_ns = 0;  // CLOCK_MONOTONIC when its last process was seen gone
    std::unique_ptr<redis::Watcher> watcher;
    std::unique_ptr<redis::LatencyProbe> probe;  // with routes and --latency-probe
    std::string reported_error;                  // the unreachable reason last logged, "" while reachable
    bool untraced = false;                       // pid set, but the targets map had no room for it
    // The last full /proc sample of pid, refreshed cheaply in the rounds between full ones.
    proc::Sample sample;
    proc::SampleCadence sample_cadence{kIdleExtrasEvery};
  };

  // routes: how to reach its Redis, in order (none: no Redis side); netns_pid: see Watcher::Options;
  // auth_rule: the --redis-auth rule whose login it is sent, -1 for --redis-user/--redis-password-file.
  Target& add_target(const std::string& label, std::vector<redis::Route> routes, pid_t pid, bool discovered,
                     pid_t netns_pid = 0, int auth_rule = -1);
  // The user and password a target's Redis is sent (routes marked withheld are sent neither).
  Login login_of(const Target& t) const;
  // SIGHUP: reads the password, --redis-auth and TLS files again and hands them to every watcher.
  void reload_credentials();
  // The TLS context discovered TLS ports are tried with: --redis-tls's, else the system's CAs.
  std::shared_ptr<const redis::TlsContext> discovery_tls() const;
  // Logs a Redis that became unreachable (with why) or reachable again.
  void report_reachability(Target& t);
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
  // The first search for t's process has its result: exports the polls held for it, in order, and
  // holds no more.
  void release_held(Target& t);
  // Exports the polls held so far, in order (the first search may not have started yet: a server
  // that did not answer has no process_id to search for).
  void export_held(Target& t);
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
  redis::Credentials credentials_;
  std::vector<LoadedRule> auth_rules_;                     // --redis-auth, in the order given
  std::shared_ptr<const redis::TlsContext> discover_tls_;  // for discovered TLS ports
  tracer::AttachModes modes_;
  std::unique_ptr<tracer::Tracer> tracer_;
  Metrics metrics_;
  std::unique_ptr<Exporter> exporter_;
  // The latency probes' threads, each made with its first target: [0] the targets in our network
  // namespace, [1] those in a container's.
  std::array<std::shared_ptr<redis::ProbeLoop>, 2> probe_loops_;
  std::vector<std::unique_ptr<Target>> targets_;
  std::mutex inbox_mu_;
  // By target id: a snapshot of a target removed since is dropped.
  std::vector<std::pair<Exporter::TargetId, redis::Snapshot>> inbox_;
  Locator locator_;
  std::vector<std::future<void>> retiring_;  // watchers and probes of removed targets, stopping
  std::set<pid_t> declined_;                 // servers --max-discovered left out (logged once each)
  std::chrono::steady_clock::time_point next_reap_{};
  std::map<std::string, std::pair<uint64_t, uint64_t>> program_cost_;  // name -> (runs, ns) exported
};

}  // namespace thptrace::daemon
