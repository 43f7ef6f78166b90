// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "loadgen/connection.h"
#include "loadgen/dataset.h"
#include "loadgen/histogram.h"

namespace thptrace::loadgen {

struct LoadgenOptions {
  ConnectionOptions connection;
  // The keys the probe and the writers pick from (uniformly, by a PRNG seeded from
  // dataset.seed, so two runs with the same options send the same key sequence).
  DatasetOptions dataset;
  // Bulk writer connections, each pipelining `batch` commands per round trip.
  unsigned writers = 0;
  unsigned batch = 80;
  // Probe requests per second; 0 runs the probe closed-loop (next request when the reply lands).
  double rate = 0;
  // 0 runs until `stop` is set.
  std::chrono::nanoseconds duration = std::chrono::seconds(10);
  // GET instead of SET, for the probe and the writers alike.
  bool read_only = false;
  // Width of a timeline row.
  std::chrono::nanoseconds interval = std::chrono::milliseconds(100);
};

// The percentiles the reports carry, in nanoseconds.
struct LatencySummary {
  uint64_t count = 0;
  double mean_ns = 0;
  uint64_t min_ns = 0, p50_ns = 0, p90_ns = 0, p99_ns = 0, p99_9_ns = 0, p99_99_ns = 0, max_ns = 0;

  static LatencySummary of(const LogLinearHistogram& histogram);
};

// One interval of the probe's latency over time. A sample belongs to the interval of its
// intended send time (open loop) or actual send time (closed loop), so a stall shows up where
// it began, lining up with the fork or rewrite that caused it.
struct TimelineRow {
  std::chrono::nanoseconds offset{0};  // interval start, from the run's start
  uint64_t probe_count = 0;
  uint64_t p50_ns = 0, p99_ns = 0, max_ns = 0;  // 0 when probe_count is 0
  // Commands the writers completed during the interval, sampled at its end by a timer.
  uint64_t writer_ops = 0;
};

struct LoadgenResult {
  bool open_loop = false;
  double rate = 0;
  bool read_only = false;
  // CLOCK_MONOTONIC of the run's start, in ns: the clock bpf_ktime_get_ns() reads, so tracer
  // events can be placed on the timeline.
  uint64_t start_monotonic_ns = 0;
  std::chrono::nanoseconds elapsed{0};

  // Probe latency: from the intended send time in open loop (coordinated-omission corrected),
  // from the actual send time in closed loop.
  LogLinearHistogram probe_latency;
  // From the actual send time in both modes: what a closed-loop tool would have reported.
  LogLinearHistogram probe_service_time;
  // Round trip of a whole writer pipeline batch, all writers merged.
  LogLinearHistogram writer_batch_latency;

  uint64_t probe_ops = 0;
  uint64_t probe_error_replies = 0;
  // GETs that found no key (read-only mode on a dataset that was not loaded).
  uint64_t probe_misses = 0;
  // Open loop: requests due before the end that were never sent because the probe had fallen
  // behind (the server could not keep up with --rate). Not in probe_latency.
  uint64_t probe_unsent = 0;
  uint64_t writer_ops = 0;
  uint64_t writer_error_replies = 0;
  // The text of the first error reply seen by anyone (OOM, MISCONF, WRONGTYPE...), if any.
  std::string first_error_reply;

  std::vector<TimelineRow> timeline;

  // Empty when the run ended normally; otherwise the sentence saying why it ended early (a
  // connection lost or timed out mid-run). The measurements up to that point are kept.
  std::string failure;

  double probe_throughput() const noexcept;
  double writer_throughput() const noexcept;
};

// What a live progress display shows; handed to the callback once per timeline interval.
struct LiveStats {
  std::chrono::nanoseconds elapsed{0};
  uint64_t probe_ops = 0;
  uint64_t writer_ops = 0;
  // p99 of the probe's latest finished timeline interval, 0 before the first one.
  uint64_t last_interval_p99_ns = 0;
};
using LiveCallback = std::function<void(const LiveStats&)>;

// Runs the probe and the writers against an already loaded dataset until `duration` passes or
// `stop` becomes true, and returns what they measured. The probe and each writer get a thread;
// the calling thread keeps the timeline clock and calls `on_interval` (if set) once per
// interval. To trace alongside, call this from a thread of your own.
//
// Connects every connection before starting the clock and throws LoadgenError if any fails.
// A connection lost mid-run stops the whole run and is reported in LoadgenResult::failure.
// SIGPIPE is blocked on the worker threads, so a closed socket is an error, not a signal.
LoadgenResult run_load(const LoadgenOptions& options, std::atomic<bool>& stop, const LiveCallback& on_interval = {});

}  // namespace thptrace::loadgen
