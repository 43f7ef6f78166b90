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
#include <thread>
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
