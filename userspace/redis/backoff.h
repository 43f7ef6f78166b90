// SPDX-License-Identifier: Apache-2.0
#pragma once
// How long a poller waits before it tries a server again after a failure: doubling from `first` up
// to `cap`, back to `first` only when a try fully succeeded. A server that refuses every command
// (an ACL user without INFO, a port that accepts and never answers) is then asked a few times a
// minute, not in a loop. Logic on the caller's clock, so the unit tests drive it.

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

namespace thptrace::redis {

class Backoff {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kFirst{1000};
  static constexpr std::chrono::milliseconds kCap{30'000};

  explicit Backoff(std::chrono::milliseconds first = kFirst, std::chrono::milliseconds cap = kCap)
      : first_(std::max(first, std::chrono::milliseconds(1))), cap_(std::max(cap, first_)), next_(first_) {}

  // A failure at now: returns the wait before the next try, and doubles the one after.
  std::chrono::milliseconds failed(Clock::time_point now) {
    const auto wait = next_;
    next_ = std::min(next_ * 2, cap_);
    not_before_ = now + wait;
    ++failures_;
    return wait;
  }
  void succeeded() {
    next_ = first_;
    not_before_ = {};
    failures_ = 0;
  }
  // Whether a try is allowed at now (always, until something failed).
  bool due(Clock::time_point now) const { return now >= not_before_; }
  // Failures since the last success.
  unsigned failures() const { return failures_; }

 private:
  std::chrono::milliseconds first_, cap_, next_;
  Clock::time_point not_before_{};
  unsigned failures_ = 0;
};

// An optional command of a poll (LATENCY HISTOGRAM, CONFIG GET, CLIENT LIST): a server that refuses
// it (an older version, a renamed or forbidden command) is asked again only after a backoff of its
// own, while the poll goes on without that figure. Says why the figure is missing.
struct OptionalCommand {
  Backoff backoff;
  std::string refused;  // the last refusal ("CONFIG GET refused: ERR ..."); "" once answered again

  bool due(Backoff::Clock::time_point now) const { return backoff.due(now); }
  // Returns whether the reason changed (worth one log line).
  bool fail(Backoff::Clock::time_point now, const std::string& why) {
    backoff.failed(now);
    if (why == refused) return false;
    refused = why;
    return true;
  }
  // Returns whether it had been refused (worth one log line).
  bool answered() {
    backoff.succeeded();
    return !std::exchange(refused, std::string()).empty();
  }
};

}  // namespace thptrace::redis
