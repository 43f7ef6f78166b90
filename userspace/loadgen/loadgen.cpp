// SPDX-License-Identifier: Apache-2.0
#include "loadgen/loadgen.h"

#include <fmt/format.h>
#include <pthread.h>
#include <time.h>

#include <condition_variable>
#include <csignal>
#include <exception>
#include <system_error>
#include <thread>

#include "loadgen/workers.h"

namespace thptrace::loadgen {
namespace detail {

void RunState::fail(std::string why) {
  {
    std::lock_guard lock(failure_mutex_);
    if (failure_.empty()) failure_ = std::move(why);
  }
  aborted_.store(true, std::memory_order_relaxed);
}

std::string RunState::failure() const {
  std::lock_guard lock(failure_mutex_);
  return failure_;
}

uint64_t stream_seed(uint64_t dataset_seed, unsigned stream) noexcept {
  return SplitMix64(dataset_seed ^ (0x9e3779b97f4a7c15ULL * (uint64_t{stream} + 1))).next();
}

void block_sigpipe_on_this_thread() noexcept {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

}  // namespace detail

namespace {

using detail::clock;

uint64_t monotonic_now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

// Counts running workers, so the timeline clock can stop as soon as the last one returns.
class Latch {
 public:
  explicit Latch(size_t count) : count_(count) {}
  void arrive() {
    std::lock_guard lock(mutex_);
    if (--count_ == 0) done_.notify_all();
  }
  // True once every worker arrived; waits at most until `until`.
  bool wait_until(clock::time_point until) {
    std::unique_lock lock(mutex_);
    return done_.wait_until(lock, until, [&] { return count_ == 0; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable done_;
  size_t count_;
};

// Runs `body` and records an escaping exception as the run's failure: an exception must not
// leave a worker thread (std::terminate), and the others must stop too.
template <typename Body>
void guarded(detail::RunState& state, Latch& latch, Body&& body) {
  try {
    body();
  } catch (const std::exception& e) {
    state.fail(e.what());
  }
  latch.arrive();
}

}  // namespace

LatencySummary LatencySummary::of(const LogLinearHistogram& h) {
  LatencySummary s;
  s.count = h.count();
  s.mean_ns = h.mean();
  s.min_ns = h.min();
  s.p50_ns = h.percentile(50);
  s.p90_ns = h.percentile(90);
  s.p99_ns = h.percentile(99);
  s.p99_9_ns = h.percentile(99.9);
  s.p99_99_ns = h.percentile(99.99);
  s.max_ns = h.max();
  return s;
}

double LoadgenResult::probe_throughput() const noexcept {
  const double seconds = std::chrono::duration<double>(elapsed).count();
  return seconds > 0 ? static_cast<double>(probe_ops) / seconds : 0.0;
}

double LoadgenResult::writer_throughput() const noexcept {
  const double seconds = std::chrono::duration<double>(elapsed).count();
  return seconds > 0 ? static_cast<double>(writer_ops) / seconds : 0.0;
}

LoadgenResult run_load(const LoadgenOptions& options, std::atomic<bool>& stop, const LiveCallback& on_interval) {
  if (options.rate < 0) throw LoadgenError("the probe rate cannot be negative (--rate)");
  if (options.interval <= std::chrono::nanoseconds::zero())
    throw LoadgenError("the timeline interval must be positive");
  if (options.duration < std::chrono::nanoseconds::zero())
    throw LoadgenError("the duration cannot be negative (--duration)");
  const Dataset dataset(options.dataset);

  // Every connection is up before the clock starts: connecting is not part of the load.
  Connection probe_connection = Connection::open(options.connection);
  std::vector<Connection> writer_connections;
  writer_connections.reserve(options.writers);
  for (unsigned w = 0; w < options.writers; ++w) writer_connections.push_back(Connection::open(options.connection));

  LoadgenResult result;
  result.open_loop = options.rate > 0;
  result.rate = options.rate;
  result.read_only = options.read_only;

  const auto start = clock::now();
  result.start_monotonic_ns = monotonic_now_ns();
  const auto deadline =
      options.duration == std::chrono::nanoseconds::zero() ? clock::time_point::max() : start + options.duration;
  detail::RunState state(stop, start, deadline, options.interval);
  Latch latch(1 + options.writers);

  detail::ProbeOutcome probe;
  std::vector<detail::WriterOutcome> writers(options.writers);
  std::vector<std::thread> threads;
  threads.reserve(1 + options.writers);
  try {
    threads.emplace_back(
        [&] { guarded(state, latch, [&] { probe = detail::run_probe(probe_connection, dataset, options, state); }); });
    for (unsigned w = 0; w < options.writers; ++w) {
      threads.emplace_back([&, w] {
        guarded(state, latch,
                [&] { writers[w] = detail::run_writer(writer_connections[w], dataset, options, w, state); });
      });
    }
  } catch (const std::system_error& e) {
    // The threads already started see the failure and return; a joinable std::thread must not
    // be destroyed.
    state.fail(e.what());
    for (auto& t : threads) t.join();
    throw LoadgenError(fmt::format("cannot start the load generator's threads: {}", e.what()));
  }

  // The timeline clock: the writers' counter sampled at every interval boundary.
  std::vector<uint64_t> writer_ops_at_boundary;
  for (auto boundary = start + options.interval;; boundary += options.interval) {
    const bool finished = latch.wait_until(boundary);
    writer_ops_at_boundary.push_back(state.writer_ops.load(std::memory_order_relaxed));
    if (on_interval) {
      on_interval(LiveStats{clock::now() - start, state.probe_ops.load(std::memory_order_relaxed),
                            state.writer_ops.load(std::memory_order_relaxed),
                            state.last_interval_p99_ns.load(std::memory_order_relaxed)});
    }
    if (finished) break;
  }
  for (auto& t : threads) t.join();
  result.elapsed = clock::now() - start;
  result.failure = state.failure();

  result.probe_latency = std::move(probe.latency);
  result.probe_service_time = std::move(probe.service_time);
  result.probe_ops = probe.ops;
  result.probe_error_replies = probe.error_replies;
  result.probe_misses = probe.misses;
  result.probe_unsent = probe.unsent;
  result.first_error_reply = probe.first_error_reply;
  for (const auto& w : writers) {
    result.writer_batch_latency.merge(w.batch_latency);
    result.writer_ops += w.ops;
    result.writer_error_replies += w.error_replies;
    if (result.first_error_reply.empty()) result.first_error_reply = w.first_error_reply;
  }

  // One row per interval the run touched; the last boundary sample closes the partial interval.
  result.timeline = std::move(probe.timeline);
  const size_t rows =
      static_cast<size_t>((result.elapsed + options.interval - std::chrono::nanoseconds(1)) / options.interval);
  while (result.timeline.size() < rows) {
    TimelineRow row;
    row.offset = options.interval * static_cast<int64_t>(result.timeline.size());
    result.timeline.push_back(row);
  }
  writer_ops_at_boundary.back() = result.writer_ops;
  uint64_t previous = 0;
  for (size_t r = 0; r < result.timeline.size(); ++r) {
    const uint64_t at = r < writer_ops_at_boundary.size() ? writer_ops_at_boundary[r] : result.writer_ops;
    result.timeline[r].writer_ops = at - previous;
    previous = at;
  }
  return result;
}

}  // namespace thptrace::loadgen
