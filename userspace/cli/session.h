// SPDX-License-Identifier: Apache-2.0
#pragma once
// One capture's live parts: the tracer attached to the target, the /proc sampler and the Redis
// watcher. run() polls the kernel's events to the end and hands back what the report is computed
// from (report::assemble); nothing here decides what a fork was.

#include <memory>
#include <optional>
#include <string>

#include "cli/capture.h"
#include "cli/redis_setup.h"
#include "proc/folios.h"
#include "proc/proc.h"
#include "proc/sampler.h"
#include "redis/client.h"
#include "redis/latency_probe.h"
#include "redis/watcher.h"
#include "report/inputs.h"
#include "symbolize/resolver.h"
#include "tracer/tracer.h"

namespace thptrace::cli {

// What validating the options found out about the target, before anything is attached.
struct CaptureTarget {
  pid_t pid = 0;  // the host pid to trace: --pid, or the process serving --redis
  proc::ProcessStatus status;
  std::optional<RedisSetup> redis;  // the address and the credentials read once; nullopt without --redis
};

// Checks the options against the system: --redis's server is found among the host's processes
// from the kernel's socket tables (and must be --pid when both are given), the process exists, the JSON can be written
// there, the Redis address parses and its credentials read (one TLS handshake tried), the kernel has BTF. Throws
// FatalError (usage or runtime).
CaptureTarget validate_capture(const CaptureOptions& o);

class CaptureSession {
 public:
  // Loads and attaches every probe family for the target, drops the capabilities no longer needed
  // and starts the sampler and the watcher. Throws FatalError when the target cannot be traced.
  CaptureSession(const CaptureOptions& o, const CaptureTarget& target);
  CaptureSession(const CaptureSession&) = delete;
  CaptureSession& operator=(const CaptureSession&) = delete;

  // Polls until the duration ends, SIGINT/SIGTERM arrives or the target exits; then stops the
  // sampler and the watcher and returns every input of the report. Call once.
  report::CaptureInputs run();

 private:
  void attach(const CaptureOptions& o, const CaptureTarget& target);
  // The capture's start: its clocks, the host's name and boot id.
  void stamp_start();
  // For a timeline (--svg), the target's running counters every report::kCounterIntervalNs, read
  // between polls.
  void read_counters(uint64_t now_ns);
  // How long the next poll may wait.
  int poll_ms(bool busy, uint64_t deadline_ns) const;
  void resolve_samples();
  // The target's memory by folio size at the start (inputs_.folios_start, or folio_walk_why).
  void walk_folios_at_start(pid_t pid);
  // The target's folios (while it lives), the cgroup's, the probe's and the watcher's final figures,
  // once everything has stopped.
  void take_final_figures(bool target_exited);

  std::optional<double> duration_s_;
  bool read_counters_ = false;    // for --svg: report::CaptureInputs::counters
  int idle_poll_ms_ = 1000;       // the ring buffer's wait while nothing is due
  uint64_t next_counters_ns_ = 0;  // when read_counters is next due
  report::CaptureInputs inputs_;  // filled as the session goes
  std::unique_ptr<tracer::Tracer> tracer_;
  std::unique_ptr<proc::Sampler> sampler_;
  std::unique_ptr<redis::Watcher> watcher_;
  std::unique_ptr<redis::LatencyProbe> latency_probe_;  // with --redis and --latency-probe
  std::unique_ptr<symbolize::Resolver> resolver_;  // while copies are sampled
  // The target's memory by folio size, walked at the start and at the end: opened while the
  // capabilities that show page frames are held.
  std::optional<proc::FolioWalker> folio_walker_;
};

}  // namespace thptrace::cli
