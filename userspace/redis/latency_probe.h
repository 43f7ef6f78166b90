// SPDX-License-Identifier: Apache-2.0
#pragma once
// What a client of the server feels: a light probe that sends PING on a connection of its own at a
// fixed rate and times each reply from the moment the request was meant to go out, not from when it
// went. A server frozen for F ms (in fork(), in a burst of copy-on-write faults) then shows a request
// of about F ms however few requests were out, and the ones that were due during the freeze are sent
// as soon as it ends, each timed from its own due time: no coordinated omission. Redis's LATENCY
// HISTOGRAM times command execution only, in powers of two; this times the wait in the queue too, in
// ns.
//
// The probes of many servers share one thread (ProbeLoop): one epoll set, due times on a common grid
// so one wake-up sends every server's request. A probe may go slower while no child of its server
// lives (idle_hz); a fork's freeze is still timed at its full length, by one request sent as soon as
// the fork is seen and timed from the fork's start (fork_began). A failed connect or a request that
// broke the connection backs off (backoff.h); the due times that fell in an outage are counted as
// missed, not timed.

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "redis/client.h"
#include "redis/watcher.h"

namespace thptrace::redis {

// One request: when it was due and how long after that its reply came (CLOCK_MONOTONIC ns).
struct ProbeSample {
  uint64_t due_ns = 0;
  uint64_t latency_ns = 0;
  bool failed = false;  // no reply: the connection broke or timed out (latency to the failure)
  uint64_t done_ns() const { return due_ns + latency_ns; }
};

// Latency figures of a set of probe samples, in µs, exact (nearest rank over the samples).
struct ClientLatency {
  uint64_t samples = 0;
  double p50_us = 0, p99_us = 0, p999_us = 0, max_us = 0;
  uint64_t over_timeout = 0;  // samples slower than the clients' timeout (a failure counts)
};

// The figures of the samples answered within [from_ns, to_ns); nullopt when none was.
std::optional<ClientLatency> client_latency(const std::vector<ProbeSample>& samples, uint64_t from_ns, uint64_t to_ns,
                                            uint64_t client_timeout_us);

// The figures of requests added one by one, in memory that does not grow with them (a capture keeps
// only some of its requests: report/retention.h). The counts and the maximum are exact; a
// percentile is the upper bound of the bucket its nearest-rank request fell in, buckets 1/64 of an
// octave wide: at most 1.1% over the exact figure, never under it.
class LatencyTotals {
 public:
  explicit LatencyTotals(uint64_t client_timeout_us) : client_timeout_us_(client_timeout_us) {}
  void add(const ProbeSample& s);
  // nullopt when none was added.
  std::optional<ClientLatency> figures() const;

  static constexpr int kBucketsPerOctave = 64;

 private:
  uint64_t client_timeout_us_;
  std::vector<uint64_t> buckets_;  // by floor(log2(latency ns) * kBucketsPerOctave); 0 ns in the first
  ClientLatency totals_;           // samples, over_timeout
  uint64_t max_ns_ = 0;
};

class ProbeLoop;
struct ProbeState;

class LatencyProbe {
 public:
  struct Options {
    std::vector<Route> routes;  // tried in order at every connect (watcher.h's connect_first)
    ConnectOptions connect;     // its timeout bounds one request
    pid_t netns_pid = 0;        // see Watcher::Options
    uint32_t hz = 100;
    // Requests a second while set_busy(false) (no child of the server lives); 0: hz always.
    uint32_t idle_hz = 0;
    // Due times further behind than this (an outage, a reconnect) are skipped as missed.
    std::chrono::milliseconds max_catch_up{2000};
  };
  // At 100 Hz, about 2.9 hours of samples; later ones are counted in dropped().
  static constexpr size_t kMaxSamples = size_t{1} << 20;

  // loop: the thread that sends its requests, shared with other probes; null: a thread of its own.
  explicit LatencyProbe(Options options, std::shared_ptr<ProbeLoop> loop = nullptr);
  ~LatencyProbe();
  LatencyProbe(const LatencyProbe&) = delete;
  LatencyProbe& operator=(const LatencyProbe&) = delete;

  // Sends no more and returns every sample not taken yet, in due order.
  std::vector<ProbeSample> stop();
  // The samples since the last take() (the daemon's, once a second). In due order, but for the one
  // request of a fork_began(), which is due at the fork's start.
  std::vector<ProbeSample> take();
  // A rotated user and password (SIGHUP): the connection is made again with them.
  void set_credentials(std::string user, std::string password);
  // A child of the server lives (a fork and its tail): requests at hz, else at idle_hz.
  void set_busy(bool busy);
  // The server began a fork at fork_ns (CLOCK_MONOTONIC; the kernel's): unless a request that was
  // out before then already waited through it, one request goes at once, timed from fork_ns. Its
  // figure is the freeze a client that asked as the fork began saw (more, by the time the probe took
  // to learn of the fork, when the server was already answering again).
  void fork_began(uint64_t fork_ns);
  uint64_t missed() const;
  uint64_t dropped() const;

 private:
  std::shared_ptr<ProbeState> state_;
  std::shared_ptr<ProbeLoop> loop_;
};

// One thread that sends the requests of many probes, on one epoll set with one timer. Connects,
// which may wait their timeout, run on a short-lived thread each, so a silent server holds up no
// other probe. A thread of its own inherits its creator's capabilities (caps.h): create it where the
// probes' connects may enter a network namespace.
class ProbeLoop {
 public:
  ProbeLoop();
  ~ProbeLoop();  // stops and joins the thread; connects in flight are abandoned, then waited for
  ProbeLoop(const ProbeLoop&) = delete;
  ProbeLoop& operator=(const ProbeLoop&) = delete;

 private:
  friend class LatencyProbe;
  struct Slot;
  void add(std::shared_ptr<ProbeState> state);
  void remove(const ProbeState* state);
  void wake();  // from any thread: the loop reads its probes' states again
  void run();
  void take_changes();
  // Does what is due for one probe at now; returns when it next needs the loop (UINT64_MAX: when woken).
  uint64_t step(Slot& s, uint64_t now);
  void on_readable(Slot& s);
  void send(Slot& s, uint64_t due, uint64_t now);
  void finish(Slot& s, uint64_t done, bool failed);
  // Fails the request out (if any) at now (0: the clock's now) and connects again after the backoff.
  void drop_connection(Slot& s, uint64_t now);

  int epoll_ = -1, wake_fd_ = -1, timer_fd_ = -1;
  std::shared_ptr<const int> wake_owner_;  // closes wake_fd_ after the last connect in flight
  std::mutex mu_;
  std::vector<std::shared_ptr<ProbeState>> added_;  // under mu_
  std::vector<const ProbeState*> removed_;          // under mu_
  std::atomic<bool> stop_{false};
  std::vector<std::unique_ptr<Slot>> slots_;  // the loop thread's
  std::thread thread_;
};

}  // namespace thptrace::redis
