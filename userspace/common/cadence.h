// SPDX-License-Identifier: Apache-2.0
#pragma once
// When a poller of a forking process takes its next round: the Redis watcher's polls (INFO, LATENCY
// HISTOGRAM) and the /proc sampler's samples, in the daemon and in a capture. Most of the time no
// fork is in progress and nothing needs a fine grain, so rounds go slowly (idle); from the moment the
// kernel reports a fork, a child's exit or the server's exit a round goes out at once (wake), and
// they go fast while a fork lives, while the server itself says a sync or a save is on (hold), and
// for a short tail after both end.
//
// Why a round at once: without uprobes a fork's reason comes from the polls around it
// (correlate::reason_from_redis): one answered before the fork (the idle rounds give it), one sent
// while the child lives (the wake on the fork event), and one sent after its exit (the wake on the
// exit event). The extras of a round (the Redis watcher's LATENCY HISTOGRAM and CONFIG GET) go with
// every round while it is fast and with every woken round, and otherwise once per `extras` interval.
// Logic on the caller's clock, so the unit tests drive it; its owner holds it under a mutex.

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>

namespace thptrace {

class Cadence {
 public:
  using Clock = std::chrono::steady_clock;
  // Woken rounds are this far apart at least, so a storm of fork events cannot turn the poller into
  // a busy loop against Redis or /proc.
  static constexpr std::chrono::milliseconds kMinGap{5};
  // After the last fork in progress ends, rounds stay fast this long: Redis reaps its child at its
  // next cron tick (hz 10: within 100 ms) and only then updates its persistence figures.
  static constexpr std::chrono::milliseconds kTail{1000};

  // fast: while a fork is in progress; idle: otherwise (idle == fast: a constant cadence). extras:
  // how often an idle round carries the extras (0: every round).
  Cadence(std::chrono::milliseconds fast, std::chrono::milliseconds idle,
          std::chrono::milliseconds extras = std::chrono::milliseconds(0))
      : fast_(fast), idle_(std::max(idle, fast)), extras_(extras) {}

  // A round is being taken at t: it answers every wake before t. Returns whether it carries the
  // extras.
  bool on_sent(Clock::time_point t) {
    const bool extras = extras_.count() == 0 || woken_ || fast(t) || !have_extras_ || t >= last_extras_ + extras_;
    if (extras) {
      last_extras_ = t;
      have_extras_ = true;
    }
    last_sent_ = t;
    have_sent_ = true;
    woken_ = false;
    return extras;
  }
  // A new connection (maybe to a restarted server): its first round carries the extras.
  void on_connected() { have_extras_ = false; }
  // Asks for a round taken after now, as soon as kMinGap allows; busy: whether a fork of the process
  // is in progress from now on.
  void wake(Clock::time_point now, bool busy) {
    woken_ = true;
    set_busy(now, busy);
  }
  // The kernel's view of the forks in progress (the daemon's periodic one also covers an exit
  // record that was lost). Returns whether it changed anything (so that the poller need not be
  // woken when it did not).
  bool set_busy(Clock::time_point now, bool busy) { return set(now, busy_, busy); }
  // The server's own view, from its last answer: a save, a rewrite or a replica's sync is on (a
  // replica waits for its RDB before the fork and receives it after the child exits, which the
  // kernel does not see). Returns whether it changed anything.
  bool hold(Clock::time_point now, bool held) { return set(now, held_, held); }
  bool busy() const { return busy_; }
  bool held() const { return held_; }
  bool woken() const { return woken_; }
  // A fork is in progress or the server holds, or the tail lasts.
  bool fast(Clock::time_point now) const { return busy_ || held_ || now < fast_until_; }
  // The interval in force at `now`.
  std::chrono::milliseconds interval(Clock::time_point now) const { return fast(now) ? fast_ : idle_; }
  // When the next round is due; at or before now: take it at once.
  Clock::time_point next_due(Clock::time_point now) const {
    if (!have_sent_) return now;
    if (woken_) return last_sent_ + std::min<std::chrono::milliseconds>(kMinGap, fast_);
    // Fast as soon as a fork starts or while the tail lasts, even if the idle wait had begun.
    return last_sent_ + interval(now);
  }
  // Sleeps on cv, whose lock guards this Cadence and is held, until the next round is due or stop()
  // holds; a wake or a change of busy notifies cv.
  template <class Stop>
  void wait(std::condition_variable& cv, std::unique_lock<std::mutex>& lock, Stop stop) const {
    while (!stop()) {
      const auto now = Clock::now();
      const auto due = next_due(now);
      if (due <= now) return;
      cv.wait_until(lock, due);
    }
  }

 private:
  bool set(Clock::time_point now, bool& flag, bool value) {
    if (flag == value) return false;
    const bool was = busy_ || held_;
    flag = value;
    if (was && !(busy_ || held_)) fast_until_ = now + kTail;
    return true;
  }

  std::chrono::milliseconds fast_, idle_, extras_;
  Clock::time_point last_sent_{};
  Clock::time_point last_extras_{};
  bool have_extras_ = false;
  Clock::time_point fast_until_{};
  bool have_sent_ = false;
  bool woken_ = false;
  bool busy_ = false;
  bool held_ = false;
};

}  // namespace thptrace
