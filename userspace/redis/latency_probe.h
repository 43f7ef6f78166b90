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
// One thread, one connection. A failed connect or a request that broke the connection backs off
// (backoff.h); the due times that fell in an outage are counted as missed, not timed.

#include <atomic>
#include <chrono>
#include <cstdint>
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

// The figures of the samples answered within [from_ns, to_ns]; nullopt when none was.
std::optional<ClientLatency> client_latency(const std::vector<ProbeSample>& samples, uint64_t from_ns, uint64_t to_ns,
                                            uint64_t client_timeout_us);

class LatencyProbe {
 public:
  struct Options {
    std::vector<Route> routes;  // tried in order at every connect (watcher.h's connect_first)
    ConnectOptions connect;     // its timeout bounds one request
    pid_t netns_pid = 0;        // see Watcher::Options
    uint32_t hz = 100;
    // Due times further behind than this (an outage, a reconnect) are skipped as missed.
    std::chrono::milliseconds max_catch_up{2000};
  };
  // At 100 Hz, about 2.9 hours of samples; later ones are counted in dropped().
  static constexpr size_t kMaxSamples = size_t{1} << 20;

  explicit LatencyProbe(Options options);
  ~LatencyProbe();
  LatencyProbe(const LatencyProbe&) = delete;
  LatencyProbe& operator=(const LatencyProbe&) = delete;

  // Stops the thread and returns every sample not taken yet, in due order.
  std::vector<ProbeSample> stop();
  // The samples since the last take(), in due order (the daemon's, once a second).
  std::vector<ProbeSample> take();
  // A rotated user and password (SIGHUP): the connection is made again with them.
  void set_credentials(std::string user, std::string password);
  uint64_t missed() const { return missed_; }
  uint64_t dropped() const { return dropped_; }

 private:
  void run();
  void record(const ProbeSample& s);

  Options options_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::vector<ProbeSample> samples_;  // under mu_
  std::string new_user_, new_password_;  // under mu_, with reconnect_
  bool reconnect_ = false;
  std::atomic<uint64_t> missed_{0}, dropped_{0};
  std::thread thread_;
};

}  // namespace thptrace::redis
