// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <stdexcept>

namespace thptrace::loadgen {

// The send plan of an open-loop probe: request i is due at t0 + i/R whatever happened to the
// requests before it. A closed-loop client waits for each reply before sending the next, so
// when the server stalls it simply stops asking and records one slow sample where a real
// client population would have queued hundreds ("coordinated omission"). Measuring each
// latency from the *intended* send time instead, as wrk2 does, charges every request that
// should have been sent during a stall with the time it spent waiting to be sent.
//
// Pure arithmetic on injected time points, so the correction can be tested without a server.
class OpenLoopSchedule {
 public:
  using clock = std::chrono::steady_clock;
  using time_point = clock::time_point;

  OpenLoopSchedule(double rate_per_second, time_point t0) : rate_(rate_per_second), t0_(t0) {
    if (!(rate_per_second > 0.0)) throw std::invalid_argument("open-loop rate must be positive");
  }

  double rate() const noexcept { return rate_; }
  time_point start() const noexcept { return t0_; }

  // t0 + i/R, rounded to the nanosecond. Computed from i each time (never by accumulating
  // intervals) so rounding does not drift over millions of requests.
  time_point intended_send_time(uint64_t i) const noexcept {
    const long double offset_ns = static_cast<long double>(i) * 1e9L / static_cast<long double>(rate_);
    return t0_ + std::chrono::nanoseconds(static_cast<int64_t>(offset_ns + 0.5L));
  }

  // When a single in-flight probe actually sends request i: on schedule, or as soon as the
  // previous reply arrives if that was late (the probe then catches up back to back).
  time_point send_time(uint64_t i, time_point previous_completion) const noexcept {
    return std::max(intended_send_time(i), previous_completion);
  }

  // Latency charged to request i: from its intended send time, not from when it was sent.
  std::chrono::nanoseconds corrected_latency(uint64_t i, time_point completion) const noexcept {
    const auto latency = completion - intended_send_time(i);
    return latency.count() < 0 ? std::chrono::nanoseconds(0)
                               : std::chrono::duration_cast<std::chrono::nanoseconds>(latency);
  }

  // Index of the first request due at or after `t` (how many requests are due before `t`).
  uint64_t requests_due_before(time_point t) const noexcept {
    if (t <= t0_) return 0;
    const long double elapsed_ns = static_cast<long double>(std::chrono::nanoseconds(t - t0_).count());
    const auto n = static_cast<uint64_t>(elapsed_ns * static_cast<long double>(rate_) / 1e9L);
    // Guard against the rounding in intended_send_time: make n the exact boundary.
    uint64_t i = n > 0 ? n - 1 : 0;
    while (intended_send_time(i) < t) ++i;
    return i;
  }

 private:
  double rate_;
  time_point t0_;
};

}  // namespace thptrace::loadgen
