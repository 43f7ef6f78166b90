// SPDX-License-Identifier: Apache-2.0
#pragma once

// Internal to the load generator: the shared state of one run and the loops run_load starts.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "loadgen/connection.h"
#include "loadgen/dataset.h"
#include "loadgen/histogram.h"
#include "loadgen/loadgen.h"

namespace thptrace::loadgen::detail {

using clock = std::chrono::steady_clock;

// What every thread of a run shares. The first failure wins and stops everyone.
class RunState {
 public:
  RunState(std::atomic<bool>& external_stop, clock::time_point start, clock::time_point deadline,
           std::chrono::nanoseconds interval)
      : start(start), deadline(deadline), interval(interval), external_stop_(external_stop) {}

  const clock::time_point start;
  // time_point::max() when the run has no duration.
  const clock::time_point deadline;
  const std::chrono::nanoseconds interval;

  std::atomic<uint64_t> probe_ops{0};
  std::atomic<uint64_t> writer_ops{0};
  std::atomic<uint64_t> last_interval_p99_ns{0};

  bool should_stop() const noexcept {
    return aborted_.load(std::memory_order_relaxed) || external_stop_.load(std::memory_order_relaxed);
  }
  void fail(std::string why);
  std::string failure() const;

 private:
  std::atomic<bool>& external_stop_;
  std::atomic<bool> aborted_{false};
  mutable std::mutex failure_mutex_;
  std::string failure_;
};

struct ProbeOutcome {
  LogLinearHistogram latency;
  LogLinearHistogram service_time;
  uint64_t ops = 0;
  uint64_t error_replies = 0;
  uint64_t misses = 0;
  uint64_t unsent = 0;
  std::string first_error_reply;
  // Rows without writer_ops, which the timeline clock fills in.
  std::vector<TimelineRow> timeline;
};

struct WriterOutcome {
  LogLinearHistogram batch_latency;
  uint64_t ops = 0;
  uint64_t error_replies = 0;
  std::string first_error_reply;
};

// A seed of its own for each connection (0 = the probe, 1.. = writers), derived from the
// dataset seed, so runs repeat their key sequences without connections sharing one.
uint64_t stream_seed(uint64_t dataset_seed, unsigned stream) noexcept;

// Blocks SIGPIPE on the calling thread: hiredis writes with write(2), and a peer that closed
// must surface as EPIPE on this connection rather than kill the process.
void block_sigpipe_on_this_thread() noexcept;

ProbeOutcome run_probe(Connection& connection, const Dataset& dataset, const LoadgenOptions& options, RunState& state);
WriterOutcome run_writer(Connection& connection, const Dataset& dataset, const LoadgenOptions& options, unsigned index,
                         RunState& state);

}  // namespace thptrace::loadgen::detail
