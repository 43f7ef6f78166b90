// SPDX-License-Identifier: Apache-2.0
#pragma once
// Finding the host process of a watched server (redis::locate_server: a connect, CLIENT INFO, INFO
// server and /proc scans, seconds when the server is slow) off the daemon's main loop, which must
// keep draining the ring buffer for every target. One worker thread, started by the first request
// (after the daemon dropped its capabilities), runs the requests in turn; the main loop takes the
// results, and paces each target's requests with LocatePacing.

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "proc/resolve.h"
#include "redis/client.h"
#include "redis/watcher.h"

namespace thptrace::daemon {

// At most one locate of a target at a time, and one start every `every` at most, whatever the
// server's process_id says (a server that changes it at every poll gets no more).
class LocatePacing {
 public:
  using Clock = std::chrono::steady_clock;
  explicit LocatePacing(std::chrono::milliseconds every) : every_(every) {}
  // Whether a locate may start at now; when it may, it counts as started.
  bool try_start(Clock::time_point now);
  // The locate started last has its result.
  void finished() { in_flight_ = false; }
  bool in_flight() const { return in_flight_; }
  // The process searched for exited (the kernel says so, not the server): the next search may
  // start at once, not a gap after the last.
  void process_gone() { last_start_.reset(); }

 private:
  std::chrono::milliseconds every_;
  bool in_flight_ = false;
  std::optional<Clock::time_point> last_start_;
};

// One target's search for its process: the pace of its searches, INFO's process_id when its process
// was found, when its last process was seen gone, the polls held until the first search has its
// result, and how each failure is told (a new one at debug, the same one again once at warn).
class TargetLocate {
 public:
  static constexpr size_t kMaxHeld = 64;
  explicit TargetLocate(std::chrono::milliseconds every) : pacing(every) {}

  LocatePacing pacing;
  int64_t resolved_process_id = 0;  // INFO's process_id when the process was found
  uint64_t lost_ns = 0;             // CLOCK_MONOTONIC when its last process was seen gone

  // No process yet (added by address, or its process exited): its polls are held until the first
  // search for it has its result.
  void await_first() { awaiting_first_ = true; }
  // Holds s (true) while the first search runs, up to kMaxHeld polls; else false, s untouched.
  bool hold(redis::Snapshot& s);
  // The first search has its result: holds no more. Both return the polls held, in order.
  std::vector<redis::Snapshot> release();
  std::vector<redis::Snapshot> take_held() { return std::exchange(held_, {}); }

  enum class Tell { debug, warn, nothing };
  // A search failed with `error`: how loudly to log it.
  Tell failed(const std::string& error);
  // A search found the process.
  void found();

 private:
  bool awaiting_first_ = false;
  std::vector<redis::Snapshot> held_;
  std::string last_error_;
  bool error_told_ = false;
};

class Locator {
 public:
  struct Request {
    size_t target = 0;                  // the caller's id, handed back with the result
    std::optional<redis::Route> tcp{};  // the TCP route to ask CLIENT INFO on (none: unix only)
    redis::ConnectOptions connect{};
    int64_t process_id = 0;  // INFO's, the fallback when the socket tables say nothing
  };
  struct Result {
    size_t target = 0;
    int64_t process_id = 0;
    proc::Resolution found;
  };

  Locator() = default;
  ~Locator();
  Locator(const Locator&) = delete;
  Locator& operator=(const Locator&) = delete;

  void submit(Request r);
  // The results finished since the last call.
  std::vector<Result> take();

 private:
  void run();

  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::deque<Request> queue_;
  std::vector<Result> done_;
  std::thread thread_;
};

// What the worker runs for one request: the server's host pid from the kernel's socket tables over
// its TCP route; without one, INFO's process_id when that is a process of our PID namespace.
proc::Resolution locate(const Locator::Request& r);

}  // namespace thptrace::daemon
