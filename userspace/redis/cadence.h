#pragma once
// When a Watcher sends its next poll. The daemon watches many servers that fork rarely: it polls each
// slowly while none of its forks is in progress and fast while one is, and a poll goes out at once
// when the kernel reports a fork, a child's exit or the server's exit (wake). Without uprobes a
// fork's reason comes from the polls around it (correlate::reason_from_redis): one answered before
// the fork (the idle polls give it), one sent while the child lives (the wake on the fork event),
// and one sent after its exit (the wake on the exit event). The extras of a poll (LATENCY HISTOGRAM,
// CONFIG GET) go with every poll while a fork is in progress or its tail lasts and with every woken
// poll, and otherwise once per `extras` interval: idle, INFO alone keeps a fork's "before" state and
// the counters fresh, at a third of the round trips. Pure logic on the caller's clock, so the unit
// tests drive it; the Watcher holds it under its mutex.

#include <algorithm>
#include <chrono>

namespace thptrace::redis {

class PollCadence {
 public:
  using Clock = std::chrono::steady_clock;
  // Woken polls are this far apart at least, so a storm of fork events cannot turn the poller into a
  // busy loop against Redis.
  static constexpr std::chrono::milliseconds kMinGap{5};
  // After the last fork in progress ends, polls stay fast this long: Redis reaps its child at its
  // next cron tick (hz 10: within 100 ms) and only then updates its persistence figures.
  static constexpr std::chrono::milliseconds kTail{1000};

  // fast: while a fork is in progress; idle: otherwise (idle == fast: a constant cadence, as a
  // capture polls). extras: how often an idle poll carries the extras (0: every poll).
  PollCadence(std::chrono::milliseconds fast, std::chrono::milliseconds idle,
              std::chrono::milliseconds extras = std::chrono::milliseconds(0))
      : fast_(fast), idle_(std::max(idle, fast)), extras_(extras) {}

  // A poll is being sent at t: it answers every wake before t. Returns whether it carries the
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
  // A new connection (maybe to a restarted server): its first poll carries the extras.
  void on_connected() { have_extras_ = false; }
  // Asks for a poll sent after now, as soon as kMinGap allows; busy: whether a fork of the server is
  // in progress from now on.
  void wake(Clock::time_point now, bool busy) {
    woken_ = true;
    set_busy(now, busy);
  }
  // The daemon's periodic view of the forks in progress (it also covers an exit record that was lost).
  // Returns whether it changed anything (so that the poller need not be woken when it did not).
  bool set_busy(Clock::time_point now, bool busy) {
    if (busy_ == busy) return false;
    if (busy_) fast_until_ = now + kTail;
    busy_ = busy;
    return true;
  }
  bool busy() const { return busy_; }
  bool woken() const { return woken_; }
  // A fork is in progress, or its tail lasts.
  bool fast(Clock::time_point now) const { return busy_ || now < fast_until_; }
  // The interval in force at `now`.
  std::chrono::milliseconds interval(Clock::time_point now) const { return fast(now) ? fast_ : idle_; }
  // When the next poll is due; at or before now: send it at once.
  Clock::time_point next_due(Clock::time_point now) const {
    if (!have_sent_) return now;
    if (woken_) return last_sent_ + std::min<std::chrono::milliseconds>(kMinGap, fast_);
    // Fast as soon as a fork starts or while the tail lasts, even if the idle wait had begun.
    return last_sent_ + interval(now);
  }

 private:
  std::chrono::milliseconds fast_, idle_, extras_;
  Clock::time_point last_sent_{};
  Clock::time_point last_extras_{};
  bool have_extras_ = false;
  Clock::time_point fast_until_{};
  bool have_sent_ = false;
  bool woken_ = false;
  bool busy_ = false;
};

}  // namespace thptrace::redis
