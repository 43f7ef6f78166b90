// SPDX-License-Identifier: Apache-2.0
// The probe: one connection, one request in flight, every round trip timed.

#include <sys/prctl.h>

#include <optional>
#include <thread>

#include "loadgen/schedule.h"
#include "loadgen/workers.h"

namespace thptrace::loadgen::detail {
namespace {

// A late wake-up lands in every open-loop latency (counted from the intended send time), and on a
// busy host a sleep overshoots by tens of µs even with the least timer slack. So the probe sleeps
// until spin_margin before its send time and spins the rest (the margin against the corrected p50,
// and the spin's cost: docs/development/measurements.md, "The load generator's probe").
constexpr auto spin_margin = std::chrono::microseconds(100);
// Upper bound on one sleep, so a slow rate still notices `stop` promptly.
constexpr auto max_sleep = std::chrono::milliseconds(50);

// Waits until `when`; false if the run was stopped meanwhile.
bool wait_until(clock::time_point when, const RunState& state) {
  for (;;) {
    if (state.should_stop()) return false;
    const auto now = clock::now();
    if (now >= when) return true;
    const auto remaining = when - now;
    if (remaining > spin_margin) {
      std::this_thread::sleep_for(std::min<clock::duration>(remaining - spin_margin, max_sleep));
    }
    // Below the margin: spin (checking stop on every turn is cheap, an atomic load).
  }
}

// Accumulates the per-interval rows of the timeline. Samples arrive in send order, which is
// also interval order, so an interval is final as soon as a later one gets a sample.
class TimelineBuilder {
 public:
  TimelineBuilder(clock::time_point start, std::chrono::nanoseconds interval, RunState& state)
      : start_(start), interval_(interval), state_(state) {}

  void record(clock::time_point sent, uint64_t latency_ns) {
    const auto offset = std::max(sent - start_, clock::duration::zero());
    const auto index = static_cast<size_t>(offset / interval_);
    close_until(index);
    current_.record(latency_ns);
  }

  // Closes the current interval and returns every row.
  std::vector<TimelineRow> finish() {
    close_until(rows_.size() + 1);
    return std::move(rows_);
  }

 private:
  void close_until(size_t index) {
    while (rows_.size() < index) {
      TimelineRow row;
      row.offset = interval_ * static_cast<int64_t>(rows_.size());
      row.probe_count = current_.count();
      if (!current_.empty()) {
        row.p50_ns = current_.percentile(50);
        row.p99_ns = current_.percentile(99);
        row.max_ns = current_.max();
        state_.last_interval_p99_ns.store(row.p99_ns, std::memory_order_relaxed);
        current_.reset();
      }
      rows_.push_back(row);
    }
  }

  clock::time_point start_;
  std::chrono::nanoseconds interval_;
  RunState& state_;
  LogLinearHistogram current_;
  std::vector<TimelineRow> rows_;
};

}  // namespace

ProbeOutcome run_probe(Connection& connection, const Dataset& dataset, const LoadgenOptions& options, RunState& state) {
  block_sigpipe_on_this_thread();
  // Timer slack is per thread; 1 ns asks for the most precise wake-ups the kernel gives.
  prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  connection.use_light_replies();

  ProbeOutcome out;
  TimelineBuilder timeline(state.start, state.interval, state);
  SplitMix64 rng(stream_seed(dataset.options().seed, 0));
  std::optional<OpenLoopSchedule> schedule;
  if (options.rate > 0) schedule.emplace(options.rate, state.start);

  std::string resp, key, value;
  uint64_t i = 0;
  for (;; ++i) {
    if (state.should_stop()) break;
    // Format before waiting, so building the command is never part of a latency.
    const uint64_t n = rng.below(dataset.key_count());
    Dataset::key(n, key);
    resp.clear();
    if (options.read_only) {
      append_resp_command(resp, {"GET", key});
    } else {
      dataset.value(n, value);
      append_resp_command(resp, {"SET", key, value});
    }

    clock::time_point intended;
    if (schedule) {
      intended = schedule->intended_send_time(i);
      if (intended >= state.deadline) break;
      if (!wait_until(intended, state)) break;
    }
    const auto sent = clock::now();
    if (!schedule) {
      if (sent >= state.deadline) break;
      intended = sent;
    }

    if (!connection.append_formatted(resp)) {
      state.fail(connection.error());
      break;
    }
    const std::optional<ReplyKind> reply = connection.read_light_reply();
    const auto done = clock::now();
    if (!reply) {
      state.fail(connection.error());
      break;
    }
    if (*reply == ReplyKind::error && out.error_replies++ == 0) out.first_error_reply = connection.last_error_reply();
    if (*reply == ReplyKind::nil) ++out.misses;

    // Open loop: the corrected latency, from the intended send time (as wrk2 counts it).
    const std::chrono::nanoseconds latency = schedule ? schedule->corrected_latency(i, done) : done - sent;
    out.latency.record(static_cast<uint64_t>(latency.count()));
    out.service_time.record(static_cast<uint64_t>(std::chrono::nanoseconds(done - sent).count()));
    timeline.record(intended, static_cast<uint64_t>(latency.count()));
    ++out.ops;
    state.probe_ops.fetch_add(1, std::memory_order_relaxed);
  }

  if (schedule) {
    const auto end = std::min(clock::now(), state.deadline);
    const uint64_t due = schedule->requests_due_before(end);
    out.unsent = due > out.ops ? due - out.ops : 0;
  }
  out.timeline = timeline.finish();
  return out;
}

}  // namespace thptrace::loadgen::detail
