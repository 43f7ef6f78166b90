// SPDX-License-Identifier: Apache-2.0
#include "redis/latency_probe.h"

#include <time.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "common/log.h"
#include "proc/sampler.h"
#include "redis/backoff.h"

namespace thptrace::redis {
namespace {

// Sleeps until CLOCK_MONOTONIC reaches ns, or stop is set (checked every 50 ms).
void sleep_until(uint64_t ns, const std::atomic<bool>& stop) {
  constexpr uint64_t kSlice = 50'000'000;
  for (uint64_t now = proc::monotonic_ns(); now < ns && !stop; now = proc::monotonic_ns()) {
    const uint64_t until = std::min(ns, now + kSlice);
    timespec ts{static_cast<time_t>(until / 1'000'000'000), static_cast<long>(until % 1'000'000'000)};
    ::clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr);
  }
}

// Counts a failure on backoff and sleeps the wait it gives.
void wait_out(Backoff& backoff, const std::atomic<bool>& stop) {
  const auto wait = std::chrono::duration_cast<std::chrono::nanoseconds>(backoff.failed(Backoff::Clock::now()));
  sleep_until(proc::monotonic_ns() + static_cast<uint64_t>(wait.count()), stop);
}

double nearest_rank_us(const std::vector<uint64_t>& sorted_ns, double p) {
  const auto n = sorted_ns.size();
  const auto rank = static_cast<size_t>(std::ceil(p * static_cast<double>(n)));
  return static_cast<double>(sorted_ns[std::clamp<size_t>(rank, 1, n) - 1]) / 1e3;
}

}  // namespace

std::optional<ClientLatency> client_latency(const std::vector<ProbeSample>& samples, uint64_t from_ns, uint64_t to_ns,
                                            uint64_t client_timeout_us) {
  std::vector<uint64_t> ns;
  ClientLatency out;
  for (const auto& s : samples) {
    if (s.done_ns() < from_ns || s.done_ns() > to_ns) continue;
    ns.push_back(s.latency_ns);
    if (s.failed || s.latency_ns > client_timeout_us * 1000) ++out.over_timeout;
  }
  if (ns.empty()) return std::nullopt;
  std::sort(ns.begin(), ns.end());
  out.samples = ns.size();
  out.p50_us = nearest_rank_us(ns, 0.50);
  out.p99_us = nearest_rank_us(ns, 0.99);
  out.p999_us = nearest_rank_us(ns, 0.999);
  out.max_us = static_cast<double>(ns.back()) / 1e3;
  return out;
}

LatencyProbe::LatencyProbe(Options options) : options_(std::move(options)) {
  options_.hz = std::max<uint32_t>(options_.hz, 1);
  thread_ = std::thread([this] { run(); });
}

LatencyProbe::~LatencyProbe() { stop(); }

std::vector<ProbeSample> LatencyProbe::stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  std::lock_guard lock(mu_);
  return samples_;
}

void LatencyProbe::set_credentials(std::string user, std::string password) {
  std::lock_guard lock(mu_);
  new_user_ = std::move(user);
  new_password_ = std::move(password);
  reconnect_ = true;
}

std::vector<ProbeSample> LatencyProbe::take() {
  std::lock_guard lock(mu_);
  return std::exchange(samples_, {});
}

void LatencyProbe::record(const ProbeSample& s) {
  std::lock_guard lock(mu_);
  if (samples_.size() >= kMaxSamples) {
    ++dropped_;
    return;
  }
  samples_.push_back(s);
}

void LatencyProbe::run() {
  const uint64_t period = 1'000'000'000ULL / options_.hz;
  const auto max_behind = static_cast<uint64_t>(std::chrono::nanoseconds(options_.max_catch_up).count());
  Backoff backoff;
  std::unique_ptr<Client> client;
  std::string last_error;
  uint64_t due = proc::monotonic_ns();
  while (!stop_) {
    sleep_until(due, stop_);
    if (stop_) break;
    // Far behind (an outage, a reconnect): those due times are missed, not timed.
    if (const uint64_t now = proc::monotonic_ns(); now > due + max_behind) {
      const uint64_t skipped = (now - due) / period;
      missed_ += skipped;
      due += skipped * period;
    }
    {
      std::lock_guard lock(mu_);
      if (std::exchange(reconnect_, false)) {
        options_.connect.user = std::move(new_user_);
        options_.connect.password = std::move(new_password_);
        client.reset();
      }
    }
    if (!client) {
      std::string error;
      client = connect_first(options_.routes, options_.connect, options_.netns_pid, stop_, nullptr, &error);
      if (!client) {
        if (error != last_error) log::debug("latency probe: {}", error);
        last_error = error;
        wait_out(backoff, stop_);
        continue;
      }
      last_error.clear();
      // Timed from here on: the due times of the connect itself were not a client's requests.
      due = std::max(due, proc::monotonic_ns());
    }
    const auto reply = client->command({"PING"});
    const uint64_t done = proc::monotonic_ns();
    const bool failed = !reply && client->broken();
    record({due, done - due, failed});
    due += period;
    if (!client->broken()) {
      backoff.succeeded();
      continue;
    }
    // A request that broke the connection (no reply in time, a reset): connected again only after
    // the backoff, so a server that accepts and never answers is not asked in a loop.
    client.reset();
    wait_out(backoff, stop_);
  }
}

}  // namespace thptrace::redis
